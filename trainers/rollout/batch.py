"""`Rollout`: a batch of prompts, their G completions each, rewards and advantages, as per-sequence host
arrays; and `reward_metrics`. What every rollout path produces and the update consumes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from trainers.data.encoding import bucket_width
from trainers.rollout.episodes import episode_metrics


def reward_metrics(names: tuple[str, ...], values: np.ndarray) -> dict[str, float]:
    """{"reward/<name>": mean of column k of `values`} for each reward function `names[k]` ([N, K]
    raw scores, before weights and the overlong penalty): which part of the reward a run learns.
    Nothing for an empty rollout."""
    if values.shape[0] == 0:
        return {}
    means = values.mean(axis=0)
    return {f"reward/{name}": float(means[k]) for k, name in enumerate(names)}


_LARGEST = ("peak_pages", "pool_pages")


def generation_figures(stats: Any) -> dict[str, float]:
    """The figures of an `engine.batching.EngineStats` a rollout keeps (see `Rollout.generation`)."""
    return {
        "slot_steps": float(stats.slot_steps),
        "decode_tokens": float(stats.decode_tokens),
        "prefill_s": stats.prefill_s,
        "decode_s": stats.decode_s,
        "peak_pages": float(stats.peak_pages_in_use),
        "pool_pages": float(stats.pool_pages),
    }


def join_generation(figures: list[dict[str, float] | None]) -> dict[str, float] | None:
    """Several rollouts' generation figures as one: counts and times add, peaks take the largest."""
    recorded = [f for f in figures if f is not None]
    if not recorded:
        return None
    return {name: (max if name in _LARGEST else sum)(f.get(name, 0.0) for f in recorded) for name in recorded[0]}


def generation_metrics(figures: dict[str, float] | None) -> dict[str, float]:
    """generation/slot_utilisation (useful decode tokens / decode slot-steps run),
    generation/kv_pages_peak_fraction (the most KV pages in use / the pool), generation/tokens_per_s
    (decode tokens per second of prefill and decode), timing/generation_prefill_s and
    timing/generation_decode_s (`metric_names.GENERATION_METRICS`)."""
    if not figures or not figures.get("slot_steps"):
        return {}
    busy_s = figures["prefill_s"] + figures["decode_s"]
    return {
        "generation/slot_utilisation": figures["decode_tokens"] / figures["slot_steps"],
        "generation/kv_pages_peak_fraction": figures["peak_pages"] / max(figures["pool_pages"], 1.0),
        "generation/tokens_per_s": figures["decode_tokens"] / busy_s if busy_s else 0.0,
        "timing/generation_prefill_s": figures["prefill_s"],
        "timing/generation_decode_s": figures["decode_s"],
    }


@dataclasses.dataclass
class Rollout:
    """Prompts, their G completions each, rewards and advantages: per-sequence host arrays.

    Shapes: P prompts, N = P * G sequences, Lp the prompt length (left-padded), Lc = max_new_tokens.
    A rollout can be cut into prompt groups (`group(j)`) and put back together (`Rollout.concat`),
    which is how the asynchronous loop buffers and trains it.
    """

    examples: list[dict[str, Any]]  # [P] the prompts' dataset items
    num_generations: int  # G
    prompt_tokens: np.ndarray  # [N, Lp] int32, left-padded
    prompt_valid: np.ndarray  # [N, Lp] bool
    completion_tokens: np.ndarray  # [N, Lc] int32
    completion_mask: np.ndarray  # [N, Lc] bool
    sample_logprobs: np.ndarray  # [N, Lc] float32, log pi_gen: recorded when sampling (generate.sample_token)
    token_versions: np.ndarray  # [N, Lc] int32, the version of the weights that sampled each token
    completions: list[str]  # [N] decoded
    rewards: np.ndarray  # [N] float32 weighted sum
    correct: np.ndarray  # [N] bool
    advantages: np.ndarray  # [N] float32
    generate_s: float  # seconds spent encoding, generating, decoding and scoring these sequences
    # [N] bool: the sequence enters the loss (False: truncated under rollout.overlong_filter, or a group
    # dynamic sampling could not replace); None = every sequence
    in_loss: np.ndarray | None = None
    # [N] bool: cut off by the token budget, no end of sequence (`sampling_filters.truncated`); None = none
    truncated: np.ndarray | None = None
    # [N] float32: DAPO's overlong penalty included in `rewards` (0 when off); None = zeros
    overlong_penalties: np.ndarray | None = None
    # prompts sampled to make this rollout (dynamic sampling samples more than it keeps); None = prompts
    prompts_consumed: int | None = None
    # the reward spec's functions, in spec order, and [N, K] float32 their raw (unweighted) scores:
    # reward/<name> is reported per step (`reward_metrics`); () and None = none recorded
    reward_names: tuple[str, ...] = ()
    reward_values: np.ndarray | None = None
    # [N] per sequence {reward name: what it found} (code_tests: each test's result), shown with the
    # samples; None = no reward gave any (`rewards.score_with_details`)
    reward_details: list[dict[str, Any]] | None = None
    # Multi-turn episodes: [N, Lc] bool, the tokens the model sampled (what the loss, log-probs, KL and
    # importance weights cover; an environment's replies are context only), and each sequence's
    # episode for display and env/* metrics (`episodes.Episode.display`). None = single-turn: the
    # loss covers completion_mask and there are no episodes.
    loss_mask: np.ndarray | None = None
    episodes: list[dict[str, Any]] | None = None
    # What the generation engine did for these sequences (`generation_figures`): slot_steps,
    # decode_tokens, prefill_s, decode_s (they add up over rollouts; a group gets a 1 / P share) and
    # peak_pages, pool_pages (the largest). None = not recorded.
    generation: dict[str, float] | None = None
    # seconds the reward functions took to score these sequences (part of generate_s; a judge model's
    # passes, the sandbox's programs): timing/reward_s. Adds up over rollouts; a group gets a 1 / P share.
    reward_s: float = 0.0
    # [N, Lc] float32: the sampler's log-prob of each token under the full distribution, before
    # top-k / top-p (`GenerationResult.full_logprobs`), as the trainer's log-prob pass scores it: the
    # sampler's side of the mismatch figures and corrections (`algo.mismatch`). None = sample_logprobs
    # (sampled without a filter, where the two are the same)
    full_logprobs: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.completions)
        if self.in_loss is None:
            self.in_loss = np.ones(n, bool)
        if self.truncated is None:
            self.truncated = np.zeros(n, bool)
        if self.overlong_penalties is None:
            self.overlong_penalties = np.zeros(n, np.float32)
        if self.prompts_consumed is None:
            self.prompts_consumed = len(self.examples)
        if self.reward_values is None:
            self.reward_values = np.zeros((n, len(self.reward_names)), np.float32)
        if self.full_logprobs is None:
            self.full_logprobs = self.sample_logprobs

    @property
    def prompts(self) -> int:
        return len(self.examples)

    @property
    def sequences(self) -> int:
        return len(self.completions)

    def total_tokens(self) -> int:
        return int(self.prompt_valid.sum() + self.completion_mask.sum())

    def with_prompt_width(self, bucket_tokens: int) -> Rollout:
        """The rollout with its prompts' leading padding cut to the width its own longest prompt
        needs, in buckets of `bucket_tokens` (`encoding.bucket_width`, as `encode_prompts` pads), or
        itself when no column can go: prompts padded together with longer ones lose their extra."""
        width = self.prompt_tokens.shape[1]
        needed = min(bucket_width(int(self.prompt_valid.sum(axis=1).max()), bucket_tokens), width)
        if needed == width:
            return self
        return dataclasses.replace(
            self,
            prompt_tokens=self.prompt_tokens[:, width - needed :],
            prompt_valid=self.prompt_valid[:, width - needed :],
        )

    # -- groups ------------------------------------------------------------------------------------

    def group(self, j: int) -> Rollout:
        """Prompt j's G sequences, with an equal share (1 / P) of `generate_s`."""
        g = self.num_generations
        rows = slice(j * g, (j + 1) * g)
        return Rollout(
            examples=self.examples[j : j + 1],
            num_generations=g,
            prompt_tokens=self.prompt_tokens[rows],
            prompt_valid=self.prompt_valid[rows],
            completion_tokens=self.completion_tokens[rows],
            completion_mask=self.completion_mask[rows],
            sample_logprobs=self.sample_logprobs[rows],
            full_logprobs=self.full_logprobs[rows],
            token_versions=self.token_versions[rows],
            completions=self.completions[rows],
            rewards=self.rewards[rows],
            correct=self.correct[rows],
            advantages=self.advantages[rows],
            generate_s=self.generate_s / self.prompts,
            reward_s=self.reward_s / self.prompts,
            in_loss=self.in_loss[rows],
            truncated=self.truncated[rows],
            overlong_penalties=self.overlong_penalties[rows],
            prompts_consumed=1,
            reward_names=self.reward_names,
            reward_values=self.reward_values[rows],
            reward_details=None if self.reward_details is None else self.reward_details[rows],
            loss_mask=None if self.loss_mask is None else self.loss_mask[rows],
            episodes=None if self.episodes is None else self.episodes[rows],
            generation=None
            if self.generation is None
            else {name: value if name in _LARGEST else value / self.prompts for name, value in self.generation.items()},
        )

    @property
    def trained_mask(self) -> np.ndarray:
        """[N, Lc] bool: the tokens a loss trains on (the sampled ones; every completion token single-turn)."""
        return self.completion_mask if self.loss_mask is None else self.loss_mask

    def _episode_sample(self, i: int) -> dict[str, Any]:
        """Sequence i's episode for display, its reward_parts every raw score that made its reward:
        each reward function's (by name) and each environment part's (env/<name>)."""
        parts = {name: float(self.reward_values[i, k]) for k, name in enumerate(self.reward_names)}
        return {**self.episodes[i], "reward_parts": parts}

    @classmethod
    def concat(cls, rollouts: list[Rollout], pad_id: int | None = None) -> Rollout:
        """The rollouts' sequences in order, as one rollout (`generate_s` and `prompts_consumed` add
        up). Their prompts must have one padded length, as the groups of one step have
        (`collect_rollout` pads a step's prompts together, whichever part of them one call
        generates); with `pad_id`, shorter ones are left-padded with it (invalid slots) to the
        longest: rollouts of separate calls (dynamic sampling's refills) can then be joined."""
        if not rollouts:
            raise ValueError("Rollout.concat needs at least one rollout")
        g, width = rollouts[0].num_generations, max(r.prompt_tokens.shape[1] for r in rollouts)
        if any(r.num_generations != g or (pad_id is None and r.prompt_tokens.shape[1] != width) for r in rollouts):
            raise ValueError("Rollout.concat: rollouts differ in num_generations or padded prompt length")
        if any(r.reward_names != rollouts[0].reward_names for r in rollouts):
            raise ValueError("Rollout.concat: rollouts scored by different reward functions")
        if len({r.episodes is None for r in rollouts}) > 1:
            raise ValueError("Rollout.concat: single-turn and multi-turn rollouts cannot be joined")
        multi_turn = rollouts[0].episodes is not None

        def cat(name: str) -> np.ndarray:
            if name in ("prompt_tokens", "prompt_valid") and pad_id is not None:
                fill = pad_id if name == "prompt_tokens" else False
                return np.concatenate(
                    [
                        np.pad(getattr(r, name), ((0, 0), (width - r.prompt_tokens.shape[1], 0)), constant_values=fill)
                        for r in rollouts
                    ]
                )
            return np.concatenate([getattr(r, name) for r in rollouts])

        return cls(
            examples=[e for r in rollouts for e in r.examples],
            num_generations=g,
            prompt_tokens=cat("prompt_tokens"),
            prompt_valid=cat("prompt_valid"),
            completion_tokens=cat("completion_tokens"),
            completion_mask=cat("completion_mask"),
            sample_logprobs=cat("sample_logprobs"),
            full_logprobs=cat("full_logprobs"),
            token_versions=cat("token_versions"),
            completions=[c for r in rollouts for c in r.completions],
            rewards=cat("rewards"),
            correct=cat("correct"),
            advantages=cat("advantages"),
            generate_s=sum(r.generate_s for r in rollouts),
            reward_s=sum(r.reward_s for r in rollouts),
            in_loss=cat("in_loss"),
            truncated=cat("truncated"),
            overlong_penalties=cat("overlong_penalties"),
            prompts_consumed=sum(r.prompts_consumed for r in rollouts),
            reward_names=rollouts[0].reward_names,
            reward_values=cat("reward_values"),
            reward_details=None
            if all(r.reward_details is None for r in rollouts)
            else [d for r in rollouts for d in (r.reward_details or [{}] * r.sequences)],
            loss_mask=cat("loss_mask") if multi_turn else None,
            episodes=[e for r in rollouts for e in r.episodes] if multi_turn else None,
            generation=join_generation([r.generation for r in rollouts]),
        )

    # -- weight versions -----------------------------------------------------------------------------

    def oldest_version(self) -> int:
        """The oldest weight version that sampled any token (every completion has at least one)."""
        return int(self.token_versions[self.completion_mask].min())

    def on_policy(self, version: int) -> np.ndarray:
        """[N] bool: every token of the sequence was sampled by weights `version` (so its KV cache,
        prompt included, was computed by them too: the prefill samples token 0)."""
        return np.all((self.token_versions == version) | ~self.completion_mask, axis=1)

    def token_age_mean(self, step: int) -> float:
        """Mean age in steps, when trained at `step`, of the weights that sampled each token."""
        return float((step - self.token_versions[self.completion_mask]).mean())

    # -- reporting ---------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """The rollout's own per-step metrics: reward mean/std, accuracy, mean response length (tokens),
        the fraction of completions cut off by the budget, the mean overlong penalty (when any), the
        seconds spent scoring (timing/reward_s), and reward/<name>: each reward function's mean raw
        score (`reward_metrics`)."""
        out = {
            "reward/mean": float(self.rewards.mean()),
            "reward/std": float(self.rewards.std()),
            "accuracy": float(self.correct.mean()),
            "response_length/mean": float(self.completion_mask.sum(axis=1).mean()),
            "rollout/truncated_fraction": float(self.truncated.mean()),
            "timing/reward_s": self.reward_s,
        }
        if self.overlong_penalties.any():
            out["rollout/overlong_penalty_mean"] = float(self.overlong_penalties.mean())
        out.update(reward_metrics(self.reward_names, self.reward_values))
        if self.episodes is not None:
            out.update(episode_metrics(self.episodes))
        out.update(generation_metrics(self.generation))
        return out

    def samples(self, count: int) -> list[dict[str, Any]]:
        """The first `count` sequences, for display (prompt, completion, answer, reward, advantage,
        correct); `group` is the prompt's place in the step, `generation` the completion's place
        among its prompt's num_generations. A multi-turn sample adds its episode (env, turns,
        reward_parts, end_reason, tool_calls, tool_errors, error); a sample whose rewards gave
        details adds them as reward_details ({"code_tests": [{"test", "passed", "reason"}]})."""
        out = []
        for i in range(min(count, self.sequences)):
            group, generation = divmod(i, self.num_generations)
            example = self.examples[group]
            out.append(
                {
                    "group": group,
                    "generation": generation,
                    "prompt": example["prompt"],
                    "completion": self.completions[i],
                    "answer": example.get("answer"),
                    "reward": float(self.rewards[i]),
                    "advantage": float(self.advantages[i]),
                    "correct": bool(self.correct[i]),
                    **({"truncated": True} if self.truncated[i] else {}),
                    **({"overlong_penalty": float(self.overlong_penalties[i])} if self.overlong_penalties[i] else {}),
                    **({"in_loss": False} if not self.in_loss[i] else {}),
                    **(self._episode_sample(i) if self.episodes is not None else {}),
                    **({"reward_details": self.reward_details[i]} if self.reward_details else {}),
                }
            )
        return out

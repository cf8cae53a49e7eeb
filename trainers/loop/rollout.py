"""The rollout: prompts -> G completions each -> decoded, scored, group advantages. One function,
`collect_rollout`, used by the synchronous loop, the asynchronous collector and evaluation, and one
result type, `Rollout`.

Sequences are prompt-major (sequence i = completion i % G of prompt i // G). Prompts are left-padded
to the longest prompt of the examples given (a step's prompts, so the collector generating part of
a step pads as the synchronous loop does), and generated in rollout micro-batches; the micro-batch
k sequences into the examples is sampled with key fold_in(key, k), whichever part of the examples
one call generates. So the samples depend only on (key, prompts, weights), never on how a step's
generation is split between calls or threads.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import numpy as np

from trainers.algo.advantages import compute_advantages
from trainers.algo.sampling_filters import overlong_penalty, truncated
from trainers.config import ExperimentConfig
from trainers.data.encoding import PromptIdCache, encode_prompts
from trainers.data.rewards import accuracy, score
from trainers.data.tasks import TASKS
from trainers.config.budgets import completion_token_budget
from trainers.loop.plan import split_sequences
from trainers.models.generate import SamplingParams, eos_settings, generate, generate_in_flight
from trainers.parallel.host import put
from trainers.parallel.mesh import mesh_context
from trainers.parallel.rules import batch_sharding

PROMPT_BUCKET_TOKENS = 16
"""A pretrained model's prompts are left-padded to the next of 16 x (1, 2, 3, 4, 6, 8, 12, ...) tokens
(`encoding.bucket_width`), so steps whose longest prompts differ share one compiled generation and
update: about two widths per doubling of the prompt length (the toy tasks' prompts keep their exact
length)."""

Weights = Callable[[], tuple[Any, int]]
"""weights() -> (params, version): the weights to generate with and their version (optimizer steps
applied to them). Called before each generation call, and with in-flight updates before each
decode chunk, so a caller can hand newer weights to a generation in progress."""


def reward_metrics(names: tuple[str, ...], values: np.ndarray) -> dict[str, float]:
    """{"reward/<name>": mean of column k of `values`} for each reward function `names[k]` ([N, K]
    raw scores, before weights and the overlong penalty): which part of the reward a run learns.
    Nothing for an empty rollout."""
    if values.shape[0] == 0:
        return {}
    means = values.mean(axis=0)
    return {f"reward/{name}": float(means[k]) for k, name in enumerate(names)}


@dataclasses.dataclass
class Rollout:
    """Prompts, their G completions each, rewards and advantages: per-sequence host arrays.

    Shapes: P prompts, N = P * G sequences, Lp the prompt length (left-padded), Lc = max_new_tokens.
    A rollout can be cut into prompt groups (`group(j)`) and put back together (`Rollout.concat`),
    which is how the asynchronous loop buffers and trains it.
    """

    examples: list[dict[str, Any]]   # [P] the prompts' dataset items
    num_generations: int             # G
    prompt_tokens: np.ndarray        # [N, Lp] int32, left-padded
    prompt_valid: np.ndarray         # [N, Lp] bool
    completion_tokens: np.ndarray    # [N, Lc] int32
    completion_mask: np.ndarray      # [N, Lc] bool
    sample_logprobs: np.ndarray      # [N, Lc] float32, log pi_gen: recorded when sampling (generate.sample_token)
    token_versions: np.ndarray       # [N, Lc] int32, the version of the weights that sampled each token
    completions: list[str]           # [N] decoded
    rewards: np.ndarray              # [N] float32 weighted sum
    correct: np.ndarray              # [N] bool
    advantages: np.ndarray           # [N] float32
    generate_s: float                # seconds spent encoding, generating, decoding and scoring these sequences
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

    @property
    def prompts(self) -> int:
        return len(self.examples)

    @property
    def sequences(self) -> int:
        return len(self.completions)

    def total_tokens(self) -> int:
        return int(self.prompt_valid.sum() + self.completion_mask.sum())

    # -- groups ------------------------------------------------------------------------------------

    def group(self, j: int) -> "Rollout":
        """Prompt j's G sequences, with an equal share (1 / P) of `generate_s`."""
        g = self.num_generations
        rows = slice(j * g, (j + 1) * g)
        return Rollout(
            examples=self.examples[j:j + 1], num_generations=g,
            prompt_tokens=self.prompt_tokens[rows], prompt_valid=self.prompt_valid[rows],
            completion_tokens=self.completion_tokens[rows], completion_mask=self.completion_mask[rows],
            sample_logprobs=self.sample_logprobs[rows], token_versions=self.token_versions[rows],
            completions=self.completions[rows], rewards=self.rewards[rows], correct=self.correct[rows],
            advantages=self.advantages[rows], generate_s=self.generate_s / self.prompts,
            in_loss=self.in_loss[rows], truncated=self.truncated[rows],
            overlong_penalties=self.overlong_penalties[rows], prompts_consumed=1,
            reward_names=self.reward_names, reward_values=self.reward_values[rows],
        )

    @classmethod
    def concat(cls, rollouts: list["Rollout"], pad_id: int | None = None) -> "Rollout":
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

        def cat(name: str) -> np.ndarray:
            if name in ("prompt_tokens", "prompt_valid") and pad_id is not None:
                fill = pad_id if name == "prompt_tokens" else False
                return np.concatenate([np.pad(getattr(r, name), ((0, 0), (width - r.prompt_tokens.shape[1], 0)),
                                              constant_values=fill) for r in rollouts])
            return np.concatenate([getattr(r, name) for r in rollouts])

        return cls(
            examples=[e for r in rollouts for e in r.examples], num_generations=g,
            prompt_tokens=cat("prompt_tokens"), prompt_valid=cat("prompt_valid"),
            completion_tokens=cat("completion_tokens"), completion_mask=cat("completion_mask"),
            sample_logprobs=cat("sample_logprobs"), token_versions=cat("token_versions"),
            completions=[c for r in rollouts for c in r.completions],
            rewards=cat("rewards"), correct=cat("correct"), advantages=cat("advantages"),
            generate_s=sum(r.generate_s for r in rollouts), in_loss=cat("in_loss"), truncated=cat("truncated"),
            overlong_penalties=cat("overlong_penalties"), prompts_consumed=sum(r.prompts_consumed for r in rollouts),
            reward_names=rollouts[0].reward_names, reward_values=cat("reward_values"),
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
        the fraction of completions cut off by the budget, the mean overlong penalty (when any), and
        reward/<name>: each reward function's mean raw score (`reward_metrics`)."""
        out = {
            "reward/mean": float(self.rewards.mean()),
            "reward/std": float(self.rewards.std()),
            "accuracy": float(self.correct.mean()),
            "response_length/mean": float(self.completion_mask.sum(axis=1).mean()),
            "rollout/truncated_fraction": float(self.truncated.mean()),
        }
        if self.overlong_penalties.any():
            out["rollout/overlong_penalty_mean"] = float(self.overlong_penalties.mean())
        out.update(reward_metrics(self.reward_names, self.reward_values))
        return out

    def samples(self, count: int) -> list[dict[str, Any]]:
        """The first `count` sequences, for display (prompt, completion, answer, reward, advantage,
        correct); `group` is the prompt's place in the step, `generation` the completion's place
        among its prompt's num_generations."""
        out = []
        for i in range(min(count, self.sequences)):
            group, generation = divmod(i, self.num_generations)
            example = self.examples[group]
            out.append({
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
            })
        return out


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """How a run turns prompts into scored completions (fixed for the run).

    advantage: `grpo.advantage` method, or None for no advantages (all 0: evaluation, G = 1).
    """

    tokenizer: Any
    sampling: SamplingParams
    num_generations: int
    rollout_micro_batch_sequences: int
    max_prompt_tokens: int
    reward_specs: tuple[tuple[str, float], ...]
    advantage: str | None
    advantage_eps: float = 1e-6
    chat: bool = False  # render prompts with the tokenizer's chat template
    system_prompt: str | None = None
    prompt_bucket_tokens: int = 1  # prompt lengths are padded up to a bucket of this (fewer compiles)
    overlong_buffer_tokens: int = 0  # DAPO soft overlong punishment (0 = off), see `sampling_filters`
    overlong_penalty: float = 1.0
    overlong_filter: bool = False    # truncated completions leave the loss (Rollout.in_loss)
    # Token ids of the prompts already encoded, shared by the copies `for_evaluation` makes.
    prompt_ids: PromptIdCache = dataclasses.field(default_factory=PromptIdCache, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: ExperimentConfig, tokenizer: Any, rollout_micro_batch_sequences: int) -> "RolloutSpec":
        r, d = config.rollout, config.data
        sampling = SamplingParams(
            max_new_tokens=completion_token_budget(config), temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
            stop_at_eos=r.stop_at_eos, **eos_settings(tokenizer),
        )
        chat = tokenizer.has_chat_template if d.chat_template is None else d.chat_template
        return cls(tokenizer=tokenizer, sampling=sampling, num_generations=config.grpo.num_generations,
                   rollout_micro_batch_sequences=rollout_micro_batch_sequences,
                   max_prompt_tokens=d.max_prompt_tokens, reward_specs=tuple(reward_specs(config)),
                   advantage=config.grpo.advantage, advantage_eps=config.grpo.advantage_eps,
                   chat=chat, system_prompt=d.system_prompt,
                   prompt_bucket_tokens=PROMPT_BUCKET_TOKENS if config.model.path else 1,
                   overlong_buffer_tokens=r.overlong_buffer_tokens, overlong_penalty=r.overlong_penalty,
                   overlong_filter=r.overlong_filter)

    def for_evaluation(self, temperature: float, samples_per_prompt: int = 1) -> "RolloutSpec":
        """`samples_per_prompt` completions per prompt at `temperature` (0 = greedy), no advantages and no
        length shaping (eval rewards are the task's own)."""
        return dataclasses.replace(self, sampling=dataclasses.replace(self.sampling, temperature=temperature),
                                   num_generations=samples_per_prompt, advantage=None, overlong_buffer_tokens=0,
                                   overlong_filter=False)


def reward_specs(config: ExperimentConfig) -> list[tuple[str, float]]:
    """The configured rewards, or the built-in task's own when none are named."""
    if config.rewards:
        return [(r.name, r.weight) for r in config.rewards]
    return list(TASKS[config.data.task].default_rewards)


def check_prompts_fit(spec: RolloutSpec, examples: list[dict[str, Any]], dataset: str) -> None:
    """Encode every prompt of `examples` once, so a prompt over data.max_prompt_tokens (or one the
    tokenizer cannot take) stops the run before its first step, not at the step that meets it.
    Raises DataError naming the dataset ("training", "eval") and the field to change."""
    from trainers.data.examples import DataError

    try:
        encode_prompts(spec.tokenizer, [e["prompt"] for e in examples], spec.max_prompt_tokens, chat=spec.chat,
                       system_prompt=spec.system_prompt, cache=spec.prompt_ids)
    except DataError as error:
        raise DataError(f"{dataset} data: {error} (data.max_prompt_tokens sets the limit)") from None


def collect_rollout(
    graphdef: Any,
    weights: Weights,
    examples: list[dict[str, Any]],
    spec: RolloutSpec,
    key: jax.Array,
    *,
    first_prompt: int = 0,
    prompt_count: int | None = None,
    in_flight_chunk_tokens: int = 0,
    mesh: Any = None,
) -> Rollout:
    """Encode -> generate -> decode -> score -> advantages for prompts
    examples[first_prompt : first_prompt + prompt_count] (default: all), padded as all of `examples`.

    Generation calls take `spec.rollout_micro_batch_sequences` sequences each; the k-th micro-batch
    of `examples` (counting from its first sequence, so first_prompt * G must be a multiple of the
    micro-batch size) is sampled with fold_in(key, k). weights(): see `Weights`; with
    in_flight_chunk_tokens > 0 generation runs in chunks of that many decode steps and takes the
    newest weights before each (`generate.generate_in_flight`). mesh: the device mesh the
    weights live on (`Placement.generation_mesh`): each call's sequences are split over its data
    axes and generation is traced under it; None = the default device.
    `generate_s` is the wall time of this call.
    """
    t0 = time.perf_counter()
    g, micro = spec.num_generations, spec.rollout_micro_batch_sequences
    count = len(examples) - first_prompt if prompt_count is None else prompt_count
    if (first_prompt * g) % micro:
        raise ValueError(f"first_prompt={first_prompt} x G={g} is not a multiple of the rollout micro-batch ({micro})")
    tokens, valid = encode_prompts(spec.tokenizer, [e["prompt"] for e in examples], spec.max_prompt_tokens,
                                   chat=spec.chat, system_prompt=spec.system_prompt,
                                   bucket_tokens=spec.prompt_bucket_tokens, cache=spec.prompt_ids)
    # Whole groups in every generation call: the G copies of a prompt share one prefill.
    sampling = dataclasses.replace(spec.sampling, prompt_group=g if micro % g == 0 else 1)
    chosen = examples[first_prompt:first_prompt + count]
    prompt_tokens = np.repeat(tokens[first_prompt:first_prompt + count], g, axis=0)
    prompt_valid = np.repeat(valid[first_prompt:first_prompt + count], g, axis=0)
    first_call = first_prompt * g // micro
    out_tokens, out_mask, out_logprobs, out_versions = [], [], [], []
    for k, s in enumerate(split_sequences(count * g, micro)):
        call_tokens, call_valid = prompt_tokens[s.start:s.stop], prompt_valid[s.start:s.stop]
        if mesh is not None:
            rows = batch_sharding(mesh, call_tokens.shape)
            call_tokens, call_valid = put(call_tokens, rows), put(call_valid, rows)
        call_key = jax.random.fold_in(key, first_call + k)
        with mesh_context(mesh):
            if in_flight_chunk_tokens:
                result = generate_in_flight(graphdef, weights, call_tokens, call_valid, call_key, sampling,
                                            in_flight_chunk_tokens)
                versions = result.token_versions
            else:
                params, version = weights()
                result = generate(graphdef, params, call_tokens, call_valid, call_key, sampling)
                versions = np.full(result.tokens.shape, version, np.int32)
        out_tokens.append(result.tokens)
        out_mask.append(result.mask)
        out_logprobs.append(result.logprobs)
        out_versions.append(versions)
    completion_tokens, completion_mask = np.concatenate(out_tokens), np.concatenate(out_mask)
    completions = [spec.tokenizer.decode_completion(row[m]) for row, m in zip(completion_tokens, completion_mask)]
    per_sequence = [chosen[i // g] for i in range(len(completions))]
    rewards, components = score(completions, per_sequence, list(spec.reward_specs))
    sampling_params = spec.sampling
    cut = truncated(completion_tokens, completion_mask, (sampling_params.eos_id, *sampling_params.extra_eos_ids))
    penalties = overlong_penalty(completion_mask.sum(axis=1), sampling_params.max_new_tokens,
                                 spec.overlong_buffer_tokens, spec.overlong_penalty)
    rewards = np.asarray(rewards, np.float32) + penalties
    correct = accuracy(completions, per_sequence, components)
    reward_names = tuple(components)
    reward_values = (np.stack([components[name] for name in reward_names], axis=1).astype(np.float32) if reward_names
                     else np.zeros((len(completions), 0), np.float32))
    if spec.advantage is None:
        advantages = np.zeros(len(completions), np.float32)
    else:
        advantages = compute_advantages(rewards.reshape(count, g), spec.advantage, spec.advantage_eps).reshape(-1)
    return Rollout(
        examples=list(chosen), num_generations=g, prompt_tokens=prompt_tokens, prompt_valid=prompt_valid,
        completion_tokens=completion_tokens, completion_mask=completion_mask,
        sample_logprobs=np.concatenate(out_logprobs), token_versions=np.concatenate(out_versions),
        completions=completions, rewards=rewards, correct=correct, advantages=advantages,
        generate_s=time.perf_counter() - t0, in_loss=~cut if spec.overlong_filter else None, truncated=cut,
        overlong_penalties=penalties, reward_names=reward_names, reward_values=reward_values,
    )

"""The rollout phase of a step: G completions per prompt, rewards, group advantages.

Sequences are prompt-major (sequence i = completion i % G of prompt i // G), generated in the
plan's rollout micro-batches. Prompts are left-padded once per step to the step's longest prompt.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from trainers.advantages import compute_advantages
from trainers.data import encode_prompts
from trainers.generate import SamplingParams, generate
from trainers.plan import SequenceSlice
from trainers.rewards import is_correct, score


@dataclasses.dataclass
class Rollout:
    examples: list[dict[str, Any]]   # [P] the step's prompts
    prompt_tokens: np.ndarray        # [N, Lp] int32, left-padded, N = P * G
    prompt_valid: np.ndarray         # [N, Lp] bool
    completion_tokens: np.ndarray    # [N, Lc] int32
    completion_mask: np.ndarray      # [N, Lc] bool
    sample_logprobs: np.ndarray      # [N, Lc] float32, recorded at sampling time
    completions: list[str]           # [N] decoded
    rewards: np.ndarray              # [N] float32 weighted sum
    correct: np.ndarray              # [N] bool
    advantages: np.ndarray           # [N] float32
    decode_steps: int                # decode iterations over all generation calls

    @property
    def sequences(self) -> int:
        return len(self.completions)

    def response_tokens(self) -> int:
        return int(self.completion_mask.sum())

    def total_tokens(self) -> int:
        return int(self.prompt_valid.sum() + self.completion_mask.sum())

    def metrics(self) -> dict[str, float]:
        """The rollout's own per-step metrics: reward mean/std, accuracy, mean response length (tokens)."""
        return {
            "reward/mean": float(self.rewards.mean()),
            "reward/std": float(self.rewards.std()),
            "accuracy": float(self.correct.mean()),
            "response_length/mean": float(self.completion_mask.sum(axis=1).mean()),
        }

    def samples(self, count: int, num_generations: int) -> list[dict[str, Any]]:
        """The first `count` sequences, for display (prompt, completion, answer, reward, advantage)."""
        out = []
        for i in range(min(count, self.sequences)):
            example = self.examples[i // num_generations]
            out.append({
                "prompt": example["prompt"],
                "completion": self.completions[i],
                "answer": example.get("answer"),
                "reward": float(self.rewards[i]),
                "advantage": float(self.advantages[i]),
                "correct": bool(self.correct[i]),
            })
        return out


def completion_text(tokenizer: Any, ids: np.ndarray) -> str:
    """Decode generated ids. PAD or BOS sampled inside a completion become U+FFFD (as UNK does), so
    a policy cannot pad its way to a match: the tokenizer's decode skips them in prompts only."""
    ids = np.where((ids == tokenizer.pad_id) | (ids == tokenizer.bos_id), tokenizer.unk_id, ids)
    return tokenizer.decode(ids.tolist())


def generate_completions(
    graphdef: Any,
    params: Any,
    prompt_tokens: np.ndarray,
    prompt_valid: np.ndarray,
    slices: tuple[SequenceSlice, ...],
    sampling: SamplingParams,
    key: jax.Array,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Generate for every slice of the (already repeated) prompts; returns tokens, mask, logprobs, decode steps."""
    tokens, masks, logprobs, decode_steps = [], [], [], 0
    for i, s in enumerate(slices):
        result = generate(
            graphdef, params, prompt_tokens[s.start:s.stop], prompt_valid[s.start:s.stop],
            jax.random.fold_in(key, i), sampling,
        )
        tokens.append(result.tokens)
        masks.append(result.mask)
        logprobs.append(result.logprobs)
        decode_steps += int(result.decode_steps)
    return np.concatenate(tokens), np.concatenate(masks), np.concatenate(logprobs), decode_steps


def collect_rollout(
    graphdef: Any,
    params: Any,
    examples: list[dict[str, Any]],
    tokenizer: Any,
    *,
    num_generations: int,
    slices: tuple[SequenceSlice, ...],
    sampling: SamplingParams,
    max_prompt_tokens: int,
    reward_specs: list[tuple[str, float]],
    advantage: str,
    advantage_eps: float,
    key: jax.Array,
) -> Rollout:
    tokens, valid = encode_prompts(tokenizer, [e["prompt"] for e in examples], max_prompt_tokens)
    prompt_tokens = np.repeat(tokens, num_generations, axis=0)
    prompt_valid = np.repeat(valid, num_generations, axis=0)
    completion_tokens, completion_mask, sample_logprobs, decode_steps = generate_completions(
        graphdef, params, prompt_tokens, prompt_valid, slices, sampling, key
    )
    completions = [completion_text(tokenizer, row[m]) for row, m in zip(completion_tokens, completion_mask)]
    per_sequence = [examples[i // num_generations] for i in range(len(completions))]
    rewards, _ = score(completions, per_sequence, reward_specs)
    correct = np.array([is_correct(c, e) for c, e in zip(completions, per_sequence)], dtype=bool)
    advantages = compute_advantages(
        np.asarray(rewards, np.float32).reshape(len(examples), num_generations), advantage, advantage_eps
    ).reshape(-1)
    return Rollout(
        examples=examples,
        prompt_tokens=prompt_tokens,
        prompt_valid=prompt_valid,
        completion_tokens=completion_tokens,
        completion_mask=completion_mask,
        sample_logprobs=sample_logprobs,
        completions=completions,
        rewards=np.asarray(rewards, np.float32),
        correct=correct,
        advantages=advantages,
        decode_steps=decode_steps,
    )

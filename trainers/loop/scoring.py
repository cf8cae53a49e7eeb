"""Scoring a policy on a set of prompts: greedy accuracy, mean reward and pass@k, with each prompt's
completion. The trainer's periodic evaluation (`GRPOTrainer.evaluate`) and the `evaluate` command
(`trainers.commands.evaluate`) both call `score_prompts`.

    score_prompts(graphdef, weights, examples, spec, key, ...)  -> Scored (greedy rollout, samples' correct)
    pass_at_k(correct, k)                                       -> the unbiased pass@k estimate

Determinism: the greedy pass uses `key`, the sampled pass fold_in(key, 1); prompts are generated in
chunks of whole rollout micro-batches (`chunk_prompts`), which `collect_rollout` keys by their place
among all the examples, so a chunked evaluation draws exactly what one call would.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from trainers.rollout.batch import Rollout
from trainers.rollout.collect import collect_rollout
from trainers.rollout.episodes import episode_metrics
from trainers.rollout.spec import RolloutSpec, Weights

Progress = Callable[[int, int], None]
"""progress(prompts_done, prompts_total): called after each chunk of prompts is scored."""


def pass_at_k(correct: np.ndarray, k: int) -> float:
    """correct [P, n] bool (n samples of each of P prompts), k <= n -> the unbiased estimate of pass@k
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"), averaged over prompts:
    1 - C(n - c, k) / C(n, k) per prompt with c correct samples, the chance that k samples drawn
    without replacement from the n hold a correct one."""
    correct = np.asarray(correct, bool)
    n = correct.shape[1]
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n samples per prompt, got k={k}, n={n}")
    per_prompt = [1.0 - math.comb(n - int(c), k) / math.comb(n, k) for c in correct.sum(axis=1)]
    return float(np.mean(per_prompt))


@dataclasses.dataclass
class Scored:
    """greedy: one completion per prompt at the evaluation temperature (P sequences);
    sampled_correct: [P, n] bool, the n sampled completions' correctness, None when n = 1."""

    greedy: Rollout
    sampled_correct: np.ndarray | None

    def metrics(self, pass_k: int | None = None) -> dict[str, float]:
        """reward_mean, accuracy (greedy); with samples, pass@1 and pass@k (k = pass_k, default n); with
        multi-turn episodes, the greedy episodes' env/* metrics (`episodes.episode_metrics`)."""
        out = {"reward_mean": float(np.mean(self.greedy.rewards)), "accuracy": float(np.mean(self.greedy.correct))}
        if self.greedy.episodes is not None:
            out.update(episode_metrics(self.greedy.episodes))
        if self.sampled_correct is not None:
            k = pass_k or self.sampled_correct.shape[1]
            out["pass@1"] = pass_at_k(self.sampled_correct, 1)
            if k > 1:
                out[f"pass@{k}"] = pass_at_k(self.sampled_correct, k)
        return out


def score_prompts(
    graphdef: Any,
    weights: Weights,
    examples: list[dict],
    spec: RolloutSpec,
    key: jax.Array,
    *,
    temperature: float = 0.0,
    samples_per_prompt: int = 1,
    sample_temperature: float = 1.0,
    mesh: Any = None,
    chunk_prompts: int | None = None,
    progress: Progress | None = None,
) -> Scored:
    """One completion of each example at `temperature` (0 = greedy), and with samples_per_prompt > 1
    that many more at `sample_temperature` for pass@k. chunk_prompts: prompts per chunk (a multiple
    of spec.rollout_micro_batch_sequences; None = all at once); `progress` after each chunk."""
    total = len(examples)
    chunk = chunk_prompts or total
    if chunk_prompts and chunk_prompts % spec.rollout_micro_batch_sequences:
        raise ValueError(
            f"chunk_prompts={chunk_prompts} is not a multiple of the rollout micro-batch "
            f"({spec.rollout_micro_batch_sequences} sequences)"
        )
    greedy_spec = spec.for_evaluation(temperature)
    sampled_spec = spec.for_evaluation(sample_temperature, samples_per_prompt) if samples_per_prompt > 1 else None
    greedy_parts, sampled_parts = [], []
    for first in range(0, total, chunk):
        count = min(chunk, total - first)
        greedy_parts.append(
            collect_rollout(
                graphdef, weights, examples, greedy_spec, key, first_prompt=first, prompt_count=count, mesh=mesh
            )
        )
        if sampled_spec is not None:
            sampled = collect_rollout(
                graphdef,
                weights,
                examples,
                sampled_spec,
                jax.random.fold_in(key, 1),
                first_prompt=first,
                prompt_count=count,
                mesh=mesh,
            )
            sampled_parts.append(sampled.correct.reshape(count, samples_per_prompt))
        if progress is not None:
            progress(first + count, total)
    greedy = greedy_parts[0] if len(greedy_parts) == 1 else Rollout.concat(greedy_parts)
    return Scored(greedy, np.concatenate(sampled_parts) if sampled_parts else None)

"""Scoring a policy on a set of prompts: greedy accuracy, mean reward and pass@k, with each prompt's
completion. The trainer's periodic evaluation (`GRPOTrainer.evaluate`) and the `evaluate` command
(`evaluate_policy_on`: a model folder or a run's checkpoint, on the run's eval set, a built-in task's
held-out prompts or a JSONL file) both call `score_prompts`.

    score_prompts(graphdef, weights, examples, spec, key, ...)  -> Scored (greedy rollout, samples' correct)
    evaluation_examples(config, dataset, prompts)               -> the examples to score
    evaluate_policy_on(path, config, ...)                       -> Evaluation (per-prompt rows + metrics)

Determinism: the greedy pass uses `key`, the sampled pass fold_in(key, 1); prompts are generated in
chunks of whole rollout micro-batches (`chunk_prompts`), which `collect_rollout` keys by their place
among all the examples, so a chunked evaluation draws exactly what one call would.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import numpy as np

from trainers.config import ExperimentConfig
from trainers.rollout.batch import Rollout
from trainers.rollout.episodes import episode_metrics
from trainers.rollout.collect import collect_rollout
from trainers.rollout.spec import RolloutSpec, Weights

Progress = Callable[[int, int], None]
"""progress(prompts_done, prompts_total): called after each chunk of prompts is scored."""

EVAL_MICRO_BATCH_SEQUENCES = 32
"""Sequences per generation call of the `evaluate` command when the config sets no
batch.rollout_micro_batch_sequences."""


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


def score_prompts(graphdef: Any, weights: Weights, examples: list[dict], spec: RolloutSpec, key: jax.Array, *,
                  temperature: float = 0.0, samples_per_prompt: int = 1, sample_temperature: float = 1.0,
                  mesh: Any = None, chunk_prompts: int | None = None, progress: Progress | None = None) -> Scored:
    """One completion of each example at `temperature` (0 = greedy), and with samples_per_prompt > 1
    that many more at `sample_temperature` for pass@k. chunk_prompts: prompts per chunk (a multiple
    of spec.rollout_micro_batch_sequences; None = all at once); `progress` after each chunk."""
    total = len(examples)
    chunk = chunk_prompts or total
    if chunk_prompts and chunk_prompts % spec.rollout_micro_batch_sequences:
        raise ValueError(f"chunk_prompts={chunk_prompts} is not a multiple of the rollout micro-batch "
                         f"({spec.rollout_micro_batch_sequences} sequences)")
    greedy_spec = spec.for_evaluation(temperature)
    sampled_spec = spec.for_evaluation(sample_temperature, samples_per_prompt) if samples_per_prompt > 1 else None
    greedy_parts, sampled_parts = [], []
    for first in range(0, total, chunk):
        count = min(chunk, total - first)
        greedy_parts.append(collect_rollout(graphdef, weights, examples, greedy_spec, key, first_prompt=first,
                                            prompt_count=count, mesh=mesh))
        if sampled_spec is not None:
            sampled = collect_rollout(graphdef, weights, examples, sampled_spec, jax.random.fold_in(key, 1),
                                      first_prompt=first, prompt_count=count, mesh=mesh)
            sampled_parts.append(sampled.correct.reshape(count, samples_per_prompt))
        if progress is not None:
            progress(first + count, total)
    greedy = greedy_parts[0] if len(greedy_parts) == 1 else Rollout.concat(greedy_parts)
    return Scored(greedy, np.concatenate(sampled_parts) if sampled_parts else None)


def evaluation_examples(config: ExperimentConfig, dataset: str | None = None, prompts: int = 0) -> list[dict]:
    """The examples an evaluation scores: dataset None = the config's eval set (data.eval_path, or the
    task's held-out prompts); a built-in task's name = its held-out prompts under the config's seed
    (disjoint from the config's training prompts when it trains on that task); else a JSONL path.
    prompts > 0 keeps the first that many (a task: generates that many; 0 = data.eval_prompts).
    Raises DataError (trainers.data.examples) for a missing, malformed or empty dataset."""
    from trainers.data import tasks
    from trainers.data.examples import DataError, load_examples, read_jsonl

    d = config.data
    if dataset is None:
        if d.task is not None:
            examples = load_examples(d.task, None, None, d.train_prompts, prompts or d.eval_prompts, config.seed)[1]
        elif d.eval_path is not None:
            examples = read_jsonl(d.eval_path)
        else:
            raise DataError("the config has no eval set (data.eval_path); name a dataset to evaluate on")
    elif dataset in tasks.TASKS:
        train_prompts = d.train_prompts if d.task == dataset else 1
        examples = load_examples(dataset, None, None, train_prompts, prompts or d.eval_prompts, config.seed)[1]
    else:
        examples = read_jsonl(dataset)
    examples = examples[: prompts or None]
    if not examples:
        raise DataError("no prompts to evaluate: the eval set is empty")
    return examples


@dataclasses.dataclass
class Evaluation:
    """rows: per prompt {"index", "prompt", "answer", "completion", "reward", "correct",
    "samples_correct" (of `samples` sampled completions; absent with one)}; metrics: `Scored.metrics`;
    description: which policy (e.g. "runs/x step 30")."""

    rows: list[dict[str, Any]]
    metrics: dict[str, float]
    description: str


def evaluation_rows(scored: Scored) -> list[dict[str, Any]]:
    """One row per prompt of a `Scored` (see `Evaluation.rows`)."""
    g = scored.greedy
    rows = []
    for i, example in enumerate(g.examples):
        row = {"index": i, "prompt": example["prompt"], "answer": example.get("answer"),
               "completion": g.completions[i], "reward": float(g.rewards[i]), "correct": bool(g.correct[i])}
        if scored.sampled_correct is not None:
            row["samples_correct"] = int(scored.sampled_correct[i].sum())
            row["samples"] = int(scored.sampled_correct.shape[1])
        rows.append(row)
    return rows


def evaluate_policy_on(path: str, config: ExperimentConfig | None = None, *, step: int | None = None,
                       dataset: str | None = None, prompts: int = 0, samples_per_prompt: int | None = None,
                       pass_k: int | None = None, max_new_tokens: int | None = None,
                       progress: Progress | None = None) -> Evaluation:
    """Score a model folder or a run directory's checkpoint (`step`, default the newest) on
    `evaluation_examples(config, dataset, prompts)` with the config's rewards (those of its own
    data.task when it names none, whatever dataset is scored), greedy at eval.temperature, plus
    samples_per_prompt (default eval.samples_per_prompt) samples at rollout.temperature for pass@k
    (k = pass_k, default eval.pass_k or the sample count). config: default the run's config.yaml (a
    run directory); a model folder needs one. The dataset is read before any weight is loaded, so a
    bad one fails fast. Raises DataError, FileNotFoundError, ValueError (FieldError)."""
    from trainers.loop.policy import is_run_dir, load_policy, run_config
    from trainers.rollout.spec import check_prompts_fit, reward_specs

    if config is None:
        if not is_run_dir(path):
            raise ValueError(f"{path} is not a run directory: give a config (its rewards and data) to evaluate "
                             "a model folder")
        config = run_config(path)
    e = config.eval
    n = e.samples_per_prompt if samples_per_prompt is None else samples_per_prompt
    k = pass_k or min(e.pass_k or n, n)
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= samples per prompt, got k={k} with {n} samples per prompt")
    rewards = tuple(reward_specs(config))
    examples = evaluation_examples(config, dataset, prompts)
    policy = load_policy(path, step, progress=False)
    micro = config.batch.rollout_micro_batch_sequences or EVAL_MICRO_BATCH_SEQUENCES
    spec = dataclasses.replace(RolloutSpec.from_config(config, policy.tokenizer, micro), reward_specs=rewards)
    if max_new_tokens is not None:
        spec = dataclasses.replace(spec, sampling=dataclasses.replace(spec.sampling, max_new_tokens=max_new_tokens))
    check_prompts_fit(spec, examples, "evaluation")
    weights = lambda: (policy.params, 0)  # noqa: E731
    scored = score_prompts(policy.graphdef, weights, examples, spec, jax.random.key(config.seed),
                           temperature=e.temperature, samples_per_prompt=n,
                           sample_temperature=config.rollout.temperature, chunk_prompts=micro, progress=progress)
    return Evaluation(evaluation_rows(scored), scored.metrics(k), policy.description)

"""The `evaluate` command: score a model folder or a run's checkpoint on the run's eval set, a
built-in task's held-out prompts or a JSONL file (`evaluate_policy_on`), with the trainer's own
scoring (`trainers.loop.scoring.score_prompts`). The platform's evaluation jobs call it too.

    evaluation_examples(config, dataset, prompts)  -> the examples to score
    evaluate_policy_on(path, config, ...)          -> Evaluation (per-prompt rows + metrics)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from trainers.config import ExperimentConfig
from trainers.data import tasks
from trainers.data.examples import DataError, load_examples, read_jsonl
from trainers.loop.policy import is_run_dir, load_policy, run_config
from trainers.loop.scoring import Progress, Scored, score_prompts
from trainers.rollout.spec import RolloutSpec, check_prompts_fit

EVAL_MICRO_BATCH_SEQUENCES = 32
"""Sequences per generation call of the `evaluate` command when the config sets no
batch.rollout_micro_batch_sequences."""


def evaluation_examples(config: ExperimentConfig, dataset: str | None = None, prompts: int = 0) -> list[dict]:
    """The examples an evaluation scores: dataset None = the config's eval set (data.eval_path, or the
    task's held-out prompts); a built-in task's name = its held-out prompts under the config's seed
    (disjoint from the config's training prompts when it trains on that task); else a JSONL path.
    prompts > 0 keeps the first that many (a task: generates that many; 0 = data.eval_prompts).
    Raises DataError (trainers.data.examples) for a missing, malformed or empty dataset."""
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
        row = {
            "index": i,
            "prompt": example["prompt"],
            "answer": example.get("answer"),
            "completion": g.completions[i],
            "reward": float(g.rewards[i]),
            "correct": bool(g.correct[i]),
        }
        if scored.sampled_correct is not None:
            row["samples_correct"] = int(scored.sampled_correct[i].sum())
            row["samples"] = int(scored.sampled_correct.shape[1])
        rows.append(row)
    return rows


def evaluate_policy_on(
    path: str,
    config: ExperimentConfig | None = None,
    *,
    step: int | None = None,
    dataset: str | None = None,
    prompts: int = 0,
    samples_per_prompt: int | None = None,
    pass_k: int | None = None,
    max_new_tokens: int | None = None,
    progress: Progress | None = None,
) -> Evaluation:
    """Score a model folder or a run directory's checkpoint (`step`, default the newest) on
    `evaluation_examples(config, dataset, prompts)` with the config's rewards (those of its own
    data.task when it names none, whatever dataset is scored), greedy at eval.temperature, plus
    samples_per_prompt (default eval.samples_per_prompt) samples at rollout.temperature for pass@k
    (k = pass_k, default eval.pass_k or the sample count). config: default the run's config.yaml (a
    run directory); a model folder needs one. The dataset is read before any weight is loaded, so a
    bad one fails fast. Raises DataError, FileNotFoundError, ValueError (FieldError)."""
    if config is None:
        if not is_run_dir(path):
            raise ValueError(
                f"{path} is not a run directory: give a config (its rewards and data) to evaluate a model folder"
            )
        config = run_config(path)
    e = config.eval
    n = e.samples_per_prompt if samples_per_prompt is None else samples_per_prompt
    k = pass_k or min(e.pass_k or n, n)
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= samples per prompt, got k={k} with {n} samples per prompt")
    rewards = tuple(config.reward_specs())
    examples = evaluation_examples(config, dataset, prompts)
    policy = load_policy(path, step, progress=False)
    micro = config.batch.rollout_micro_batch_sequences or EVAL_MICRO_BATCH_SEQUENCES
    spec = dataclasses.replace(RolloutSpec.from_config(config, policy.tokenizer, micro), reward_specs=rewards)
    if max_new_tokens is not None:
        spec = dataclasses.replace(spec, sampling=dataclasses.replace(spec.sampling, max_new_tokens=max_new_tokens))
    check_prompts_fit(spec, examples, "evaluation")
    weights = lambda: (policy.params, 0)  # noqa: E731
    scored = score_prompts(
        policy.graphdef,
        weights,
        examples,
        spec,
        jax.random.key(config.seed),
        temperature=e.temperature,
        samples_per_prompt=n,
        sample_temperature=config.rollout.temperature,
        chunk_prompts=micro,
        progress=progress,
    )
    return Evaluation(evaluation_rows(scored), scored.metrics(k), policy.description)

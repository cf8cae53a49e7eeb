"""The batch plan of a validated config, as the form's live preview shows it.

The figures are `trainers.step.plan.make_plan`'s own, and the step's size against the owner's
limits is runner.step_limits' (tokens per step, the trainer's memory estimate, whether a launch
would be refused); this module only finds the dataset size (for epochs) cheaply enough to run on
every keystroke, and turns both into JSON and text.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

from runner.step_limits import StepCheck, step_check
from trainers.config import ExperimentConfig
from trainers.loop.memory_estimate import GIB, gib
from trainers.step.plan import BatchPlan, make_plan


@functools.lru_cache(maxsize=32)
def _jsonl_prompts(path: str, mtime_ns: int, size_bytes: int, cap: int) -> int | None:
    from trainers.data.examples import DataError, read_jsonl  # imports grain: only when a JSONL file is named

    try:
        count = len(read_jsonl(path))
    except DataError:
        return None
    return min(count, cap) if cap > 0 else count


def dataset_prompts(config: ExperimentConfig) -> int | None:
    """Training prompts per epoch, as the trainer will load them: a built-in task generates
    `data.train_prompts`; a JSONL file holds its lines (capped by `data.train_prompts` when > 0).
    None when unknown (an unreadable file: the trainer reports that when the run starts)."""
    d = config.data
    if d.task is not None:
        return d.train_prompts or None
    if d.train_path is None:
        return None
    try:
        stat = os.stat(d.train_path)
    except OSError:
        return None
    return _jsonl_prompts(d.train_path, stat.st_mtime_ns, stat.st_size, d.train_prompts)


def plan_figures(plan: BatchPlan) -> dict[str, Any]:
    """Every field of the plan plus its derived totals, as plain JSON data."""
    figures = dataclasses.asdict(plan)
    figures.update(
        tokens_per_step=plan.tokens_per_step,
        total_prompts=plan.total_prompts,
        total_optimizer_updates=plan.total_optimizer_updates,
        epochs=None if plan.epochs is None else round(plan.epochs, 3),
        mesh=plan.mesh_text,
        rollout_mesh=plan.rollout_mesh_text,
        train_sequences_per_device=plan.train_sequences_per_device,
        train_micro_batch_tokens=plan.train_micro_batch_tokens,
        logprob_micro_batch_tokens=plan.logprob_micro_batch_tokens,
    )
    return figures


def step_figures(check: StepCheck) -> dict[str, Any]:
    """The step's memory estimate, the owner's limits and the launch verdict, as plain JSON data."""
    refusal = check.refusal
    return {
        "step_memory_gib": None if check.memory is None else round(check.memory.total_bytes / GIB, 2),
        "max_sequences_per_step": check.limits.max_sequences_per_step,
        "max_tokens_per_step": check.limits.max_tokens_per_step,
        "worker_memory_gib": round(check.worker_memory_bytes / GIB, 2),
        "launch_refused": refusal,
        "launch": f"refused: {refusal}" if refusal else "allowed",
    }


def step_text(check: StepCheck) -> str:
    """The memory estimate, the owner's limits and the launch verdict as lines for the preview."""
    plan, limits = check.plan, check.limits
    lines = [
        check.memory.describe() if check.memory is not None else "Memory of a step: unknown (model shape unreadable)",
        "Your limits",
        f"  sequences per step            {plan.sequences_per_step} of {limits.max_sequences_per_step}",
        f"  tokens per step               {plan.tokens_per_step} of {limits.max_tokens_per_step}",
        f"  worker memory                 {gib(check.worker_memory_bytes)} GiB",
        "Launch                          " + (f"refused: {check.refusal}" if check.refusal else "allowed"),
    ]
    return "\n".join(lines)


def plan_payload(config: ExperimentConfig, owner=None) -> dict[str, Any]:
    """{"plan": figures, "text": BatchPlan.describe()} for a validated config; with the `owner`
    whose limits apply (who would launch it), also the step's size against them (`step_check`)."""
    plan = make_plan(config, dataset_prompts(config))
    figures, text = plan_figures(plan), plan.describe()
    if owner is not None:
        check = step_check(config, owner, plan)
        figures.update(step_figures(check))
        text += "\n" + step_text(check)
    return {"plan": figures, "text": text}


# The figures the preview table shows, in order, with their labels (units in the names).
SHOWN_FIGURES = (
    ("sequences_per_step", "sequences per step"),
    ("tokens_per_step", "tokens per step (at most)"),
    ("step_memory_gib", "memory of a step, GiB (estimate)"),
    ("launch", "launch"),
    ("optimizer_updates_per_step", "optimizer updates per step"),
    ("accumulation_steps", "accumulation steps"),
    ("mini_batch_sequences", "sequences per mini-batch"),
    ("train_micro_batch_sequences", "sequences per train micro-batch"),
    ("train_micro_batch_tokens", "token positions per train micro-batch (at most)"),
    ("mesh", "train mesh"),
    ("train_sequences_per_device", "sequences per device per train micro-batch"),
    ("rollout_passes_per_step", "rollout passes per step"),
    ("old_logprob_passes_per_step", "old-policy log-prob passes per step"),
    ("reference_logprob_passes_per_step", "reference log-prob passes per step"),
    ("logprob_micro_batch_tokens", "token positions per log-prob micro-batch (at most)"),
    ("total_optimizer_updates", "optimizer updates in the run"),
    ("total_prompts", "prompts consumed in the run"),
    ("epochs", "epochs"),
)

"""Token budgets a config implies (JAX-free; the plan, the rollout and the checks share them)."""

from __future__ import annotations

from trainers.config.schema import ExperimentConfig

DEFAULT_MAX_NEW_TOKENS = 64
"""The completion budget of JSONL data when `rollout.max_new_tokens` is null."""


def completion_token_budget(config: ExperimentConfig) -> int:
    """Completion tokens per sequence: `rollout.max_new_tokens`, else the built-in task's own, else
    DEFAULT_MAX_NEW_TOKENS (JSONL data). An unknown task (refused by the checks) counts as JSONL."""
    from trainers.data.tasks import TASKS

    if config.rollout.max_new_tokens is not None:
        return config.rollout.max_new_tokens
    if config.data.task in TASKS:
        return TASKS[config.data.task].max_new_tokens
    return DEFAULT_MAX_NEW_TOKENS

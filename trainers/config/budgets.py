"""Token budgets a config implies (JAX-free; the plan, the rollout and the checks share them)."""

from __future__ import annotations

from trainers.config.schema import ExperimentConfig
from trainers.data.tasks import TASKS
from trainers.envs.single_turn import SingleTurn

DEFAULT_MAX_NEW_TOKENS = 64
"""The completion budget of JSONL data when `rollout.max_new_tokens` is null."""


def completion_token_budget(config: ExperimentConfig) -> int:
    """Completion tokens per sequence: a multi-turn environment's `env.max_total_tokens` (the model's
    turns and the environment's replies together), else `rollout.max_new_tokens`, else the built-in
    task's own, else DEFAULT_MAX_NEW_TOKENS (JSONL data). An unknown task (refused by the checks)
    counts as JSONL."""

    if config.env.name != SingleTurn.name and config.env.max_total_tokens is not None:
        return config.env.max_total_tokens
    if config.rollout.max_new_tokens is not None:
        return config.rollout.max_new_tokens
    if config.data.task in TASKS:
        return TASKS[config.data.task].max_new_tokens
    return DEFAULT_MAX_NEW_TOKENS

"""This server's resource bounds on experiment configs, tighter than the trainer schema's hard
bounds (trainers/config/schema.py MAX_*): settings.PLATFORM_CONFIG_LIMITS maps a dotted field to the
largest value this server accepts, e.g. {"train.max_steps": 1_000_000}. `experiments.configs`
applies them to every config it validates (API, web form, YAML import, clone, restore, admin, and
the worker before it trains), so a config over a limit is refused like any schema problem:
400 {"errors": {"train.max_steps": "5000000 is above this server's limit of 1000000; ..."}}.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainers.config import ConfigError, ExperimentConfig, Problem

RAISE_HINT = "ask an admin to raise PLATFORM_CONFIG_LIMITS"


def field_value(data: Mapping[str, Any], dotted: str) -> Any:
    """The value at `dotted` ("train.max_steps") in nested plain data; None when any part is missing."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def limit_problems(data: Mapping[str, Any], limits: Mapping[str, int]) -> list[Problem]:
    """One Problem per field of `data` (a validated config as plain data) above its limit, in the
    order of `limits`. A field that is null (e.g. rollout.max_new_tokens = the task's own budget),
    missing, or not a number is not checked here: the schema owns those."""
    problems = []
    for dotted, limit in limits.items():
        value = field_value(data, dotted)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value > limit:
            problems.append(Problem(dotted, f"{value} is above this server's limit of {limit}; {RAISE_HINT}"))
    return problems


def checked(config: ExperimentConfig, limits: Mapping[str, int]) -> ExperimentConfig:
    """`config` (validated by the schema) unchanged, or ConfigError naming every field above its limit."""
    problems = limit_problems(config.model_dump(mode="json", by_alias=True), limits)
    if problems:
        raise ConfigError(problems)
    return config

"""A sweep's search space as plain data, checked and turned into Optuna distributions or a grid.

    {"optimizer.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": true},
     "batch.prompts_per_step":  {"type": "int", "low": 2, "high": 8, "step": 2},
     "optimizer.name":          {"type": "categorical", "choices": ["adamw", "sgd"]}}

Keys are dotted config fields (trainers.config.field_specs' paths). Pure functions only: whether a
value passes the experiment's config is asked through a `parse` callable (sweeps.services passes
experiments.configs), so everything here is tested against hand-computed values.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from trainers.config import ConfigError, iter_field_specs

MAX_FIELDS = 20
MAX_CHOICES = 100
MAX_GRID_POINTS = 10_000
TYPES = ("float", "int", "categorical")
KEYS = {
    "float": {"type", "low", "high", "log", "step"},
    "int": {"type", "low", "high", "log", "step"},
    "categorical": {"type", "choices"},
}


class SpaceError(ValueError):
    """An unusable space: `errors` maps `space.<field>` (or `space`) to what is wrong and the fix."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def sweepable_fields() -> dict[str, str]:
    """Every config field a sweep may set: dotted path -> kind (lists such as `rewards` excluded)."""
    return {f.path: f.kind for f in iter_field_specs() if f.kind not in ("list",)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, str)) or _is_number(value)


def _check_one(spec: Any) -> str:
    """What is wrong with one field's spec ('' when nothing)."""
    if not isinstance(spec, dict) or spec.get("type") not in TYPES:
        return (
            'must be an object with "type": "float" | "int" | "categorical", e.g. '
            '{"type": "float", "low": 0.0001, "high": 0.01, "log": true}'
        )
    kind = spec["type"]
    extra = sorted(set(spec) - KEYS[kind])
    if extra:
        return f"unknown key(s) {', '.join(extra)} for type {kind}; allowed: {', '.join(sorted(KEYS[kind]))}"
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            return '"choices" must be a non-empty list, e.g. ["adamw", "sgd"]'
        if len(choices) > MAX_CHOICES:
            return f"at most {MAX_CHOICES} choices, got {len(choices)}"
        if not all(_is_scalar(c) for c in choices):
            return "each choice must be a string, a number, true/false or null"
        if len({repr(c) for c in choices}) != len(choices):
            return "the choices repeat a value; list each once"
        return ""
    number = _is_int if kind == "int" else _is_number
    low, high = spec.get("low"), spec.get("high")
    if not (number(low) and number(high)):
        return f'"low" and "high" must both be {"whole numbers" if kind == "int" else "finite numbers"}'
    if low > high:
        return f"low ({low}) is above high ({high}); swap them"
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        return '"log" must be true or false'
    if log and low <= 0:
        return f'"log": true needs low above 0, got {low}'
    if step is not None:
        if not (number(step) and step > 0):
            return f'"step" must be a positive {"whole number" if kind == "int" else "number"}'
        if log:
            return '"step" and "log": true cannot be combined; drop one'
    return ""


def check_shape(space: Any) -> dict[str, dict[str, Any]]:
    """The space if its shape is right and every key is a sweepable config field, else SpaceError
    naming each bad field."""
    if not isinstance(space, dict) or not space:
        raise SpaceError({"space": 'must be a non-empty object {"dotted.field": {"type": ...}}'})
    if len(space) > MAX_FIELDS:
        raise SpaceError({"space": f"at most {MAX_FIELDS} fields, got {len(space)}"})
    fields = sweepable_fields()
    errors: dict[str, str] = {}
    for name, spec in space.items():
        if name not in fields:
            near = sorted(f for f in fields if f.split(".")[-1] == str(name).split(".")[-1])
            hint = f"; did you mean {', '.join(near)}?" if near else "; see the experiment form for the field names"
            errors[f"space.{name}"] = f"no config field {name!r}{hint}"
            continue
        problem = _check_one(spec)
        if problem:
            errors[f"space.{name}"] = problem
        elif spec["type"] == "float" and fields[name] == "int":
            errors[f"space.{name}"] = 'is a whole-number field: use "type": "int"'
    if errors:
        raise SpaceError(errors)
    return space


def distributions(space: dict[str, dict[str, Any]]) -> dict[str, BaseDistribution]:
    """Optuna's distribution of each field (the space already checked)."""
    out: dict[str, BaseDistribution] = {}
    for name in sorted(space):
        spec = space[name]
        if spec["type"] == "categorical":
            out[name] = CategoricalDistribution(spec["choices"])
        elif spec["type"] == "int":
            out[name] = IntDistribution(
                spec["low"], spec["high"], log=spec.get("log", False), step=spec.get("step") or 1
            )
        else:
            out[name] = FloatDistribution(
                float(spec["low"]), float(spec["high"]), log=spec.get("log", False), step=spec.get("step")
            )
    return out


def grid_values(name: str, spec: dict[str, Any]) -> list[Any]:
    """The values a grid takes for one field: a categorical's choices, or an int range by its step.
    SpaceError for a float range (a grid needs listed values)."""
    if spec["type"] == "categorical":
        return list(spec["choices"])
    if spec["type"] == "int" and not spec.get("log", False):
        step = spec.get("step") or 1
        count = (spec["high"] - spec["low"]) // step + 1
        if count > MAX_GRID_POINTS:
            raise SpaceError({f"space.{name}": f"the range has {count} values; a grid takes at most {MAX_GRID_POINTS}"})
        return list(range(spec["low"], spec["high"] + 1, step))
    raise SpaceError(
        {
            f"space.{name}": 'a grid needs listed values: use "type": "categorical" with '
            '"choices", or an int range without "log"'
        }
    )


def grid_size(space: dict[str, dict[str, Any]]) -> int:
    return math.prod(len(grid_values(name, space[name])) for name in sorted(space))


def grid_point(space: dict[str, dict[str, Any]], number: int) -> dict[str, Any]:
    """Trial `number`'s point of the grid: the product of the fields' values in sorted field order
    (the last field varies fastest). IndexError past the grid."""
    names = sorted(space)
    if not 0 <= number < grid_size(space):
        raise IndexError(f"the grid has {grid_size(space)} points; there is no point {number}")
    point, rest = {}, number
    for name in reversed(names):
        values = grid_values(name, space[name])
        rest, index = divmod(rest, len(values))
        point[name] = values[index]
    return {name: point[name] for name in names}


def check_grid(space: dict[str, dict[str, Any]], max_trials: int) -> None:
    """SpaceError unless every field has listed values and the grid holds at least `max_trials` points."""
    for name in sorted(space):
        grid_values(name, space[name])
    size = grid_size(space)
    if size > MAX_GRID_POINTS:
        raise SpaceError({"space": f"the grid has {size} points; at most {MAX_GRID_POINTS}"})
    if max_trials > size:
        raise SpaceError({"max_trials": f"the grid has {size} points; set max_trials to {size} or fewer"})


def with_params(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `config` with each dotted field of `params` set (sections made as needed)."""
    out = copy.deepcopy(config)
    for path, value in params.items():
        node = out
        *parents, leaf = path.split(".")
        for key in parents:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[leaf] = value
    return out


def extremes(spec: dict[str, Any]) -> list[Any]:
    """The values a space must show to be valid before any trial starts: each choice, or low and high."""
    if spec["type"] == "categorical":
        return list(spec["choices"])
    return [spec["low"]] if spec["low"] == spec["high"] else [spec["low"], spec["high"]]


def check_extremes(
    space: dict[str, dict[str, Any]], config: dict[str, Any], parse: Callable[[dict[str, Any]], Any]
) -> None:
    """SpaceError naming each field one of whose extremes (each choice, low, high) the config
    schema refuses when set alone on `config`: `parse(raw)` raises ConfigError for a bad config."""
    errors: dict[str, str] = {}
    for name in sorted(space):
        for value in extremes(space[name]):
            try:
                parse(with_params(config, {name: value}))
            except ConfigError as exc:
                problems = "; ".join(f"{p.field}: {p.message}" for p in exc.problems)
                errors[f"space.{name}"] = f"the value {value!r} makes the config invalid ({problems}); narrow the range"
                break
    if errors:
        raise SpaceError(errors)


__all__ = [
    "SpaceError",
    "check_extremes",
    "check_grid",
    "check_shape",
    "distributions",
    "extremes",
    "grid_point",
    "grid_size",
    "grid_values",
    "sweepable_fields",
    "with_params",
]

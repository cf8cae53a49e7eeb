"""`--set path.to.field=value` overrides applied to a config dict (pure functions)."""

from __future__ import annotations

import copy
import json
from typing import Any


class OverrideError(ValueError):
    pass


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """`train.max_steps=50` -> (["train", "max_steps"], 50). The value is read as JSON when it is
    JSON (numbers, true/false/null, lists, quoted strings), else taken as a plain string."""
    path, sep, raw = text.partition("=")
    keys = path.strip().split(".")
    if not sep or not all(keys):
        raise OverrideError(f"--set {text!r}: expected PATH=VALUE, e.g. train.max_steps=50")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return keys, value


def apply_overrides(config: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """A copy of `config` with each assignment set (missing sections are created)."""
    result = copy.deepcopy(config)
    for text in assignments:
        keys, value = parse_assignment(text)
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise OverrideError(f"--set {text!r}: {'.'.join(keys[:depth + 1])} is not a section")
            node = child
        node[keys[-1]] = value
    return result

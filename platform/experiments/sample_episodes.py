"""Multi-turn episodes of rollout samples: the keys a multi-turn environment's sample carries, read
back from `RolloutSample.extra` for the API and the rollout browser.

The trainer's `Rollout.samples()` adds, for an environment with several turns (`env.name`
calculator, guess_number, a project's own), these keys to a sample:

    "env": "calculator",
    "turns": [{"role": "assistant", "text": "...", "tokens": 17},
              {"role": "tool", "text": "<tool_response>\\n11\\n</tool_response>", "tokens": 9}, ...],
    "reward_parts": {"math_answer": 1.0, "env/solved": 0.5},
    "end_reason": "done" | "max_turns" | "max_total_tokens" | "env_error",
    "error": "..."            (only with end_reason env_error)
    "tool_calls": 1, "tool_errors": 0

runner.db_hooks keeps every key the trainer sends in `extra` (one JSON column, so no migration:
older rows and single-turn samples have none of these keys and read back exactly as before).
`episode(extra)` is the one reader: None for a single-turn sample (no "turns" list), else the keys
checked and of fixed types, whatever a project's environment wrote. `json_safe(value)` is what
db_hooks stores: NaN and infinities are not JSON (SQLite's JSON_VALID and PostgreSQL's jsonb refuse
them), so they become the strings "NaN", "Infinity", "-Infinity" (metric_series.json_value, as in the
metrics API).

Pure functions: tests call them with hand-made dicts.
"""

from __future__ import annotations

import math
from typing import Any

from experiments.metric_series import NONFINITE_JSON, json_value

END_REASONS = ("done", "max_turns", "max_total_tokens", "env_error")
TOOL_CALL_TAG = "<tool_call>"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _part_value(value: Any) -> float | str | None:
    """A reward part: a number (finite float), one of the non-finite spellings, else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return json_safe(float(value))
    return value if value in NONFINITE_JSON else None


def _turn(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    role, text = value.get("role"), value.get("text")
    role = role if isinstance(role, str) and role else "?"
    text = text if isinstance(text, str) else ("" if text is None else str(text))
    return {"role": role, "label": turn_label(role, text), "text": text, "tokens": _int(value.get("tokens"))}


def episode(extra: Any) -> dict[str, Any] | None:
    """A sample's episode from its stored `extra`, or None for a single-turn sample (no "turns" list).

    {"env": str | None, "turns": [{"role": str, "label": str, "text": str, "tokens": int | None}, ...],
     "reward_parts": {name: float | "NaN" | "Infinity" | "-Infinity" | None}, "end_reason": str | None,
     "error": str | None, "tool_calls": int | None, "tool_errors": int | None}. A turn that is not a
    mapping is left out; a key of the wrong type reads as None (a project's environment may write
    anything: the page and the API never fail on it). A turn's `label` is turn_label's."""
    if not isinstance(extra, dict) or not isinstance(extra.get("turns"), list):
        return None
    parts = extra.get("reward_parts")
    return {
        "env": _text(extra.get("env")),
        "turns": [t for t in (_turn(v) for v in extra["turns"]) if t is not None],
        "reward_parts": {str(k): _part_value(v) for k, v in parts.items()} if isinstance(parts, dict) else {},
        "end_reason": _text(extra.get("end_reason")),
        "error": _text(extra.get("error")),
        "tool_calls": _int(extra.get("tool_calls")),
        "tool_errors": _int(extra.get("tool_errors")),
    }


def turn_label(role: str, text: str) -> str:
    """What the browser calls a turn: an assistant turn holding a <tool_call> is a "tool call", a
    tool's reply a "tool response", any other role its own name ("assistant", "user")."""
    if role == "assistant" and TOOL_CALL_TAG in text:
        return "tool call"
    if role == "tool":
        return "tool response"
    return role


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float (at any depth of dicts and lists) spelled as a string:
    NaN -> "NaN", inf -> "Infinity", -inf -> "-Infinity"; everything else unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return json_value(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value

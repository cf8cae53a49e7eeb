"""How the client prints what the API answers (pure functions: data in, text out)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FIRST_METRICS = ("reward/mean",)  # shown first on a watch line, the rest by name


def number(value: Any) -> str:
    """4 significant digits; None (missing, or not finite) as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, ".4g")
    return str(value)


def table(headers: list[str], rows: Iterable[list[Any]]) -> str:
    """Left-aligned columns, two spaces apart, headers first."""
    cells = [headers] + [[number(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def points_by_step(series: dict[str, list[list[Any]]]) -> dict[int, dict[str, Any]]:
    """{"loss": [[1, 2.0], [2, 1.5]], "r": [[2, 0.5]]} -> {1: {"loss": 2.0}, 2: {"loss": 1.5, "r": 0.5}},
    steps in order."""
    steps: dict[int, dict[str, Any]] = {}
    for name, points in series.items():
        for step, value in points:
            steps.setdefault(step, {})[name] = value
    return dict(sorted(steps.items()))


def metric_line(step: int, values: dict[str, Any], only: list[str] | None = None) -> str:
    """`step 3  reward/mean=0.75  loss=1.5`: `only` the given metrics (in that order), else
    reward/mean first and the others by name."""
    if only:
        names = [n for n in only if n in values]
    else:
        names = [n for n in FIRST_METRICS if n in values] + sorted(n for n in values if n not in FIRST_METRICS)
    return "  ".join([f"step {step}"] + [f"{name}={number(values[name])}" for name in names])


def sample_block(sample: dict[str, Any]) -> str:
    """One rollout sample for people: its header, then the prompt, completion and expected answer."""
    header = (
        f"--- sample {sample.get('index')}  reward={number(sample.get('reward'))}  "
        f"advantage={number(sample.get('advantage'))}"
    )
    return "\n".join(
        [
            header,
            "prompt:",
            _indent(sample.get("prompt", "")),
            "completion:",
            _indent(sample.get("completion", "")),
            f"answer: {sample.get('answer', '')}",
        ]
    )


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in (text or "").splitlines() or [""])

"""The run dashboard's charts: which metrics share a chart, derived from trainers.config.metric_names (the one
list of metric names) so that a new metric gets a chart without touching this file; a multi-turn
environment's env/* and eval/env/* metrics share two charts each (env_panels)."""

from __future__ import annotations

from typing import Any

from trainers.config.metric_names import METRIC_NAMES, TRAIN_METRICS

BANDS = {"reward/std": "reward/mean"}  # spread -> the mean it is drawn around (mean ± spread)
SHARED_PREFIXES = ("timing/", "eval/", "is/weight_", "mismatch/logprob_diff_")  # these prefixes share a chart
# system/ metrics in bytes (host, process and accelerator memory) share the "System memory" chart
MEMORY_PREFIX, MEMORY_SUFFIX, MEMORY_TITLE = "system/", "_bytes", "System memory (bytes)"
# A multi-turn environment's metrics (the keys the trainer's episodes report; eval adds eval/env/<the same names>): two
# charts, counts per episode and fractions of episodes, right before the evaluation charts (their
# eval/ twins right after them). Lazy: a single-turn run reports none and shows neither.
ENV_PREFIXES = ("env/", "eval/env/")
ENV_PER_EPISODE = ("turns_mean", "tool_calls_mean", "tool_errors_mean")
ENV_FRACTIONS = ("tool_use_fraction", "max_turns_fraction", "max_total_tokens_fraction", "error_fraction")


def env_panels(prefix: str) -> list[dict[str, Any]]:
    """The environment charts for metric prefix "env/" (training episodes) or "eval/env/" (evaluation)."""
    return [
        {
            "metric": prefix + ENV_PER_EPISODE[0],
            "title": f"{prefix}* per episode (turns, tool calls, tool errors)",
            "metrics": [prefix + n for n in ENV_PER_EPISODE],
            "band": None,
            "lazy": True,
        },
        {
            "metric": prefix + ENV_FRACTIONS[0],
            "title": f"{prefix}* fraction of episodes (tool use, cut off, errors)",
            "metrics": [prefix + n for n in ENV_FRACTIONS],
            "band": None,
            "lazy": True,
        },
    ]


def chart_panels() -> list[dict[str, Any]]:
    """[{"metric": primary name, "title", "metrics": [names], "band": spread name or None,
    "lazy": bool}] in METRIC_NAMES order. A lazy chart (asynchronous, evaluation) appears only once
    its run reports one of its metrics; metrics not listed here get a chart of their own in the page."""
    panels: list[dict[str, Any]] = []
    by_key: dict[str, dict[str, Any]] = {}
    for name in METRIC_NAMES:
        if name in BANDS or name.startswith(ENV_PREFIXES):  # the environment charts: placed below
            continue
        key = next((p for p in SHARED_PREFIXES if name.startswith(p)), name)
        if name.startswith(MEMORY_PREFIX) and name.endswith(MEMORY_SUFFIX):
            key = MEMORY_TITLE
        if key in by_key:
            by_key[key]["metrics"].append(name)
            by_key[key]["title"] = key if key == MEMORY_TITLE else key + "*"
            continue
        panel = {"metric": name, "title": name, "metrics": [name], "band": None, "lazy": name not in TRAIN_METRICS}
        by_key[key] = panel
        panels.append(panel)
    for spread, mean in BANDS.items():
        for panel in panels:
            if panel["metric"] == mean:
                panel["band"] = spread
                panel["title"] = f"{mean} ± {spread}"
    first_eval = next((i for i, p in enumerate(panels) if p["metric"].startswith("eval/")), len(panels))
    after_eval = next(
        (i + 1 for i, p in reversed(list(enumerate(panels))) if p["metric"].startswith("eval/")), len(panels)
    )
    panels[after_eval:after_eval] = env_panels("eval/env/")
    panels[first_eval:first_eval] = env_panels("env/")
    return panels

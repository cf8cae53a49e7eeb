"""The run dashboard's charts: which metrics share a chart, derived from trainers.config.metric_names (the one
list of metric names) so that a new metric gets a chart without touching this file."""

from __future__ import annotations

from typing import Any

from trainers.config.metric_names import METRIC_NAMES, TRAIN_METRICS

BANDS = {"reward/std": "reward/mean"}          # spread -> the mean it is drawn around (mean ± spread)
SHARED_PREFIXES = ("timing/", "eval/", "is/weight_")  # metrics with one of these prefixes share a chart
# system/ metrics in bytes (host, process and accelerator memory) share the "System memory" chart
MEMORY_PREFIX, MEMORY_SUFFIX, MEMORY_TITLE = "system/", "_bytes", "System memory (bytes)"


def chart_panels() -> list[dict[str, Any]]:
    """[{"metric": primary name, "title", "metrics": [names], "band": spread name or None,
    "lazy": bool}] in METRIC_NAMES order. A lazy chart (asynchronous, evaluation) appears only once
    its run reports one of its metrics; metrics not listed here get a chart of their own in the page."""
    panels: list[dict[str, Any]] = []
    by_key: dict[str, dict[str, Any]] = {}
    for name in METRIC_NAMES:
        if name in BANDS:
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
    return panels

"""The run page's charts for one run: web.dashboard's panels (every trainer metric, grouped by
prefix) adjusted to the run's config.

- One "reward per function" chart, right after the reward chart: a series reward/<name> per reward
  function of the run's spec (its `rewards`, else its built-in task's defaults), each function's
  mean raw score per step, so a run shows which part of its reward it learns.
- With grpo.beta = 0 the trainer reports no kl and no loss/kl: those charts wait for data (lazy)
  instead of standing empty, and `kl_note` says why they are missing.
"""

from __future__ import annotations

import copy
from typing import Any

from web.dashboard import chart_panels

KL_METRICS = ("kl", "loss/kl")
REWARD_PANEL_TITLE = "reward per function (mean raw score)"


def reward_function_names(config: dict[str, Any]) -> list[str]:
    """The reward functions a run with this (stored) config is scored by, in spec order: its
    `rewards` names, else its built-in task's default rewards, else none."""
    listed = config.get("rewards") if isinstance(config, dict) else None
    if isinstance(listed, list) and listed:
        return [str(r["name"]) for r in listed if isinstance(r, dict) and r.get("name")]
    from trainers.data.tasks import TASKS

    data = config.get("data") if isinstance(config, dict) else None
    name = data.get("task") if isinstance(data, dict) else None
    task = TASKS[name] if name in TASKS else None
    return [name for name, _ in task.default_rewards] if task else []


def beta_is_zero(config: dict[str, Any]) -> bool:
    """Whether the run trains without a KL penalty (grpo.beta = 0; the schema's default when unset)."""
    from trainers.config.schema import GrpoSection

    grpo = config.get("grpo") if isinstance(config, dict) else None
    beta = (grpo or {}).get("beta") if isinstance(grpo, dict) else None
    if beta is None:
        beta = GrpoSection.model_fields["beta"].default
    try:
        return float(beta) == 0.0
    except (TypeError, ValueError):
        return False


def run_panels(config: dict[str, Any]) -> list[dict[str, Any]]:
    """chart_panels() for a run with this config (see the module docstring)."""
    panels = copy.deepcopy(chart_panels())
    if beta_is_zero(config):
        for panel in panels:
            if panel["metric"] in KL_METRICS:
                panel["lazy"] = True
    names = reward_function_names(config)
    if names:
        metrics = [f"reward/{name}" for name in names]
        panel = {"metric": metrics[0], "title": REWARD_PANEL_TITLE, "metrics": metrics, "band": None, "lazy": True}
        after = next((i for i, p in enumerate(panels) if p["metric"] == "reward/mean"), -1)
        panels.insert(after + 1, panel)
    return panels


def kl_note(config: dict[str, Any]) -> str:
    """The line the run page shows when the KL charts are left out ('' when they are not)."""
    if beta_is_zero(config):
        return "kl and loss/kl are not charted: this run trains with grpo.beta = 0 (no KL penalty, no reference model)."
    return ""

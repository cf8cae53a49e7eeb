"""Helpers the platform tests import: a tiny valid config; how long a browser test waits."""

from __future__ import annotations

import yaml

from trainers.config import parse_config

TINY_CONFIG_YAML = """
seed: 0
model: {preset: tiny}
data: {task: arithmetic, train_prompts: 64, eval_prompts: 0}
rollout: {max_new_tokens: 4}
batch: {prompts_per_step: 4}
grpo: {num_generations: 4, beta: 0.0}
train: {max_steps: 6, samples_per_step: 2}
checkpoint: {every_steps: 2, keep_last: 2}
"""

# Playwright's assertions wait 5 s by default. Under the test command's three lanes on 2 cores a
# page's first fetch of its metrics has taken longer (CI saw a chart still "Loading metrics…" after
# 5 s). A wait ends as soon as its condition holds, so a longer bound costs nothing when a test passes.
BROWSER_WAIT_MS = 20_000
# A page's load waits for its scripts (Plotly's is 4.6 MB, served by the live test server from a
# fresh browser each test): CI saw a run page's load pass 20 s while the three lanes shared 2 cores.
BROWSER_NAVIGATION_MS = 60_000


def set_browser_waits(page, wait_ms: int = BROWSER_WAIT_MS) -> None:
    """Bound a Playwright page's waits: an action or locator `wait_ms`, a navigation (goto, reload,
    a click that loads a page) BROWSER_NAVIGATION_MS."""
    page.set_default_timeout(wait_ms)
    page.set_default_navigation_timeout(BROWSER_NAVIGATION_MS)


def tiny_config(**overrides) -> dict:
    """A small valid config as plain data (what Experiment.config stores)."""
    raw = yaml.safe_load(TINY_CONFIG_YAML)
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return parse_config(raw).model_dump(mode="json", by_alias=True)

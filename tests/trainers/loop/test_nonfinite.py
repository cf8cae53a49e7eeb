"""A run whose loss or gradient norm goes non-finite fails, naming the step and the metric; the bad
step's metrics are still reported (metrics.jsonl keeps the NaN) and the newest checkpoint is the
last good one. Both rollout modes (synchronous and asynchronous) and the CLI."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from trainers.config import parse_config
from trainers.loop.run_files import RunFilesHooks
from trainers.loop.trainer import TrainingDiverged, divergence, train
from trainers.step.hooks import Hooks, MultiHooks

RAW = {
    "model": {"preset": "tiny"},
    "data": {"task": "copy", "train_prompts": 32, "eval_prompts": 0},
    "batch": {"prompts_per_step": 4},
    "grpo": {"num_generations": 2, "beta": 0.0},
    "optimizer": {"learning_rate": 1e308},
    "train": {"max_steps": 4},
    "checkpoint": {"every_steps": 1},
}


class Recorded(Hooks):
    def __init__(self):
        self.steps, self.logs = {}, []

    def on_step(self, step, metrics):
        self.steps[step] = dict(metrics)

    def on_log(self, message, level="info"):
        self.logs.append((level, message))


def test_divergence_names_the_step_the_metric_and_the_fix():
    config = parse_config(RAW)
    assert divergence(3, {"loss/policy": 0.5, "grad_norm": 2.0, "entropy": float("nan")}, config) is None
    error = divergence(2, {"loss/policy": 0.5, "grad_norm": float("nan")}, config)
    assert isinstance(error, TrainingDiverged) and (error.step, error.metric) == (2, "grad_norm")
    assert str(error) == (
        "step 2: grad_norm is nan (non-finite): training diverged; lower "
        "optimizer.learning_rate (now 1e+308) or optimizer.max_grad_norm (now 1)"
    )
    assert divergence(1, {"loss/policy": float("-inf")}, config).metric == "loss/policy"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_huge_learning_rate_fails_the_run_at_the_first_bad_step(tmp_path, asynchronous):
    raw = {**RAW, "async": {"enabled": asynchronous}}
    hooks = Recorded()
    with pytest.raises(TrainingDiverged) as caught:
        train(parse_config(raw), str(tmp_path), MultiHooks(hooks, RunFilesHooks(str(tmp_path))))
    bad = caught.value.step
    assert bad == max(hooks.steps) and bad < RAW["train"]["max_steps"]
    assert str(caught.value).startswith(f"step {bad}: {caught.value.metric} is ")
    # the bad step is reported, every step before it was finite
    assert not math.isfinite(hooks.steps[bad][caught.value.metric])
    assert all(
        math.isfinite(m["grad_norm"]) and math.isfinite(m["loss/policy"])
        for step, m in hooks.steps.items()
        if step < bad
    )
    assert ("error", str(caught.value)) in hooks.logs
    # metrics.jsonl holds the non-finite value as such (Python's json: NaN / Infinity)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == sorted(hooks.steps)
    assert not math.isfinite(rows[-1][caught.value.metric])
    # the bad step's weights are not checkpointed: the newest checkpoint is the last good step
    # (param_norm catches weights an update made non-finite at once: then no checkpoint at all)
    assert max((int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()), default=0) == bad - 1
    assert str(caught.value) in (tmp_path / "log.txt").read_text()
    assert not (tmp_path / "summary.json").exists()


def test_cli_run_exits_1_with_one_line_and_no_traceback(tmp_path):
    config = tmp_path / "diverge.yaml"
    config.write_text(json.dumps(RAW))  # JSON is YAML
    out = subprocess.run(
        [sys.executable, "-m", "trainers", "run", str(config), "--out", str(tmp_path / "run")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("failed: step ") and "(non-finite): training diverged; lower optimizer.learning_rate" in last

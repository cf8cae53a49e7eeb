"""The control object: pause = checkpoint then return; stop = return without a checkpoint."""

import os

import pytest

from trainers.config import parse_config
from trainers.loop.trainer import train
from trainers.step.hooks import Action, Control, Hooks

RAW = {
    "model": {"preset": "tiny"},
    "data": {"task": "copy", "train_prompts": 32, "eval_prompts": 0},
    "batch": {"prompts_per_step": 4},
    "grpo": {"num_generations": 2, "beta": 0.0},
    "train": {"max_steps": 6},
    "checkpoint": {"every_steps": 0},
}


class AfterSteps(Control):
    def __init__(self, steps, action):
        self.steps, self.action, self.seen = steps, action, 0

    def poll(self):
        self.seen += 1
        return self.action if self.seen > self.steps else Action.CONTINUE


class Steps(Hooks):
    def __init__(self):
        self.steps = []

    def on_step(self, step, metrics):
        self.steps.append(step)


def test_pause_checkpoints_then_returns_and_a_rerun_continues(tmp_path):
    hooks = Steps()
    result = train(parse_config(RAW), str(tmp_path), hooks, AfterSteps(2, Action.PAUSE))
    assert result.status == "paused" and result.final_step == 2 and hooks.steps == [1, 2]
    assert os.listdir(tmp_path / "checkpoints") == ["2"]
    again = Steps()
    result = train(parse_config(RAW), str(tmp_path), again)
    assert result.status == "succeeded" and again.steps == [3, 4, 5, 6]


def test_stop_returns_cancelled_without_a_checkpoint(tmp_path):
    result = train(parse_config(RAW), str(tmp_path), Steps(), AfterSteps(1, Action.STOP))
    assert result.status == "cancelled" and result.final_step == 1
    assert os.listdir(tmp_path / "checkpoints") == []


def test_a_stop_of_a_run_that_went_on_elsewhere_returns_and_logs_requeued(tmp_path):
    """The control's stopped_as() names the stop: a run requeued as another attempt is not cancelled."""

    class Requeued(AfterSteps):
        def stopped_as(self):
            return "requeued"

    class Logs(Steps):
        def __init__(self):
            super().__init__()
            self.lines = []

        def on_log(self, message, level="info"):
            self.lines.append(message)

    hooks = Logs()
    result = train(parse_config(RAW), str(tmp_path), hooks, Requeued(1, Action.STOP))
    assert result.status == "requeued" and result.final_step == 1
    assert "run requeued at step 1" in hooks.lines and not any("cancelled" in line for line in hooks.lines)


def test_the_trainer_marks_its_phases(tmp_path):
    """What a watcher reads (trainers.step.phases): an update inside "step N > training", a checkpoint
    being reported inside "checkpoint step N", a sample inside its step; nothing open between steps."""
    from trainers.step import phases

    raw = {**RAW, "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2}, "train": {"max_steps": 2}}
    raw["checkpoint"] = {"every_steps": 2}
    seen = {"poll": [], "checkpoint": [], "samples": []}

    class Watching(Control):
        def poll(self):
            seen["poll"].append(phases.current())
            return Action.CONTINUE

    class Reporting(Hooks):
        def on_checkpoint(self, step, path, size_bytes, metrics):
            seen["checkpoint"].append(phases.current())

        def on_samples(self, step, samples):
            seen["samples"].append(phases.current())

    train(parse_config(raw), str(tmp_path), Reporting(), Watching())
    assert ["step 1", "training"] in seen["poll"] and [] in seen["poll"]  # between updates; between steps
    assert seen["checkpoint"] == [["checkpoint step 2"]]
    assert seen["samples"][:2] == [["step 1"], ["step 2"]]
    assert phases.current() == []


def test_reported_learning_rate_follows_warmup(tmp_path):
    """Warmup over 2 steps x 2 updates/step: update u (0-based) uses lr * (u + 1) / 4, so the last update
    of step k (u = 2k - 1) uses lr * 2k / 4, and the peak from then on."""
    raw = {
        **RAW,
        "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2},
        "train": {"max_steps": 3},
        "optimizer": {"learning_rate": 0.01, "warmup_steps": 2},
    }
    rates = []

    class Rates(Hooks):
        def on_step(self, step, metrics):
            rates.append(metrics["learning_rate"])

    train(parse_config(raw), str(tmp_path), Rates())
    assert rates == pytest.approx([0.005, 0.01, 0.01], abs=1e-9)

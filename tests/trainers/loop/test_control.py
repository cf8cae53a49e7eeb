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

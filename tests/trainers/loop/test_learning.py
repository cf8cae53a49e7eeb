"""From random init, GRPO on a built-in task raises the mean reward clearly within the CI budget.

Threshold and why: a random policy over the 100-token character vocabulary scores ~0.03 on the
arithmetic task's default rewards (exact 1.0 + prefix 0.5 + alphabet 0.25 partial credit). Mean
reward over the last 10 of 120 steps must reach >= 0.12 and >= 3x the first 10 steps' mean: that
needs the policy to have learned the answer alphabet (digits) and length, which no untrained
policy does by chance. Measured on this machine: 0.03 -> 0.21 (seed 0), about 20 s.
"""

import numpy as np

from trainers.config import load_config
from trainers.loop.trainer import train
from trainers.step.hooks import Hooks


def test_reward_rises_on_arithmetic_from_random_init(tmp_path):
    config = load_config(
        "configs/demo.yaml",
        ["train.max_steps=120", "eval.every_steps=0", "checkpoint.every_steps=0", "checkpoint.keep_best_metric=null"],
    )
    rewards = []

    class Record(Hooks):
        def on_step(self, step, metrics):
            rewards.append(metrics["reward/mean"])

    train(config, str(tmp_path), Record())
    first, last = float(np.mean(rewards[:10])), float(np.mean(rewards[-10:]))
    assert first < 0.06, first
    assert last >= 0.12 and last >= 3 * first, (first, last)

"""Skipping the sequences of all-equal groups: without a KL term their advantage is 0 and so is
their gradient, so an update that trains only the micro-batches holding the other sequences must
land on the same weights as one that trains them all."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from trainers.config import parse_config
from trainers.loop.plan import OptimizerUpdate, SequenceSlice, informative_first, split_sequences
from trainers.loop.trainer import GRPOTrainer


def _update(start: int, stop: int, micro: int) -> OptimizerUpdate:
    return OptimizerUpdate(0, 0, SequenceSlice(start, stop), split_sequences(stop - start, micro, offset=start))


def test_informative_rows_come_first_by_hand():
    advantages = np.array([0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.5, 0.0])
    rows, count = informative_first(advantages, _update(0, 8, 2))
    assert rows.tolist() == [2, 3, 6, 0, 1, 4, 5, 7]
    assert count == 2  # 3 informative rows fill 2 micro-batches of 2
    rows, count = informative_first(advantages, _update(4, 8, 2))  # the second mini-batch only
    assert rows.tolist() == [6, 4, 5, 7] and count == 1
    rows, count = informative_first(np.zeros(8), _update(0, 8, 4))
    assert rows.tolist() == list(range(8)) and count == 1  # always one micro-batch: the optimizer still steps
    rows, count = informative_first(np.ones(8), _update(0, 8, 4))
    assert count == 2
    # 5 informative rows need 3 micro-batches of 2; counts are powers of two: 4 (of 6).
    _, count = informative_first(np.array([1.0] * 5 + [0.0] * 7), _update(0, 12, 2))
    assert count == 4
    _, count = informative_first(np.array([1.0] * 11 + [0.0]), _update(0, 12, 2))
    assert count == 6  # capped at the update's micro-batches


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum"])
def test_skipping_flat_groups_gives_the_same_update(tmp_path, aggregation):
    config = parse_config({
        "model": {"preset": "tiny"}, "data": {"task": "arithmetic", "train_prompts": 64},
        "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 2},
        "grpo": {"num_generations": 4, "beta": 0.0, "loss_aggregation": aggregation},
        "optimizer": {"learning_rate": 0.05},
    })
    trainer = GRPOTrainer(config, str(tmp_path / "a"))
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    # Two groups all equal (advantage 0), two with signal.
    rollout.advantages = np.array([0, 0, 0, 0, 1, -1, 0.5, -0.5, 0, 0, 0, 0, -2, 2, 0, 0], np.float32)
    start = jax.tree.map(np.asarray, trainer.state.params)

    trainer.skip_flat_groups = True
    skipped_metrics = trainer.train_on(rollout)
    skipped = jax.tree.map(np.asarray, trainer.state.params)

    full = GRPOTrainer(config, str(tmp_path / "b"))
    full.skip_flat_groups = False
    full_metrics = full.train_on(rollout)
    every = jax.tree.map(np.asarray, full.state.params)

    # 6 sequences have a non-zero advantage: they fill 3 micro-batches of 2, rounded up to 4 of the 8.
    assert skipped_metrics["train/trained_sequence_fraction"] == pytest.approx(8 / 16)
    assert full_metrics["train/trained_sequence_fraction"] == 1.0
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(every)))
    assert moved > 1e-3  # the update did something
    for a, b in zip(jax.tree.leaves(skipped), jax.tree.leaves(every)):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)
    assert skipped_metrics["loss/policy"] == pytest.approx(full_metrics["loss/policy"], abs=1e-6)

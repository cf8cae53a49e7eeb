"""Skipping the sequences of all-equal groups: without a KL term their advantage is 0 and so is
their gradient, so an update that trains only the micro-batches holding the other sequences must
land on the same weights as one that trains them all. Also: which batches are whole groups
sharing one prompt (`shared_prompt_group`), whose prompts then run once per group."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from trainers.config import parse_config
from trainers.loop.plan import (
    OptimizerUpdate,
    SequenceSlice,
    informative_first,
    shared_prompt_group,
    split_sequences,
)
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


def test_shared_prompt_group_accepts_only_whole_aligned_runs_of_one_prompt():
    """Rows come as runs of G sharing tokens and padding -> G; anything else -> 1 (no sharing)."""
    a, b = [5, 6, 7], [0, 8, 9]
    valid_a, valid_b = [True] * 3, [False, True, True]
    tokens = np.array([[a, a, b, b]])  # [A=1, rows=4, Lp=3]
    valid = np.array([[valid_a, valid_a, valid_b, valid_b]])
    assert shared_prompt_group(tokens, valid, 2) == 2
    assert shared_prompt_group(tokens[0], valid[0], 2) == 2  # a log-prob micro-batch [rows, Lp]
    assert shared_prompt_group(tokens, valid, 4) == 1  # two prompts in one run of 4
    assert shared_prompt_group(tokens, valid, 1) == 1
    assert shared_prompt_group(tokens[:, :3], valid[:, :3], 2) == 1  # 3 rows: a group split
    shifted = np.array([[a, b, b, a]])  # reordered rows (informative_first): runs not aligned
    assert shared_prompt_group(shifted, np.array([[valid_a, valid_b, valid_b, valid_a]]), 2) == 1
    other_padding = valid.copy()
    other_padding[0, 3] = [True, True, True]  # same tokens, different padding: not the same prompt
    assert shared_prompt_group(tokens, other_padding, 2) == 1
    two_micro = np.stack([tokens[0], tokens[0][::-1]])  # [A=2, ...]: the second is b, b, a, a
    assert shared_prompt_group(two_micro, np.stack([valid[0], valid[0][::-1]]), 2) == 2


def test_the_trainer_runs_each_prompt_once_per_group_with_the_same_update(tmp_path, monkeypatch):
    """With whole groups per micro-batch the reference pass and the update take prompt_group=G, and
    land on the weights of the same step run with every prompt repeated (prompt_group=1)."""
    import trainers.loop.trainer as trainer_module

    config = parse_config({
        "model": {"preset": "tiny"}, "data": {"task": "arithmetic", "train_prompts": 64},
        "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 8},
        "grpo": {"num_generations": 4, "beta": 0.05},
        "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 1.0},  # the weights move by the gradient
    })

    def one_step(name):
        trainer = GRPOTrainer(config, str(tmp_path / name))
        starts.append(jax.tree.map(np.asarray, trainer.state.params))
        groups = []
        for attribute in ("update_fn", "logprob_fn"):
            jitted = getattr(trainer, attribute)
            setattr(trainer, attribute, lambda *args, _f=jitted, **kwargs: (groups.append(kwargs["prompt_group"]),
                                                                            _f(*args, **kwargs))[1])
        trainer.source.start(trainer.state.params, 0)
        rollout = trainer.source.next(0)
        trainer.source.stop()
        trainer.train_on(rollout)
        return groups, jax.tree.map(np.asarray, trainer.state.params)

    starts = []
    grouped_calls, grouped = one_step("grouped")
    assert grouped_calls and set(grouped_calls) == {4}
    monkeypatch.setattr(trainer_module, "shared_prompt_group", lambda *args: 1)
    whole_calls, whole = one_step("whole")
    assert set(whole_calls) == {1}
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(starts[0]), jax.tree.leaves(grouped)))
    assert moved > 1e-3  # the update did something
    for a, b in zip(jax.tree.leaves(grouped), jax.tree.leaves(whole)):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)

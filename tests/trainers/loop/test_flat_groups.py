"""Skipping the sequences of all-equal groups: without a KL term their advantage is 0 and so is
their gradient, so an update that trains only the micro-batches holding the other sequences must
land on the same weights as one that trains them all. Also: which batches are whole groups
sharing one prompt (`shared_prompt_group`), whose prompts then run once per group."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from trainers.config import parse_config
from trainers.loop.trainer import GRPOTrainer
from trainers.step.plan import (
    OptimizerUpdate,
    SequenceSlice,
    informative_first,
    shared_prompt_group,
    split_sequences,
)


def _update(start: int, stop: int, micro: int) -> OptimizerUpdate:
    return OptimizerUpdate(0, 0, SequenceSlice(start, stop), split_sequences(stop - start, micro, offset=start))


def test_informative_rows_come_first_by_hand():
    # Groups of 2: group 1 (rows 2, 3) and group 3 (rows 6, 7) are informative. Row 7 may have
    # advantage 0 (partial credit) and still moves with its group.
    informative = np.array([False, False, True, True, False, False, True, True])
    rows, count = informative_first(informative, _update(0, 8, 2))
    assert rows.tolist() == [2, 3, 6, 7, 0, 1, 4, 5]
    assert count == 2  # 4 informative rows fill 2 micro-batches of 2
    rows, count = informative_first(informative, _update(4, 8, 2))  # the second mini-batch only
    assert rows.tolist() == [6, 7, 4, 5] and count == 1
    rows, count = informative_first(np.zeros(8, bool), _update(0, 8, 4))
    assert rows.tolist() == list(range(8)) and count == 0  # nothing to learn: no pass at all
    rows, count = informative_first(np.ones(8, bool), _update(0, 8, 4))
    assert count == 2
    # 6 informative rows need 3 micro-batches of 2; counts are powers of two: 4 (of 6).
    _, count = informative_first(np.array([True] * 6 + [False] * 6), _update(0, 12, 2))
    assert count == 4
    _, count = informative_first(np.array([True] * 10 + [False] * 2), _update(0, 12, 2))
    assert count == 6  # capped at the update's micro-batches


def _one_rollout(config, tmp_path, name):
    trainer = GRPOTrainer(config, str(tmp_path / name))
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    return trainer, rollout


FLAT_CONFIG = {
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 64},
    "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 4},
    "grpo": {"num_generations": 4, "beta": 0.0},
    "optimizer": {"learning_rate": 0.05},
}


def test_a_zero_advantage_row_inside_an_informative_group_keeps_prompt_sharing(tmp_path):
    """Partial credit: group 1's rewards 1, 0.5, 0.5, 0 give row 5 and 6 advantage 0 under drgrpo; the
    skip must keep the group whole, so its micro-batch still runs its prompt once (prompt_group=G)."""
    config = parse_config({**FLAT_CONFIG, "grpo": {**FLAT_CONFIG["grpo"], "advantage": "drgrpo"}})
    trainer, rollout = _one_rollout(config, tmp_path, "a")
    rollout.rewards = np.array([1, 1, 1, 1, 1, 0.5, 0.5, 0, 0, 0, 0, 0, 1, 0, 1, 0], np.float32)
    rollout.advantages = np.array([0, 0, 0, 0, 0.5, 0, 0, -0.5, 0, 0, 0, 0, 0.5, -0.5, 0.5, -0.5], np.float32)
    groups = []
    jitted = trainer.update_fn
    trainer.update_fn = lambda *args, **kwargs: (groups.append(kwargs["prompt_group"]), jitted(*args, **kwargs))[1]
    metrics = trainer.train_on(rollout)
    assert groups == [4]  # one call, whole groups sharing their prompt
    assert metrics["train/trained_sequence_fraction"] == pytest.approx(8 / 16)


def test_an_all_flat_update_applies_the_optimizer_without_a_pass(tmp_path):
    """Every group flat: no forward/backward runs, yet the weights move exactly as a full zero-gradient
    update moves them (Adam's momentum from the step before)."""
    config = parse_config(FLAT_CONFIG)
    results = []
    for name, skip in (("skip", True), ("full", False)):
        trainer, rollout = _one_rollout(config, tmp_path, name)
        trainer.skip_flat_groups = skip
        trainer.train_on(rollout)  # a first update builds momentum
        before = jax.tree.map(np.asarray, trainer.state.params)
        rollout.rewards = np.ones_like(rollout.rewards)
        rollout.advantages = np.zeros_like(rollout.advantages)
        calls = []
        jitted = trainer.update_fn
        trainer.update_fn = lambda *args, _f=jitted, **kwargs: (calls.append(1), _f(*args, **kwargs))[1]
        metrics = trainer.train_on(rollout)
        results.append((before, jax.tree.map(np.asarray, trainer.state.params), calls, metrics))
    (before, skipped, skip_calls, skip_metrics), (_, full, full_calls, _) = results
    assert skip_calls == [] and full_calls == [1]
    assert skip_metrics["grad_norm"] == 0.0 and skip_metrics["train/trained_sequence_fraction"] == 0.0
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(skipped)))
    assert moved > 1e-4  # momentum moved the weights
    for a, b in zip(jax.tree.leaves(skipped), jax.tree.leaves(full)):
        np.testing.assert_allclose(a, b, atol=1e-7)


def test_skip_metrics_cover_the_informative_groups_whatever_the_rounding(tmp_path):
    """Micro-batches of 2 train exactly the 8 informative rows; of 16, the whole mini-batch. The
    entropy and clip fraction are token means over the informative groups' tokens either way."""
    metrics = []
    for micro in (2, 16):
        config = parse_config({**FLAT_CONFIG, "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": micro}})
        trainer, rollout = _one_rollout(config, tmp_path, f"m{micro}")
        rollout.rewards = np.array([1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1], np.float32)
        rollout.advantages = np.array([0, 0, 0, 0, 1, -1, 1, -1, 0, 0, 0, 0, 1, -1, -1, 1], np.float32)
        metrics.append(trainer.train_on(rollout))
    assert metrics[0]["train/trained_sequence_fraction"] == pytest.approx(0.5)
    assert metrics[1]["train/trained_sequence_fraction"] == 1.0
    assert metrics[0]["entropy"] == pytest.approx(metrics[1]["entropy"], rel=1e-5)
    assert metrics[0]["loss/policy"] == pytest.approx(metrics[1]["loss/policy"], abs=1e-6)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum"])
def test_skipping_flat_groups_gives_the_same_update(tmp_path, aggregation):
    config = parse_config(
        {
            "model": {"preset": "tiny"},
            "data": {"task": "arithmetic", "train_prompts": 64},
            "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 2},
            "grpo": {"num_generations": 4, "beta": 0.0, "loss_aggregation": aggregation},
            "optimizer": {"learning_rate": 0.05},
        }
    )
    trainer = GRPOTrainer(config, str(tmp_path / "a"))
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    # Two groups all equal (advantage 0), two with signal (the last with two rows of advantage 0).
    rollout.rewards = np.array([1, 1, 1, 1, 2, 0, 1.5, 0.5, 0, 0, 0, 0, 0, 2, 1, 1], np.float32)
    rollout.advantages = np.array([0, 0, 0, 0, 1, -1, 0.5, -0.5, 0, 0, 0, 0, -2, 2, 0, 0], np.float32)
    start = jax.tree.map(np.asarray, trainer.state.params)

    trainer.skip_flat_groups = True
    skipped_metrics = trainer.train_on(rollout)
    skipped = jax.tree.map(np.asarray, trainer.state.params)

    full = GRPOTrainer(config, str(tmp_path / "b"))
    full.skip_flat_groups = False
    full_metrics = full.train_on(rollout)
    every = jax.tree.map(np.asarray, full.state.params)

    # The 2 informative groups' 8 sequences fill 4 micro-batches of 2 of the 8.
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
    shifted = np.array([[a, b, b, a]])  # rows reordered across groups: runs not aligned
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

    config = parse_config(
        {
            "model": {"preset": "tiny"},
            "data": {"task": "arithmetic", "train_prompts": 64},
            "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 8},
            "grpo": {"num_generations": 4, "beta": 0.05},
            "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 1.0},  # the weights move by the gradient
        }
    )

    def one_step(name):
        trainer = GRPOTrainer(config, str(tmp_path / name))
        starts.append(jax.tree.map(np.asarray, trainer.state.params))
        groups = []
        for attribute in ("update_fn", "logprob_fn"):
            jitted = getattr(trainer, attribute)
            setattr(
                trainer,
                attribute,
                lambda *args, _f=jitted, **kwargs: (groups.append(kwargs["prompt_group"]), _f(*args, **kwargs))[1],
            )
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

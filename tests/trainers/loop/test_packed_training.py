"""batch.packing in the trainer: a step on long-tailed completion lengths trains on packed rows in
its old-policy, reference and update passes, and lands on the weights and metrics of the same step
on padded rows, on one device and on a data 2 x fsdp 4 mesh; with equal lengths nothing is packed
(nothing to remove)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from trainers.config import parse_config
from trainers.loop.trainer import GRPOTrainer
from trainers.step import packing

CONFIG = {
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 64},
    "rollout": {"max_new_tokens": 32, "stop_at_eos": False},
    "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 16},
    "grpo": {"num_generations": 4, "beta": 0.04, "num_iterations": 2},
    # SGD: an update is linear in the gradient, so float rounding stays rounding (Adam's first
    # updates are ~lr x sign(g), which turns rounding on near-zero gradients into lr-sized steps)
    "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 0.5},
}
# a long tail: most completions short, a few at the budget
LENGTHS = np.array([32, 3, 5, 1, 20, 2, 4, 8, 6, 32, 2, 3, 1, 1, 12, 5])


def trained(
    tmp_path,
    name: str,
    packing_on: bool,
    lengths: np.ndarray | None,
    monkeypatch,
    mesh=None,
    micro_batch: int = 16,
    prompts: int = 4,
    micro_batch_tokens: int | None = None,
):
    batch = {**CONFIG["batch"], "packing": packing_on, "train_micro_batch_sequences": micro_batch}
    batch.update(prompts_per_step=prompts, train_micro_batch_tokens=micro_batch_tokens)
    config = parse_config({**CONFIG, "batch": batch, "mesh": mesh or {}})
    trainer = GRPOTrainer(config, str(tmp_path / name))
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    if lengths is not None:
        keep = np.arange(rollout.completion_mask.shape[1])[None, :] < lengths[:, None]
        rollout.completion_mask = rollout.completion_mask & keep
        rollout.completion_tokens = np.where(keep, rollout.completion_tokens, 0)
    rollout.rewards = np.tile(np.array([1, 0, 0.5, 0], np.float32), prompts)
    rollout.advantages = np.tile(np.array([1.2, -0.8, 0.4, -0.8], np.float32), prompts)
    calls: list[tuple[bool, int]] = []
    packed_shapes: list[tuple[int, ...]] = []  # [A, R, L] of each packed pass
    real = packing.pack_micro_batches

    def spy(*args, **kwargs):
        run = real(*args, **kwargs)
        calls.append((run.packed, args[0]["completion_mask"].shape[0]))  # (packed, micro-batches)
        if run.packed:
            packed_shapes.append(run.arrays["packed_tokens"].shape)
        return run

    monkeypatch.setattr("trainers.loop.trainer.pack_micro_batches", spy)
    metrics = trainer.train_on(rollout)
    return metrics, jax.tree.map(np.asarray, trainer.state.params), calls, packed_shapes


@pytest.mark.parametrize(
    "mesh, micro_batch, prompts",
    [(None, 16, 4), ({"data": 2, "fsdp": 4}, 16, 4), (None, 4, 4), ({"data": 2, "fsdp": 4}, 16, 8)],
    ids=["one-device", "data2-fsdp4", "one-device-4-micro-batches", "data2-fsdp4-2-micro-batches"],
)
def test_a_packed_step_lands_where_the_padded_one_does(tmp_path, monkeypatch, mesh, micro_batch, prompts):
    lengths = np.tile(LENGTHS, prompts // 4)
    padded, padded_params, padded_calls, _ = trained(tmp_path, "padded", False, lengths, monkeypatch, prompts=prompts)
    packed, packed_params, packed_calls, _ = trained(
        tmp_path, "packed", True, lengths, monkeypatch, mesh, micro_batch, prompts
    )
    micro_batches = 4 * prompts // micro_batch
    # the old-policy and the reference pass (log-prob micro-batches of the train micro-batch's size),
    # then mu = 2 updates of every micro-batch, packed together
    assert not any(packed_run for packed_run, _ in padded_calls)
    assert packed_calls[-2:] == [(True, micro_batches)] * 2
    if micro_batches == 1:
        assert packed_calls == [(True, 1)] * 4
    for name in ("loss/policy", "loss/kl", "kl", "grad_norm", "entropy", "clip_fraction"):
        assert packed[name] == pytest.approx(padded[name], rel=1e-4, abs=1e-6), name
    for a, b in zip(jax.tree.leaves(packed_params), jax.tree.leaves(padded_params)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # the padded rows: 16 x (prompt width + 32) positions per update pass, of which the tokens are
    # the prompts once per group and the completions; packed rows leave far less
    assert padded["train/padding_fraction"] > 0.5
    if mesh is None and micro_batches == 1:  # (on 8 devices the rows come in eights, some of them empty)
        assert packed["train/padding_fraction"] < padded["train/padding_fraction"] / 2
    assert packed["train/padding_fraction"] < padded["train/padding_fraction"]


def test_micro_batches_by_tokens_hold_at_most_their_budget_and_land_where_padded_ones_do(tmp_path, monkeypatch):
    # 4 micro-batches of 4 sequences padded; packed, micro-batches of at most 96 positions
    padded, padded_params, _, _ = trained(tmp_path, "padded", False, LENGTHS, monkeypatch, micro_batch=4)
    packed, packed_params, calls, packed_shapes = trained(
        tmp_path, "packed", True, LENGTHS, monkeypatch, micro_batch=4, micro_batch_tokens=96
    )
    updates = packed_shapes[-2:]
    assert calls[-2:] == [(True, 4)] * 2 and all(rows * length <= 96 for _, rows, length in updates), updates
    assert updates[0][0] != 4  # the count follows the tokens, not the 4 micro-batches of sequences
    for name in ("loss/policy", "loss/kl", "grad_norm"):
        assert packed[name] == pytest.approx(padded[name], rel=1e-4, abs=1e-6), name
    for a, b in zip(jax.tree.leaves(packed_params), jax.tree.leaves(padded_params)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_equal_lengths_stay_unpacked(tmp_path, monkeypatch):
    metrics, _, calls, _ = trained(tmp_path, "equal", True, None, monkeypatch)
    assert calls == [(False, 1)] * 4
    assert 0 <= metrics["train/padding_fraction"] < 0.2

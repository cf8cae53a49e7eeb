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
    overrides: dict | None = None,
    edit=None,
):
    batch = {**CONFIG["batch"], "packing": packing_on, "train_micro_batch_sequences": micro_batch}
    batch.update(prompts_per_step=prompts, train_micro_batch_tokens=micro_batch_tokens)
    raw = {**CONFIG, "batch": batch, "mesh": mesh or {}}
    for section, fields in (overrides or {}).items():
        raw[section] = {**raw.get(section, {}), **fields}
    config = parse_config(raw)
    trainer = GRPOTrainer(config, str(tmp_path / name))
    trainer.source.start(trainer.policy_params(), 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    if lengths is not None:
        keep = np.arange(rollout.completion_mask.shape[1])[None, :] < lengths[:, None]
        rollout.completion_mask = rollout.completion_mask & keep
        rollout.completion_tokens = np.where(keep, rollout.completion_tokens, 0)
    rollout.rewards = np.tile(np.array([1, 0, 0.5, 0], np.float32), prompts)
    rollout.advantages = np.tile(np.array([1.2, -0.8, 0.4, -0.8], np.float32), prompts)
    if edit is not None:
        edit(rollout)
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


def _stale_half(rollout) -> None:
    """Every other sequence sampled by the weights one step back, with log-probs of its own (so the
    importance weights differ from 1 and from row to row)."""
    stale = (np.arange(len(rollout.prompt_tokens)) % 2 == 1)[:, None]
    rollout.token_versions = np.where(stale, rollout.token_versions - 1, rollout.token_versions)
    offsets = 0.05 * (np.arange(rollout.completion_mask.shape[1]) % 3)[None, :]
    rollout.sample_logprobs = np.where(stale, rollout.sample_logprobs - offsets, rollout.sample_logprobs)


def _environment_replies(rollout) -> None:
    """Multi-turn: in every sequence of 8 or more tokens, completion tokens 3 .. 5 are an environment's
    reply, context the loss leaves out."""
    loss_mask = rollout.completion_mask.copy()
    long = rollout.completion_mask.sum(axis=1) >= 8
    loss_mask[np.ix_(long, np.arange(3, 6))] = False
    rollout.loss_mask = loss_mask


def _one_flat_group(rollout) -> None:
    """The second group's rewards all equal (what dynamic sampling would drop): advantage 0, so
    the update skips it."""
    rollout.rewards[4:8] = 0.5
    rollout.advantages[4:8] = 0.0


@pytest.mark.parametrize(
    "overrides, edit, micro_batch",
    [
        ({"async": {"enabled": True}}, _stale_half, 16),
        ({}, _environment_replies, 16),
        ({"model": {"preset": "tiny", "lora": {"rank": 4, "alpha": 8.0}}}, None, 16),
        ({"grpo": {"beta": 0.0}}, _one_flat_group, 4),
    ],
    ids=["async-importance", "multi-turn-loss-mask", "lora", "flat-group-skipped"],
)
def test_packing_lands_where_padding_does_in_every_mode(tmp_path, monkeypatch, overrides, edit, micro_batch):
    """The update's extra inputs follow the packed rows: the generator's log-probs and on-policy
    flags (async), the loss mask (multi-turn), the frozen base (LoRA), the micro-batches that hold
    the informative groups (a flat group skipped)."""
    options = {"overrides": overrides, "edit": edit, "micro_batch": micro_batch}
    padded, padded_params, padded_calls, _ = trained(tmp_path, "padded", False, LENGTHS, monkeypatch, **options)
    packed, packed_params, packed_calls, _ = trained(tmp_path, "packed", True, LENGTHS, monkeypatch, **options)
    assert not any(run for run, _ in padded_calls)
    assert packed_calls and all(run for run, _ in packed_calls), packed_calls
    for name in ("loss/policy", "grad_norm", "entropy", "clip_fraction"):
        assert packed[name] == pytest.approx(padded[name], rel=1e-4, abs=1e-6), name
    for a, b in zip(jax.tree.leaves(packed_params), jax.tree.leaves(padded_params)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert packed["train/padding_fraction"] < padded["train/padding_fraction"]


def test_log_prob_micro_batches_by_tokens_hold_at_most_their_budget_and_give_the_padded_log_probs(
    tmp_path, monkeypatch
):
    """batch.logprob_micro_batch_tokens: a log-prob pass runs the step's packed rows in as few
    micro-batches as hold them in that many positions each, and its log-probs, put back in
    sequence order, are the padded pass's (log-prob micro-batches of 4 sequences)."""

    def trainer_for(name: str, packing_on: bool) -> GRPOTrainer:
        batch = {**CONFIG["batch"], "packing": packing_on, "logprob_micro_batch_sequences": 4}
        batch["logprob_micro_batch_tokens"] = 96
        return GRPOTrainer(parse_config({**CONFIG, "batch": batch}), str(tmp_path / name))

    padded_trainer, packed_trainer = trainer_for("padded", False), trainer_for("packed", True)
    padded_trainer.source.start(padded_trainer.state.params, 0)
    rollout = padded_trainer.source.next(0)
    padded_trainer.source.stop()
    keep = np.arange(rollout.completion_mask.shape[1])[None, :] < LENGTHS[:, None]
    rollout.completion_mask = rollout.completion_mask & keep
    rollout.completion_tokens = np.where(keep, rollout.completion_tokens, 0)
    shapes = []
    real = packing.pack_micro_batches

    def spy(*args, **kwargs):
        run = real(*args, **kwargs)
        shapes.append(run.arrays["packed_tokens"].shape if run.packed else None)
        return run

    monkeypatch.setattr("trainers.loop.trainer.pack_micro_batches", spy)
    padded = padded_trainer.logprobs(padded_trainer.state.params, rollout)
    packed = packed_trainer.logprobs(packed_trainer.state.params, rollout)
    assert shapes[0] is None and shapes[1] is not None
    micro_batches, rows, row_tokens = shapes[1]
    assert rows * row_tokens <= 96 and micro_batches != 4, shapes  # by tokens, not 4 slices of 4 sequences
    assert packed.shape == padded.shape == rollout.completion_mask.shape
    np.testing.assert_allclose(packed, padded, atol=2e-5)
    assert np.all(packed[~rollout.completion_mask] == 0)

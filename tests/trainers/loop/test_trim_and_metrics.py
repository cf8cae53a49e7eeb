"""A step's log-prob passes and updates run over its longest completion (bucketed), not all
max_new_tokens, with the same losses; its metrics come back in one fetch after every update."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.config import parse_config
from trainers.loop import trainer as trainer_module
from trainers.loop.trainer import GRPOTrainer
from trainers.loop.update import completion_width


def _mask(lengths: list[int], total: int) -> np.ndarray:
    return np.arange(total)[None, :] < np.asarray(lengths)[:, None]


def test_completion_width_buckets():
    # Lc = 64: quarters of 16 tokens
    assert completion_width(_mask([1, 3], 64)) == 16
    assert completion_width(_mask([16, 3], 64)) == 16
    assert completion_width(_mask([17, 3], 64)) == 32
    assert completion_width(_mask([49], 64)) == 64
    assert completion_width(_mask([64], 64)) == 64
    assert completion_width(_mask([0, 0], 64)) == 16  # nothing valid: one bucket, never 0 columns
    # Lc = 512: quarters of 128; Lc = 100: quarters rounded up to 32, capped at 100
    assert completion_width(_mask([129], 512)) == 256
    assert completion_width(_mask([97], 100)) == 100
    assert completion_width(_mask([40], 100)) == 64
    # a hole in the middle of a row still counts its last valid column
    mask = np.zeros((2, 64), bool)
    mask[1, 40] = True
    assert completion_width(mask) == 48


CONFIG = {
    "model": {"preset": "tiny"},
    "rollout": {"max_new_tokens": 64, "stop_at_eos": False},
    "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2, "train_micro_batch_sequences": 4},
    "grpo": {"num_generations": 4, "num_iterations": 2, "beta": 0.04},
    "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 0.5},
    "train": {"max_steps": 3},
    "checkpoint": {"every_steps": 0},
}


def _short_rollout(trainer: GRPOTrainer, lengths: np.ndarray):
    """Step 0's rollout with completion i cut to lengths[i] tokens (as if it had stopped at EOS)."""
    trainer.source.start(trainer.state.params, 0)
    r = trainer.source.next(0)
    mask = _mask(lengths, r.completion_mask.shape[1])
    r.completion_mask = mask
    r.completion_tokens = np.where(mask, r.completion_tokens, trainer.tokenizer.pad_id).astype(np.int32)
    r.sample_logprobs = np.where(mask, r.sample_logprobs, 0.0).astype(np.float32)
    return r


@pytest.mark.parametrize("beta", [0.04, 0.0])
def test_trimmed_step_equals_untrimmed(tmp_path, monkeypatch, beta):
    config = parse_config({**CONFIG, "grpo": {**CONFIG["grpo"], "beta": beta}})
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    lengths = np.random.default_rng(0).integers(1, 21, size=trainer.plan.sequences_per_step)
    r = _short_rollout(trainer, lengths)
    assert completion_width(r.completion_mask) in (16, 32)
    start = jax.tree.map(jnp.copy, (trainer.state.params, trainer.state.opt_state))

    full_logprobs_trimmed = trainer.logprobs(trainer.state.params, r)
    trimmed = trainer.train_on(r)
    trimmed_params = [np.asarray(x) for x in jax.tree.leaves(trainer.state.params)]

    trainer.state.params, trainer.state.opt_state = start
    monkeypatch.setattr(trainer_module, "completion_width", lambda mask: mask.shape[1])
    full_logprobs = trainer.logprobs(trainer.state.params, r)
    full = trainer.train_on(r)

    assert full_logprobs_trimmed.shape == full_logprobs.shape == r.completion_mask.shape
    np.testing.assert_allclose(full_logprobs_trimmed, full_logprobs, rtol=0, atol=1e-6)
    assert np.all(full_logprobs_trimmed[~r.completion_mask] == 0)
    assert trimmed.keys() == full.keys()
    for name in full:
        # a few float32 ulps of reduction order apart (entropy ~4.8: 1e-6 absolute is 2 ulps)
        np.testing.assert_allclose(trimmed[name], full[name], rtol=1e-6, atol=1e-6, err_msg=name)
    for leaf, base in zip(trimmed_params, jax.tree.leaves(trainer.state.params)):
        np.testing.assert_allclose(leaf, np.asarray(base), rtol=0, atol=1e-6)


def test_metrics_are_fetched_once_after_every_update(tmp_path, monkeypatch):
    config = parse_config(CONFIG)
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    trainer.source.start(trainer.state.params, 0)
    r = trainer.source.next(0)
    events: list[str] = []
    update_fn = trainer.update_fn

    def recording_update(*args, **kwargs):
        events.append("update")
        return update_fn(*args, **kwargs)

    def recording_to_host(array):
        events.append("fetch")
        return np.asarray(array)

    trainer.update_fn = recording_update
    monkeypatch.setattr(trainer_module, "to_host", recording_to_host)
    metrics = trainer.train_on(r)
    updates = trainer.plan.optimizer_updates_per_step
    assert updates > 1
    first_update = events.index("update")
    # the log-prob passes' fetches come before the first update, the metrics' after the last one
    assert events[first_update : first_update + updates] == ["update"] * updates
    assert set(events[first_update + updates :]) == {"fetch"}
    assert all(isinstance(v, float) for v in metrics.values())

"""One optimizer update: accumulating micro-batches gives the same update as one big batch."""

import dataclasses

import jax
import numpy as np
import pytest

from trainers.config import OptimizerSection
from trainers.loss import LossConfig, token_weights
from trainers.model import PRESETS, init_params
from trainers.optim import make_optimizer, make_schedule
from trainers.train_step import make_logprob_fn, make_update_fn

CFG = dataclasses.replace(PRESETS["tiny"], num_layers=1)


def _batch(n_sequences=8, prompt_tokens=5, completion_tokens=6, seed=0):
    rng = np.random.default_rng(seed)
    prompt_valid = np.ones((n_sequences, prompt_tokens), bool)
    prompt_valid[::3, :2] = False  # some left padding
    lengths = rng.integers(1, completion_tokens + 1, n_sequences)
    completion_mask = np.arange(completion_tokens)[None, :] < lengths[:, None]
    return {
        "prompt_tokens": np.where(prompt_valid, rng.integers(4, 100, (n_sequences, prompt_tokens)), 0).astype(np.int32),
        "prompt_valid": prompt_valid,
        "completion_tokens": np.where(completion_mask, rng.integers(4, 100, (n_sequences, completion_tokens)), 0).astype(np.int32),
        "completion_mask": completion_mask,
        "advantages": rng.normal(size=n_sequences).astype(np.float32),
    }


def _stack(batch, micro):
    n = len(batch["advantages"])
    return {k: np.stack([v[i:i + micro] for i in range(0, n, micro)]) for k, v in batch.items()}


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_of_two_match_the_full_batch(aggregation):
    graphdef, params = init_params(CFG, seed=0)
    loss_cfg = LossConfig(beta=0.04)
    # SGD: the update is linear in the gradient. (Adam's first update is ~lr * sign(g), which turns
    # float rounding on near-zero gradients into lr-sized differences: no test of accumulation.)
    opt = OptimizerSection(name="sgd", b1=0.0, learning_rate=1.0, max_grad_norm=0.0)
    schedule = make_schedule(opt, 1, 10)
    optimizer = make_optimizer(opt, schedule)
    batch = _batch()
    logprob_fn = make_logprob_fn(graphdef, 1.0)
    # old log-probs from slightly different params, reference = the initial params
    batch["old_logprobs"] = np.asarray(logprob_fn(params, batch["prompt_tokens"], batch["prompt_valid"],
                                                  batch["completion_tokens"], batch["completion_mask"])) + 0.05
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.1
    batch["weights"] = token_weights(batch["completion_mask"], aggregation)
    batch["metric_weights"] = token_weights(batch["completion_mask"], "token-mean")
    update = make_update_fn(graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=True)

    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 (updates donate their inputs)
    full_params, _, full_metrics = update(copy(params), optimizer.init(params), _stack(batch, 8))
    micro_params, _, micro_metrics = update(copy(params), optimizer.init(params), _stack(batch, 2))

    moved = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(full_params), jax.tree.leaves(params)))
    assert moved > 1e-3  # the update did something
    for a, b in zip(jax.tree.leaves(full_params), jax.tree.leaves(micro_params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0)
    for key in ("loss/policy", "loss/kl", "kl", "clip_fraction", "entropy", "grad_norm"):
        assert float(micro_metrics[key]) == pytest.approx(float(full_metrics[key]), abs=1e-5), key


def test_positive_advantage_makes_its_completion_more_likely():
    graphdef, params = init_params(CFG, seed=1)
    opt = OptimizerSection(learning_rate=1e-2)
    schedule = make_schedule(opt, 1, 10)
    optimizer = make_optimizer(opt, schedule)
    batch = _batch(n_sequences=2, seed=3)
    batch["advantages"] = np.array([1.0, -1.0], np.float32)
    batch["weights"] = token_weights(batch["completion_mask"], "token-mean")
    batch["metric_weights"] = batch["weights"]
    logprob_fn = make_logprob_fn(graphdef, 1.0)
    args = (batch["prompt_tokens"], batch["prompt_valid"], batch["completion_tokens"], batch["completion_mask"])
    before = np.asarray(logprob_fn(params, *args)).sum(axis=1)
    update = make_update_fn(graphdef, optimizer, LossConfig(), 1.0, use_old_logprobs=False)
    new_params, _, _ = update(jax.tree.map(lambda x: x.copy(), params), optimizer.init(params), _stack(batch, 2))
    after = np.asarray(logprob_fn(new_params, *args)).sum(axis=1)
    assert after[0] > before[0] and after[1] < before[1]

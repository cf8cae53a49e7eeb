"""One optimizer update: accumulating micro-batches gives the same update as one big batch."""

import dataclasses

import jax
import numpy as np
import pytest

from trainers.algo.loss import LossConfig, token_weights
from trainers.algo.optim import make_optimizer, make_schedule
from trainers.config import OptimizerSection
from trainers.loop.update import make_logprob_fn, make_update_fn
from trainers.models.presets import PRESETS
from trainers.models.transformer import init_params

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
        "completion_tokens": np.where(
            completion_mask, rng.integers(4, 100, (n_sequences, completion_tokens)), 0
        ).astype(np.int32),
        "completion_mask": completion_mask,
        "advantages": rng.normal(size=n_sequences).astype(np.float32),
    }


def _stack(batch, micro):
    n = len(batch["advantages"])
    return {k: np.stack([v[i : i + micro] for i in range(0, n, micro)]) for k, v in batch.items()}


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
    batch["old_logprobs"] = (
        np.asarray(
            logprob_fn(
                params,
                batch["prompt_tokens"],
                batch["prompt_valid"],
                batch["completion_tokens"],
                batch["completion_mask"],
            )
        )
        + 0.05
    )
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.1
    batch["weights"] = token_weights(batch["completion_mask"], aggregation)
    batch["metric_weights"] = token_weights(batch["completion_mask"], "token-mean")
    update = make_update_fn(graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=True)

    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 (updates donate their inputs)
    full_params, _, full_metrics = update(copy(params), optimizer.init(params), _stack(batch, 8))
    micro_params, _, micro_metrics = update(copy(params), optimizer.init(params), _stack(batch, 2))

    moved = max(
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(jax.tree.leaves(full_params), jax.tree.leaves(params))
    )
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


@pytest.mark.parametrize("level, mode", [("token", "clamp"), ("sequence", "mask")])
def test_importance_weights_inside_the_update_match_a_separate_pass(level, mode):
    """Async GRPO with one update per step forms pi_old / pi_gen inside the update from its own
    forward pass; that must equal computing pi_old in a separate pass, the weights on the host and
    multiplying them into the loss weights (the path used with several updates), micro-batched or
    not. Rows marked on-policy get weight 1 whatever their recorded log-probs say."""
    from trainers.algo.importance import ImportanceConfig, importance_weights

    graphdef, params = init_params(CFG, seed=0)
    loss_cfg = LossConfig(beta=0.0)
    opt = OptimizerSection(name="sgd", b1=0.0, learning_rate=1.0, max_grad_norm=0.0)
    optimizer = make_optimizer(opt, make_schedule(opt, 1, 10))
    is_cfg = ImportanceConfig(level=level, mode=mode, max_weight=1.5, min_weight=0.5 if mode == "mask" else 0.0)
    batch = _batch()
    old = np.asarray(
        make_logprob_fn(graphdef, 1.0)(
            params, batch["prompt_tokens"], batch["prompt_valid"], batch["completion_tokens"], batch["completion_mask"]
        )
    )
    # log(pi_old / pi_gen) = +0.6 on every third token (weight 1.82: over the 1.5 bound), -0.2 elsewhere
    rows, cols = np.indices(old.shape)
    gen = np.where(batch["completion_mask"], old - np.where((rows + cols) % 3 == 0, 0.6, -0.2), 0.0).astype(np.float32)
    on_policy = np.arange(8) % 4 == 0
    batch["weights"] = token_weights(batch["completion_mask"], "token-mean")
    batch["metric_weights"] = batch["weights"]

    host_w, host_metrics = importance_weights(
        old, np.where(on_policy[:, None], old, gen), batch["completion_mask"], is_cfg
    )
    assert 0 < float(host_metrics["is/truncated_fraction"]) < 1  # the truncation really acts
    separate = dict(batch, weights=batch["weights"] * np.asarray(host_w))
    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 (updates donate their inputs)
    plain = make_update_fn(graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=False)
    expected_params, _, expected_metrics = plain(copy(params), optimizer.init(params), _stack(separate, 8))

    in_update = make_update_fn(graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=False, importance=is_cfg)
    for micro in (8, 2):
        fused = dict(batch, gen_logprobs=gen, on_policy=on_policy)
        got_params, _, got_metrics = in_update(copy(params), optimizer.init(params), _stack(fused, micro))
        for a, b in zip(jax.tree.leaves(expected_params), jax.tree.leaves(got_params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
        assert float(got_metrics["loss/policy"]) == pytest.approx(float(expected_metrics["loss/policy"]), abs=1e-5)
        for name in ("is/weight_mean", "is/weight_max", "is/truncated_fraction"):
            assert float(got_metrics[name]) == pytest.approx(float(host_metrics[name]), abs=1e-5), (micro, name)


def test_importance_weights_inside_the_update_with_a_separate_pi_old_pass():
    """Several updates per step: pi_old comes from a separate pass (batch["old_logprobs"], here the
    current log-probs + 0.05, as after an earlier update of the step) and the update forms
    pi_old / pi_gen itself. The weights are known by hand: log(pi_old / pi_gen) = log 2, 0, -log 2
    by token position (weights 2 -> truncated to 1.5, 1, 0.5); rows 0 and 4 are on-policy (weight 1
    whatever pi_gen says). The update must equal the plain update whose loss weights were multiplied
    by those hand weights in numpy (the host-side path this replaced), micro-batched or not."""
    from trainers.algo.importance import ImportanceConfig

    log2 = np.log(2.0)
    graphdef, params = init_params(CFG, seed=0)
    loss_cfg = LossConfig(beta=0.04)
    opt = OptimizerSection(name="sgd", b1=0.0, learning_rate=1.0, max_grad_norm=0.0)
    optimizer = make_optimizer(opt, make_schedule(opt, 1, 10))
    batch = _batch()
    mask = batch["completion_mask"]
    current = np.asarray(
        make_logprob_fn(graphdef, 1.0)(
            params, batch["prompt_tokens"], batch["prompt_valid"], batch["completion_tokens"], mask
        )
    )
    batch["old_logprobs"] = np.where(mask, current + 0.05, 0.0).astype(np.float32)
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.1
    rows, cols = np.indices(mask.shape)
    pattern = (rows + cols) % 3  # 0: log 2, 1: 0, 2: -log 2
    gen = batch["old_logprobs"] - np.choose(pattern, [log2, 0.0, -log2]).astype(np.float32)
    on_policy = rows[:, 0] % 4 == 0
    batch["weights"] = token_weights(mask, "token-mean")
    batch["metric_weights"] = batch["weights"]

    hand = np.where(mask, np.where(on_policy[:, None], 1.0, np.choose(pattern, [1.5, 1.0, 0.5])), 0.0)
    untruncated = np.where(on_policy[:, None], 1.0, np.choose(pattern, [2.0, 1.0, 0.5]))
    truncated = mask & ~on_policy[:, None] & (pattern == 0)
    assert truncated.any() and (mask & on_policy[:, None]).any()
    hand_metrics = {
        "is/weight_mean": float(untruncated[mask].mean()),
        "is/weight_max": 2.0,
        "is/truncated_fraction": float(truncated.sum() / mask.sum()),
    }

    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 (updates donate their inputs)
    plain = make_update_fn(graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=True)
    reference = dict(batch, weights=(batch["weights"] * hand).astype(np.float32))
    expected_params, _, expected_metrics = plain(copy(params), optimizer.init(params), _stack(reference, 8))

    in_update = make_update_fn(
        graphdef,
        optimizer,
        loss_cfg,
        1.0,
        use_old_logprobs=True,
        importance=ImportanceConfig(level="token", mode="clamp", max_weight=1.5),
    )
    for micro in (8, 2):
        fused = dict(batch, gen_logprobs=gen, on_policy=on_policy)
        got_params, _, got_metrics = in_update(copy(params), optimizer.init(params), _stack(fused, micro))
        for a, b in zip(jax.tree.leaves(expected_params), jax.tree.leaves(got_params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
        for name in ("loss/policy", "loss/kl"):
            assert float(got_metrics[name]) == pytest.approx(float(expected_metrics[name]), abs=1e-6), (micro, name)
        for name, value in hand_metrics.items():
            assert float(got_metrics[name]) == pytest.approx(value, rel=1e-5), (micro, name)


def test_the_icepop_guard_drops_a_token_pushed_outside_the_band():
    """grpo.mismatch inside the update. The sampler agrees with the trainer except on two tokens whose
    sampler log-prob was pushed by 3 nats: ratios e^3 = 20.1 and e^-3 = 0.05, outside the band [0.5, 2].
    The update must equal the plain update whose loss weights are 0 on exactly those two tokens (every
    other token's ratio is 1), and report the gap: mean |log r| = 6 / n, max 3, corrected 2 / n, and
    KL(sampler || trainer) = ((e^3 - 1 - 3) + (e^-3 - 1 + 3)) / n, n the valid tokens. The same when the
    sampler truncated its distribution: the gap is then read from the full distribution's log-probs."""
    from trainers.algo.mismatch import MismatchConfig

    graphdef, params = init_params(CFG, seed=0)
    loss_cfg = LossConfig(beta=0.0)
    opt = OptimizerSection(name="sgd", b1=0.0, learning_rate=1.0, max_grad_norm=0.0)
    optimizer = make_optimizer(opt, make_schedule(opt, 1, 10))
    batch = _batch()
    mask = batch["completion_mask"]
    current = np.asarray(
        make_logprob_fn(graphdef, 1.0)(
            params, batch["prompt_tokens"], batch["prompt_valid"], batch["completion_tokens"], mask
        )
    )
    pushed = np.zeros(mask.shape)
    pushed[1, 0], pushed[5, 0] = 3.0, -3.0  # first token of rows 1 and 5 (every row has one)
    gen = np.where(mask, current - pushed, 0.0).astype(np.float32)
    n = int(mask.sum())
    batch["weights"] = token_weights(mask, "token-mean")
    batch["metric_weights"] = batch["weights"]
    on_policy = np.ones(8, bool)

    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 (updates donate their inputs)
    plain = make_update_fn(graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=False)
    reference = dict(batch, weights=np.where(pushed != 0, 0.0, batch["weights"]).astype(np.float32))
    expected_params, _, _ = plain(copy(params), optimizer.init(params), _stack(reference, 8))
    unguarded_params, _, _ = plain(copy(params), optimizer.init(params), _stack(batch, 8))

    guarded = make_update_fn(
        graphdef, optimizer, loss_cfg, 1.0, use_old_logprobs=False, mismatch=MismatchConfig("icepop", 2.0, 0.5)
    )
    fused = dict(batch, gen_logprobs=gen, on_policy=on_policy, mismatch_weights=batch["metric_weights"])
    # a sampler with top-k / top-p: gen_logprobs are then the truncated distribution's (here 0.7 nats
    # above the trainer's everywhere, outside the band) and the mismatch reads gen_full_logprobs
    truncated = dict(fused, gen_logprobs=np.where(mask, current + 0.7, 0.0).astype(np.float32), gen_full_logprobs=gen)
    for arrays, micro in ((fused, 8), (fused, 2), (truncated, 8)):
        got_params, _, metrics = guarded(copy(params), optimizer.init(params), _stack(arrays, micro))
        for a, b in zip(jax.tree.leaves(expected_params), jax.tree.leaves(got_params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
        assert float(metrics["mismatch/logprob_diff_mean"]) == pytest.approx(6 / n, abs=1e-5)
        assert float(metrics["mismatch/logprob_diff_max"]) == pytest.approx(3.0, abs=1e-5)
        assert float(metrics["mismatch/corrected_fraction"]) == pytest.approx(2 / n)
        kl = ((np.exp(3.0) - 4.0) + (np.exp(-3.0) + 2.0)) / n
        assert float(metrics["mismatch/kl"]) == pytest.approx(kl, rel=1e-4)
    # the two tokens did move the unguarded update
    assert any(
        not np.allclose(np.asarray(a), np.asarray(b), atol=1e-5)
        for a, b in zip(jax.tree.leaves(expected_params), jax.tree.leaves(unguarded_params))
    )


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_rows_out_of_the_loss_count_in_no_normaliser(aggregation):
    """4 rows, rows 1 and 3 with no loss token (out of the loss, as `Rollout.in_loss` leaves them): the
    loss must be the aggregation over rows 0 and 2 only. With pi_old = this update's own pass the ratio
    is 1, so grpo's token loss is -A_i and the loss is known by hand: token-mean -sum(A_i n_i) / sum(n_i),
    seq-mean-token-mean -mean(A_i), seq-mean-token-sum -mean(A_i n_i), seq-mean-token-sum-norm
    -mean(A_i n_i) / budget, over i in {0, 2} (n_i the row's tokens). The update, whole or in micro-batches
    of 2, must equal the update on a batch of the two live rows alone."""
    budget = 6
    graphdef, params = init_params(CFG, seed=0)
    opt = OptimizerSection(name="sgd", b1=0.0, learning_rate=1.0, max_grad_norm=0.0)
    optimizer = make_optimizer(opt, make_schedule(opt, 1, 10))
    batch = _batch(n_sequences=4, completion_tokens=budget, seed=5)
    batch["advantages"] = np.array([1.5, -0.7, -0.5, 2.0], np.float32)
    mask = batch["completion_mask"]
    live = np.array([True, False, True, False])
    n = mask.sum(axis=1).astype(np.float64)
    a = batch["advantages"].astype(np.float64)
    expected_loss = {
        "token-mean": -(a[0] * n[0] + a[2] * n[2]) / (n[0] + n[2]),
        "seq-mean-token-mean": -(a[0] + a[2]) / 2,
        "seq-mean-token-sum": -(a[0] * n[0] + a[2] * n[2]) / 2,
        "seq-mean-token-sum-norm": -(a[0] * n[0] + a[2] * n[2]) / (2 * budget),
    }[aggregation]
    loss_mask = mask & live[:, None]
    batch["weights"] = token_weights(loss_mask, aggregation, norm_tokens=budget)
    batch["metric_weights"] = token_weights(loss_mask, "token-mean")
    # the weights by hand: row 0's tokens, e.g. seq-mean-token-mean 1 / (n_0 * 2 live rows); dead rows 0
    assert not batch["weights"][~live].any()
    assert float(batch["weights"].sum()) == pytest.approx(
        {
            "token-mean": 1.0,
            "seq-mean-token-mean": 1.0,
            "seq-mean-token-sum": (n[0] + n[2]) / 2,
            "seq-mean-token-sum-norm": (n[0] + n[2]) / (2 * budget),
        }[aggregation],
        rel=1e-6,
    )
    alone = {k: v[live] for k, v in batch.items()}
    alone["weights"] = token_weights(mask[live], aggregation, norm_tokens=budget)
    alone["metric_weights"] = token_weights(mask[live], "token-mean")

    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 (updates donate their inputs)
    update = make_update_fn(graphdef, optimizer, LossConfig(beta=0.0), 1.0, use_old_logprobs=False)
    alone_params, _, alone_metrics = update(copy(params), optimizer.init(params), _stack(alone, 2))
    assert float(alone_metrics["loss/policy"]) == pytest.approx(expected_loss, rel=1e-5)
    for micro in (4, 2):
        got_params, _, metrics = update(copy(params), optimizer.init(params), _stack(batch, micro))
        assert float(metrics["loss/policy"]) == pytest.approx(expected_loss, rel=1e-5), micro
        for got, want in zip(jax.tree.leaves(got_params), jax.tree.leaves(alone_params)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)

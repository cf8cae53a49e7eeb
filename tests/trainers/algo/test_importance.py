"""Importance-sampling weights pi_old / pi_gen against hand-computed values, and their use in the loss."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.algo.importance import ImportanceConfig, importance_weights
from trainers.algo.loss import LossConfig, policy_loss, token_weights

LOG2 = math.log(2.0)


def _w(old, gen, mask, **cfg):
    weights, metrics = importance_weights(
        jnp.asarray(old, jnp.float32), jnp.asarray(gen, jnp.float32), np.asarray(mask, bool), ImportanceConfig(**cfg)
    )
    return np.asarray(weights), {k: float(v) for k, v in metrics.items()}


def test_equal_logprobs_give_weight_one_and_no_truncation():
    old = [[-1.0, -2.0, -0.5], [-0.1, -3.0, -4.0]]
    for level in ("token", "sequence"):
        for mode in ("clamp", "mask"):
            min_weight = 0.5 if mode == "mask" else 0.0
            weights, m = _w(old, old, [[1, 1, 1], [1, 1, 0]], level=level, mode=mode, min_weight=min_weight)
            np.testing.assert_array_equal(weights, [[1, 1, 1], [1, 1, 0]])  # 0 on padding
            assert m == {"is/weight_mean": 1.0, "is/weight_max": 1.0, "is/truncated_fraction": 0.0}


def test_token_clamp_hand_computed():
    # log-ratios: log 2 (w=2 -> clamped to 1.5), 0 (w=1), -log 2 (w=0.5); 3 valid tokens, 1 truncated.
    weights, m = _w([[LOG2, 0.0, -LOG2]], [[0.0, 0.0, 0.0]], [[1, 1, 1]], max_weight=1.5)
    np.testing.assert_allclose(weights, [[1.5, 1.0, 0.5]], rtol=1e-6)
    assert weights[0, 0] == np.float32(1.5)  # exactly the cap
    assert m["is/truncated_fraction"] == pytest.approx(1 / 3)
    assert m["is/weight_mean"] == pytest.approx((2.0 + 1.0 + 0.5) / 3, rel=1e-6)  # untruncated weights
    assert m["is/weight_max"] == pytest.approx(2.0, rel=1e-6)


def test_token_mask_zeroes_out_of_range_tokens():
    # weights 2, 1, 0.5, 0.25 with range [0.4, 1.5]: 2 and 0.25 are zeroed; 2 of 4 truncated.
    old = [[LOG2, 0.0, -LOG2, -2 * LOG2]]
    weights, m = _w(old, [[0.0] * 4], [[1, 1, 1, 1]], mode="mask", min_weight=0.4, max_weight=1.5)
    np.testing.assert_allclose(weights, [[0.0, 1.0, 0.5, 0.0]], rtol=1e-6)
    assert m["is/truncated_fraction"] == pytest.approx(0.5)
    assert m["is/weight_mean"] == pytest.approx((2 + 1 + 0.5 + 0.25) / 4, rel=1e-6)


def test_mask_range_is_inclusive_and_min_zero_has_no_lower_end():
    weights, m = _w([[LOG2, -15.0]], [[0.0, 0.0]], [[1, 1]], mode="mask", min_weight=0.0, max_weight=2.0)
    np.testing.assert_allclose(weights, [[2.0, math.exp(-15.0)]], rtol=1e-5)
    assert m["is/truncated_fraction"] == 0.0


@pytest.mark.parametrize("mode", ["clamp", "mask"])
def test_log_ratios_are_clamped_like_the_loss_ratio_but_truncation_sees_the_true_one(mode):
    """Weights are exp of the log-ratio clamped to +-20 (`loss.LOG_RATIO_LIMIT`, the loss's own clamp):
    log-ratio -100 gives e^-20, not an underflowed 0; the metrics' untruncated weights are the same
    clamped values. The truncation decision uses the unclamped log-ratio: with min_weight 1e-10
    (log -23.03) a log-ratio of -100 is masked even though e^-20 > 1e-10."""
    old = [[-100.0, -21.0, 100.0]]
    weights, m = _w(old, [[0.0] * 3], [[1, 1, 1]], mode=mode, max_weight=2.0)
    expected = {"clamp": [math.exp(-20.0), math.exp(-20.0), 2.0], "mask": [math.exp(-20.0), math.exp(-20.0), 0.0]}
    np.testing.assert_allclose(weights, [expected[mode]], rtol=1e-6)
    assert m["is/weight_max"] == pytest.approx(math.exp(20.0), rel=1e-6)
    assert m["is/weight_mean"] == pytest.approx((2 * math.exp(-20.0) + math.exp(20.0)) / 3, rel=1e-6)
    if mode == "mask":
        weights, m = _w(old, [[0.0] * 3], [[1, 1, 1]], mode=mode, min_weight=1e-10, max_weight=2.0)
        np.testing.assert_allclose(weights, [[0.0, math.exp(-20.0), 0.0]], rtol=1e-6)
        assert m["is/truncated_fraction"] == pytest.approx(2 / 3)


def test_sequence_level_two_sequences_by_hand():
    # seq 0: log-ratios log 2 + log 2 + 0 = log 4 -> w 4, clamped to 2 on its 3 tokens (truncated).
    # seq 1: log-ratios log 2 - log 2 = 0 -> w 1 on its 2 valid tokens; its padding token (a huge
    #        log-ratio) is ignored. 5 valid tokens, 3 truncated.
    old = [[LOG2, LOG2, 0.0], [LOG2, -LOG2, 50.0]]
    gen = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    mask = [[1, 1, 1], [1, 1, 0]]
    weights, m = _w(old, gen, mask, level="sequence", max_weight=2.0)
    np.testing.assert_allclose(weights, [[2.0, 2.0, 2.0], [1.0, 1.0, 0.0]], rtol=1e-6)
    assert m["is/truncated_fraction"] == pytest.approx(3 / 5)
    assert m["is/weight_mean"] == pytest.approx((3 * 4.0 + 2 * 1.0) / 5, rel=1e-6)
    assert m["is/weight_max"] == pytest.approx(4.0, rel=1e-6)
    # mask mode drops the whole first sequence
    weights, m = _w(old, gen, mask, level="sequence", mode="mask", max_weight=2.0)
    np.testing.assert_allclose(weights, [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]], rtol=1e-6)
    assert m["is/truncated_fraction"] == pytest.approx(3 / 5)


def test_padding_is_ignored_in_weights_and_metrics():
    # Padding carries garbage log-probs (inf, nan): nothing of it reaches the weights or metrics.
    old = [[LOG2, np.inf], [0.0, np.nan]]
    gen = [[0.0, 0.0], [0.0, 0.0]]
    weights, m = _w(old, gen, [[1, 0], [1, 0]], max_weight=4.0)
    np.testing.assert_allclose(weights, [[2.0, 0.0], [1.0, 0.0]], rtol=1e-6)
    assert m["is/weight_mean"] == pytest.approx(1.5, rel=1e-6)
    assert m["is/weight_max"] == pytest.approx(2.0, rel=1e-6)
    assert m["is/truncated_fraction"] == 0.0
    _, empty = _w([[0.0]], [[0.0]], [[0]])
    assert empty == {"is/weight_mean": 0.0, "is/weight_max": 0.0, "is/truncated_fraction": 0.0}


def test_huge_ratios_stay_finite():
    weights, m = _w([[500.0, 0.0]], [[0.0, 0.0]], [[1, 1]], level="sequence", max_weight=2.0)
    np.testing.assert_array_equal(weights, [[2.0, 2.0]])
    assert all(math.isfinite(v) for v in m.values()) and m["is/truncated_fraction"] == 1.0


def test_metric_weights_make_micro_batch_metrics_additive():
    old = jnp.array([[LOG2, 0.0], [0.0, 0.0]])
    gen = jnp.zeros((2, 2))
    mask = np.array([[1, 1], [1, 0]], bool)
    mw = jnp.asarray(token_weights(mask, "token-mean"))
    cfg = ImportanceConfig(max_weight=1.5)
    _, whole = importance_weights(old, gen, mask, cfg)
    parts = [
        importance_weights(old[i : i + 1], gen[i : i + 1], mask[i : i + 1], cfg, mw[i : i + 1])[1] for i in range(2)
    ]
    for key in ("is/weight_mean", "is/truncated_fraction"):
        assert float(parts[0][key] + parts[1][key]) == pytest.approx(float(whole[key]), rel=1e-6)
    assert max(float(p["is/weight_max"]) for p in parts) == pytest.approx(float(whole["is/weight_max"]))


def test_weights_carry_no_gradient_and_jit():
    cfg = ImportanceConfig(level="sequence")
    mask = jnp.ones((1, 2), bool)
    total = lambda old: jnp.sum(importance_weights(old, jnp.zeros((1, 2)), mask, cfg)[0])  # noqa: E731
    grad = jax.grad(total)(jnp.full((1, 2), 0.1))
    np.testing.assert_array_equal(grad, 0.0)
    jitted = jax.jit(importance_weights, static_argnums=3)
    np.testing.assert_allclose(jitted(jnp.full((1, 2), 0.1), jnp.zeros((1, 2)), mask, cfg)[0], math.exp(0.2), rtol=1e-6)


def test_config_is_checked():
    with pytest.raises(ValueError, match="level"):
        ImportanceConfig(level="tokens")
    with pytest.raises(ValueError, match="min_weight < max_weight"):
        ImportanceConfig(mode="mask", min_weight=2.0, max_weight=1.5)


# --- in the loss ------------------------------------------------------------------------------


def _inputs():
    rng = np.random.default_rng(0)
    logp = jnp.asarray(rng.normal(-1.0, 0.3, (3, 4)), jnp.float32)
    old = jnp.asarray(rng.normal(-1.0, 0.3, (3, 4)), jnp.float32)
    ref = jnp.asarray(rng.normal(-1.0, 0.3, (3, 4)), jnp.float32)
    adv = jnp.asarray([1.0, -0.5, 0.25], jnp.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], bool)
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_weights_of_one_give_exactly_the_uncorrected_loss(aggregation):
    logp, old, ref, adv, mask = _inputs()
    w, mw = token_weights(mask, aggregation), token_weights(mask, "token-mean")
    cfg = LossConfig(beta=0.1, dual_clip=3.0)
    plain_loss, plain_metrics = policy_loss(logp, old, adv, w, mw, cfg, ref)
    ones_loss, ones_metrics = policy_loss(logp, old, adv, w, mw, cfg, ref, is_weights=jnp.ones(mask.shape))
    assert float(ones_loss) == float(plain_loss)
    assert {k: float(v) for k, v in ones_metrics.items()} == {k: float(v) for k, v in plain_metrics.items()}


def test_is_weights_multiply_policy_and_kl_terms_per_token():
    logp, old, ref, adv, mask = _inputs()
    w = token_weights(mask, "token-mean")
    cfg = LossConfig(beta=0.1)
    is_w = jnp.asarray(np.where(mask, 2.0, 0.0), jnp.float32)
    loss, metrics = policy_loss(logp, old, adv, w, w, cfg, ref, is_weights=is_w)
    plain_loss, plain = policy_loss(logp, old, adv, w, w, cfg, ref)
    assert float(loss) == pytest.approx(2 * float(plain_loss), rel=1e-6)
    assert float(metrics["loss/policy"]) == pytest.approx(2 * float(plain["loss/policy"]), rel=1e-6)
    assert float(metrics["loss/kl"]) == pytest.approx(2 * float(plain["loss/kl"]), rel=1e-6)
    assert float(metrics["kl"]) == float(plain["kl"])  # a description of the tokens, not corrected
    # one token by hand: ratio 1, A = 1, IS weight 1.5 -> loss -1.5
    one, _ = policy_loss(
        jnp.zeros((1, 1)),
        jnp.zeros((1, 1)),
        jnp.ones(1),
        jnp.ones((1, 1)),
        jnp.ones((1, 1)),
        LossConfig(),
        is_weights=jnp.full((1, 1), 1.5),
    )
    assert float(one) == pytest.approx(-1.5)

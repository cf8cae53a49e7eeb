"""Advantages, policy loss, KL estimators and loss aggregation against hand-computed values."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.algo.advantages import (
    compute_advantages,
    drgrpo_advantages,
    grpo_advantages,
    rloo_advantages,
)
from trainers.algo.loss import LossConfig, kl_penalty, policy_loss, token_weights


def test_grpo_advantages_hand_computed():
    # mean 0.5; sample std sqrt((4 * 0.25) / 3) = 0.57735; (1 - 0.5) / 0.57735 = 0.866025
    adv = grpo_advantages(np.array([[1.0, 0.0, 0.0, 1.0]]), eps=0.0)
    np.testing.assert_allclose(adv, [[0.866025, -0.866025, -0.866025, 0.866025]], atol=1e-6)


def test_rloo_advantages_hand_computed():
    # r=1: 1 - (0 + 0 + 1)/3 = 2/3;  r=0: 0 - (1 + 0 + 1)/3 = -2/3
    adv = rloo_advantages(np.array([[1.0, 0.0, 0.0, 1.0]]))
    np.testing.assert_allclose(adv, [[2 / 3, -2 / 3, -2 / 3, 2 / 3]], atol=1e-6)
    # G=3, rewards 3, 0, 0: 3 - 0 = 3; 0 - 1.5 = -1.5
    np.testing.assert_allclose(rloo_advantages(np.array([[3.0, 0.0, 0.0]])), [[3.0, -1.5, -1.5]], atol=1e-6)


def test_drgrpo_advantages_do_not_divide_by_std():
    np.testing.assert_allclose(drgrpo_advantages(np.array([[2.0, 0.0]])), [[1.0, -1.0]])


@pytest.mark.parametrize("method", ["grpo", "rloo", "drgrpo"])
def test_equal_rewards_give_zero_advantage_per_group(method):
    adv = compute_advantages(np.array([[0.3, 0.3, 0.3], [1.0, 0.0, 0.5]]), method)
    np.testing.assert_allclose(adv[0], 0.0, atol=1e-6)
    assert abs(adv[1].sum()) < 1e-5  # centred within the group


def _loss(logp, old, adv, cfg, ref=None, mask=None):
    logp = jnp.asarray(logp, jnp.float32)
    mask = np.ones(logp.shape, bool) if mask is None else mask
    w = token_weights(mask, "token-mean")
    return policy_loss(
        logp,
        jnp.asarray(old, jnp.float32),
        jnp.asarray(adv, jnp.float32),
        w,
        w,
        cfg,
        None if ref is None else jnp.asarray(ref, jnp.float32),
    )


def test_clipped_surrogate_positive_advantage_clips_high():
    # ratio 1.5, A=1, eps_high 0.2: max(-1.5, -1.2) = -1.2, counted as clipped
    loss, m = _loss([[math.log(1.5)]], [[0.0]], [1.0], LossConfig(epsilon_low=0.2, epsilon_high=0.2))
    assert float(loss) == pytest.approx(-1.2, abs=1e-6)
    assert float(m["clip_fraction"]) == 1.0


def test_clipped_surrogate_negative_advantage_clips_low():
    # ratio 0.5, A=-1, eps_low 0.2: max(0.5, 0.8) = 0.8
    loss, m = _loss([[math.log(0.5)]], [[0.0]], [-1.0], LossConfig(epsilon_low=0.2, epsilon_high=0.2))
    assert float(loss) == pytest.approx(0.8, abs=1e-6)
    assert float(m["clip_fraction"]) == 1.0


def test_separate_epsilons():
    # ratio 1.25 with eps_high 0.28 is inside the range: loss = -1.25, not clipped
    loss, m = _loss([[math.log(1.25)]], [[0.0]], [1.0], LossConfig(epsilon_low=0.2, epsilon_high=0.28))
    assert float(loss) == pytest.approx(-1.25, abs=1e-6)
    assert float(m["clip_fraction"]) == 0.0


def test_dual_clip_bounds_negative_advantage_loss():
    # ratio 5, A=-1: max(5, 1.2) = 5; dual clip c=3 caps it at 3
    cfg = LossConfig(dual_clip=3.0)
    loss, _ = _loss([[math.log(5.0)]], [[0.0]], [-1.0], cfg)
    assert float(loss) == pytest.approx(3.0, abs=1e-5)
    loss_off, _ = _loss([[math.log(5.0)]], [[0.0]], [-1.0], LossConfig())
    assert float(loss_off) == pytest.approx(5.0, abs=1e-5)


def test_kl_estimators_hand_computed():
    logp, ref = jnp.array([-1.0]), jnp.array([-2.0])  # log r = ref - logp = -1
    assert float(kl_penalty(logp, ref, "k1")[0]) == pytest.approx(1.0)
    assert float(kl_penalty(logp, ref, "k2")[0]) == pytest.approx(0.5)
    assert float(kl_penalty(logp, ref, "k3")[0]) == pytest.approx(math.exp(-1) - 1 + 1, abs=1e-6)
    for k in ("k1", "k2", "k3"):
        assert float(kl_penalty(logp, logp, k)[0]) == pytest.approx(0.0, abs=1e-7)


def test_kl_term_added_with_beta():
    # ratio 1 (on-policy), A=0: policy loss 0; k3 with log r=-1 is 0.367879; beta 0.5 -> 0.18394
    cfg = LossConfig(beta=0.5, kl_estimator="k3")
    loss, m = _loss([[-1.0]], [[-1.0]], [0.0], cfg, ref=[[-2.0]])
    assert float(loss) == pytest.approx(0.5 * (math.exp(-1)), abs=1e-6)
    assert float(m["kl"]) == pytest.approx(math.exp(-1), abs=1e-6)


def test_token_weights_hand_computed():
    mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    np.testing.assert_allclose(token_weights(mask, "token-mean"), [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]], atol=1e-7)
    np.testing.assert_allclose(token_weights(mask, "seq-mean-token-mean"), [[0.25, 0.25, 0], [0.5, 0, 0]], atol=1e-7)
    np.testing.assert_allclose(token_weights(mask, "seq-mean-token-sum"), [[0.5, 0.5, 0], [0.5, 0, 0]], atol=1e-7)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_weights_split_over_micro_batches_sum_to_the_whole(aggregation):
    rng = np.random.default_rng(0)
    mask = rng.random((8, 5)) < 0.7
    token_loss = rng.normal(size=(8, 5))
    w = token_weights(mask, aggregation)
    whole = (token_loss * w).sum()
    parts = sum((token_loss[i : i + 2] * w[i : i + 2]).sum() for i in range(0, 8, 2))
    assert parts == pytest.approx(whole, abs=1e-6)
    assert whole != 0.0


def test_masked_tokens_do_not_count():
    mask = np.array([[True, False]])
    loss_a, _ = _loss([[math.log(1.1), 5.0]], [[0.0, 0.0]], [1.0], LossConfig(), mask=mask)
    loss_b, _ = _loss([[math.log(1.1), -5.0]], [[0.0, 0.0]], [1.0], LossConfig(), mask=mask)
    assert float(loss_a) == pytest.approx(-1.1, abs=1e-6)
    assert float(loss_a) == float(loss_b)


@pytest.mark.parametrize("log_ratio", [100.0, -100.0])
@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_extreme_log_ratios_give_finite_gradients(log_ratio, advantage):
    """A token whose log-ratio is +-100 (exp overflows float32 at +88) must not poison the gradient:
    before the log-ratio was clamped, exp(100) = inf made the clipped branch's gradient 0 * inf = NaN
    (and global-norm clipping then spread it to every parameter)."""

    def loss_of(logp):
        loss, _ = _loss(logp, [[0.0, 0.0]], [advantage], LossConfig())
        return loss

    logp = jnp.array([[log_ratio, math.log(1.1)]], jnp.float32)
    loss, grad = jax.value_and_grad(loss_of)(logp)
    assert np.isfinite(float(loss)) and np.all(np.isfinite(np.asarray(grad))), (float(loss), grad)
    # Token 1 is ordinary (ratio 1.1, inside the clip range): loss -A * 1.1 / 2 tokens, gradient
    # d/dlogp of -A * exp(logp) / 2 = -A * 1.1 / 2.
    assert float(grad[0, 1]) == pytest.approx(-advantage * 1.1 / 2, abs=1e-6)
    # Token 0: A > 0 with ratio e^100 is clipped at 1.2 (loss -1.2 / 2, no gradient); A < 0 with ratio
    # e^-100 is clipped at 0.8 (loss +0.8 / 2, no gradient). The other two cases are the unclipped
    # branch with the clamped ratio e^+-20: A < 0 -> loss e^20 / 2; A > 0 -> loss -e^-20 / 2; both
    # with gradient 0, since the clamp is active at +-100.
    token0 = {
        (100.0, 1.0): (-1.2 / 2, 0.0),
        (-100.0, -1.0): (0.8 / 2, 0.0),
        (100.0, -1.0): (math.exp(20) / 2, 0.0),
        (-100.0, 1.0): (-math.exp(-20) / 2, 0.0),
    }
    expected_loss0, expected_grad0 = token0[(log_ratio, advantage)]
    assert float(loss) == pytest.approx(expected_loss0 - advantage * 1.1 / 2, rel=1e-6)
    assert float(grad[0, 0]) == pytest.approx(expected_grad0, abs=1e-12)


def test_ordinary_log_ratios_are_unchanged_by_the_clamp():
    """Inside +-20 the clamp does nothing: loss and gradient of 3 tokens by hand (A = 1, token-mean
    over 3 tokens, eps 0.2): ratio 0.9 -> -0.9 (unclipped, gradient -0.9 / 3); ratio 1.5 -> clipped
    at -1.2 (gradient 0); ratio e^-5 (A = 1: max(-e^-5, -0.8) = -e^-5, unclipped, gradient -e^-5 / 3)."""

    def loss_of(logp):
        loss, _ = _loss(logp, [[0.0, 0.0, 0.0]], [1.0], LossConfig())
        return loss

    logp = jnp.array([[math.log(0.9), math.log(1.5), -5.0]], jnp.float32)
    loss, grad = jax.value_and_grad(loss_of)(logp)
    assert float(loss) == pytest.approx((-0.9 - 1.2 - math.exp(-5)) / 3, rel=1e-6)
    np.testing.assert_allclose(np.asarray(grad), [[-0.9 / 3, 0.0, -math.exp(-5) / 3]], rtol=1e-5)

"""Policy losses (grpo, gspo, gspo-token, cispo), KL estimators and the entropy bonus: values and
gradients w.r.t. the log-probs worked out by hand, exactness under gradient accumulation, and agreement
with TRL's and verl's formulas re-implemented here in NumPy on the same numbers."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.algo.loss import LossConfig, kl_penalty, policy_loss, token_weights

# Two sequences of different lengths: sequence 0 has 2 tokens (the third is padding, with a garbage
# log-prob that must be ignored), sequence 1 has 3.
MASK = np.array([[True, True, False], [True, True, True]])
OLD = np.array([[-1.0, -2.0, 0.0], [-1.0, -0.5, -2.0]], np.float32)
LOG_RATIO = np.array([[0.1, 0.3, 0.0], [0.0, -0.3, 0.0]], np.float32)
LOGP = OLD + LOG_RATIO
LOGP[0, 2] = -7.0  # padding: would make sequence 0 unclipped if it counted
ADV = np.array([1.0, -1.5], np.float32)
# seq-mean-token-mean weights: sequence 0 tokens 1 / (2 * 2), sequence 1 tokens 1 / (3 * 2)
W0, W1 = 1 / 4, 1 / 6
SEQ_MEAN = np.array([[W0, W0, 0.0], [W1, W1, W1]], np.float32)
TOKEN_MEAN = MASK / 5.0  # metric weights: 5 valid tokens


def loss_and_grad(cfg, logp=LOGP, weights=SEQ_MEAN, **kwargs):
    def f(lp):
        return policy_loss(
            lp,
            jnp.asarray(OLD),
            jnp.asarray(ADV),
            jnp.asarray(weights),
            jnp.asarray(TOKEN_MEAN, jnp.float32),
            cfg,
            **kwargs,
        )

    (loss, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
    return float(loss), {k: float(v) for k, v in metrics.items()}, np.asarray(grad)


def test_grpo_value_and_gradient_by_hand():
    # Per-token ratios, eps 0.2:
    #   seq 0 (A = 1):    e^0.1 = 1.10517 unclipped -> -e^0.1;   e^0.3 = 1.34986 clipped -> -1.2
    #   seq 1 (A = -1.5): 1 -> 1.5;   e^-0.3 = 0.74082 < 0.8 clipped -> 1.5 * 0.8 = 1.2;   1 -> 1.5
    # gradient of an unclipped token: weight * (-A * ratio); clipped: 0
    loss, m, grad = loss_and_grad(LossConfig(0.2, 0.2))
    assert loss == pytest.approx(W0 * (-math.exp(0.1) - 1.2) + W1 * (1.5 + 1.2 + 1.5), rel=1e-6)
    np.testing.assert_allclose(grad, [[-W0 * math.exp(0.1), 0.0, 0.0], [W1 * 1.5, 0.0, W1 * 1.5]], rtol=1e-5, atol=1e-8)
    assert m["clip_fraction"] == pytest.approx(2 / 5)
    assert m["loss/policy"] == pytest.approx(loss, rel=1e-6)


@pytest.mark.parametrize("name", ["gspo", "gspo-token"])
def test_gspo_value_and_gradient_by_hand(name):
    # seq 0: mean log-ratio (0.1 + 0.3) / 2 = 0.2 (the padding's -7 - 0 is not counted); s = e^0.2 = 1.2214
    #        > 1.2, A = 1 -> clipped: pg = -1.2 on both tokens, gradient 0.
    # seq 1: mean log-ratio -0.3 / 3 = -0.1; s = e^-0.1 = 0.90484 inside [0.8, 1.2], A = -1.5:
    #        pg = 1.5 * e^-0.1 on each of its 3 tokens.
    # loss = 2 * W0 * (-1.2) + 3 * W1 * 1.5 e^-0.1
    # gradient on a token of seq 1: gspo: d/dlogp_t sum_k W1 (-A s) = -A s / 3 * 3 W1 = 1.5 e^-0.1 W1;
    # gspo-token: W1 * (-A * s) directly; the same number.
    loss, m, grad = loss_and_grad(LossConfig(0.2, 0.2, policy_loss=name))
    assert loss == pytest.approx(2 * W0 * -1.2 + 3 * W1 * 1.5 * math.exp(-0.1), rel=1e-6)
    g = 1.5 * math.exp(-0.1) * W1
    np.testing.assert_allclose(grad, [[0.0, 0.0, 0.0], [g, g, g]], rtol=1e-5, atol=1e-8)
    assert m["clip_fraction"] == pytest.approx(2 / 5)


@pytest.mark.parametrize("name", ["gspo", "gspo-token"])
def test_gspo_gradient_is_minus_a_s_over_length_per_token(name):
    # One sequence of 4 tokens, weights 1/4 each (seq-mean-token-mean of one sequence), A = 2, mean
    # log-ratio (0.2 + 0 - 0.1 + 0.1) / 4 = 0.05, s = e^0.05 inside [0.8, 1.2]: loss = -A s, and each
    # token's gradient is -A * s / |y| = -2 e^0.05 / 4.
    old = jnp.zeros((1, 4))
    logp = jnp.array([[0.2, 0.0, -0.1, 0.1]])
    w = jnp.full((1, 4), 0.25)

    def f(lp):
        return policy_loss(lp, old, jnp.array([2.0]), w, w, LossConfig(0.2, 0.2, policy_loss=name))[0]

    loss, grad = jax.value_and_grad(f)(logp)
    s = math.exp(0.05)
    assert float(loss) == pytest.approx(-2 * s, rel=1e-6)
    np.testing.assert_allclose(np.asarray(grad), [[-2 * s / 4] * 4], rtol=1e-5)


def test_gspo_and_gspo_token_gradients_differ_with_per_token_is_weights():
    # With IS weights (0.5, 1) on the two tokens of a single sequence (weights 1/2 each), gspo's
    # gradient on each token is -A s / 2 * (0.5 + 1) / 2 = -A s * 3/8, gspo-token's is -A s * (1/2) * w_t.
    old = jnp.zeros((1, 2))
    logp = jnp.zeros((1, 2))  # s = 1
    w = jnp.full((1, 2), 0.5)
    isw = jnp.array([[0.5, 1.0]])

    def grad_of(name):
        return np.asarray(
            jax.grad(
                lambda lp: policy_loss(
                    lp, old, jnp.array([1.0]), w, w, LossConfig(0.2, 0.2, policy_loss=name), is_weights=isw
                )[0]
            )(logp)
        )

    np.testing.assert_allclose(grad_of("gspo"), [[-3 / 8, -3 / 8]], rtol=1e-6)
    np.testing.assert_allclose(grad_of("gspo-token"), [[-0.25, -0.5]], rtol=1e-6)


def test_cispo_value_and_gradient_by_hand_including_clipped_tokens():
    # w = clip(ratio, 0.8, 1.2) under stop-gradient; pg = -w * A * logp; gradient = -w * A * weight.
    #   seq 0 (A = 1):    logp -0.9, ratio e^0.1 -> w = e^0.1;   logp -1.7, ratio e^0.3 -> clipped, w = 1.2
    #   seq 1 (A = -1.5): logp -1.0, w = 1;   logp -0.8, ratio e^-0.3 -> clipped, w = 0.8;   logp -2.0, w = 1
    loss, m, grad = loss_and_grad(LossConfig(0.2, 0.2, policy_loss="cispo"))
    pg0 = [-math.exp(0.1) * 1 * -0.9, -1.2 * 1 * -1.7]
    pg1 = [-1 * -1.5 * -1.0, -0.8 * -1.5 * -0.8, -1 * -1.5 * -2.0]
    assert loss == pytest.approx(W0 * sum(pg0) + W1 * sum(pg1), rel=1e-5)
    np.testing.assert_allclose(
        grad, [[-math.exp(0.1) * W0, -1.2 * W0, 0.0], [1.5 * W1, 0.8 * 1.5 * W1, 1.5 * W1]], rtol=1e-5, atol=1e-8
    )
    assert grad[0, 1] != 0.0 and grad[1, 1] != 0.0  # clipped tokens still carry gradient
    assert m["clip_fraction"] == pytest.approx(2 / 5)


def test_cispo_default_clip_only_caps_from_above():
    # (eps_low, eps_high) = (1.0, 4.0): weight in [0, 5]. A ratio e^-3 keeps its weight; e^2 = 7.39 is capped at 5.
    old = jnp.zeros((1, 2))
    logp = jnp.array([[-3.0, 2.0]])
    w = jnp.full((1, 2), 0.5)

    def f(lp):
        return policy_loss(lp, old, jnp.array([1.0]), w, w, LossConfig(1.0, 4.0, policy_loss="cispo"))

    (loss, m), grad = jax.value_and_grad(f, has_aux=True)(logp)
    assert float(loss) == pytest.approx(0.5 * (-math.exp(-3) * -3.0) + 0.5 * (-5.0 * 2.0), rel=1e-5)
    np.testing.assert_allclose(np.asarray(grad), [[-0.5 * math.exp(-3), -0.5 * 5.0]], rtol=1e-5)
    assert float(m["clip_fraction"]) == pytest.approx(0.5)


def test_kl_estimators_by_hand():
    # logp -1.5, ref -1.0: log r = ref - logp = 0.5
    logp, ref = jnp.array([[-1.5]]), jnp.array([[-1.0]])
    assert float(kl_penalty(logp, ref, "k1")[0, 0]) == pytest.approx(-0.5)
    assert float(kl_penalty(logp, ref, "k2")[0, 0]) == pytest.approx(0.125)
    assert float(kl_penalty(logp, ref, "k3")[0, 0]) == pytest.approx(math.exp(0.5) - 1.5, rel=1e-6)


@pytest.mark.parametrize("name", ["grpo", "gspo", "cispo"])
def test_kl_term_is_added_for_every_policy_loss(name):
    # ref = logp - 0.5 on every valid token: log r = -0.5, k3 = e^-0.5 - 1 + 0.5 on each;
    # sum of seq-mean-token-mean weights over valid tokens = 1, so loss/kl = beta * k3.
    ref = LOGP - 0.5
    cfg = LossConfig(0.2, 0.2, beta=0.1, kl_estimator="k3", policy_loss=name)
    loss, m, _ = loss_and_grad(cfg, ref_logprobs=jnp.asarray(ref))
    k3 = math.exp(-0.5) - 0.5
    assert m["loss/kl"] == pytest.approx(0.1 * k3, rel=1e-5)
    assert m["kl"] == pytest.approx(k3, rel=1e-5)
    assert loss == pytest.approx(m["loss/policy"] + 0.1 * k3, rel=1e-5)


def test_entropy_bonus_value_and_gradient_sign():
    # entropy per token; padding 9.0 ignored. sum(entropy * weights) = W0 (0.5 + 1.0) + W1 (2 + 0 + 1)
    # = 0.375 + 0.5 = 0.875; coef 0.1: bonus 0.0875 subtracted. IS weights 0.5 halve the policy term only.
    entropy = jnp.array([[0.5, 1.0, 9.0], [2.0, 0.0, 1.0]])
    cfg = LossConfig(0.2, 0.2, entropy_coef=0.1)
    base, _, _ = loss_and_grad(LossConfig(0.2, 0.2))

    def f(ent):
        return policy_loss(
            jnp.asarray(LOGP),
            jnp.asarray(OLD),
            jnp.asarray(ADV),
            jnp.asarray(SEQ_MEAN),
            jnp.asarray(TOKEN_MEAN, jnp.float32),
            cfg,
            is_weights=jnp.full((2, 3), 0.5),
            entropy=ent,
        )

    (loss, m), grad = jax.value_and_grad(f, has_aux=True)(entropy)
    assert float(m["loss/entropy_bonus"]) == pytest.approx(0.0875, rel=1e-6)
    assert float(loss) == pytest.approx(0.5 * base - 0.0875, rel=1e-5)
    # Minimising the loss raises entropy: d loss / d entropy = -0.1 * weight < 0 on valid tokens, 0 on padding.
    np.testing.assert_allclose(np.asarray(grad), [[-0.1 * W0, -0.1 * W0, 0.0], [-0.1 * W1] * 3], rtol=1e-6)


def test_entropy_coef_without_entropy_is_refused():
    with pytest.raises(ValueError, match="entropy"):
        loss_and_grad(LossConfig(entropy_coef=0.1))


@pytest.mark.parametrize("name", ["gspo", "gspo-token", "cispo"])
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_exact_under_gradient_accumulation(name, aggregation):
    """Two micro-batches, weights computed over the whole mini-batch: their losses, gradients and
    metrics sum to the whole mini-batch's."""
    rng = np.random.default_rng(0)
    mask = rng.random((4, 6)) < 0.7
    mask[:, 0] = True
    old = rng.normal(-1.5, 0.5, (4, 6)).astype(np.float32)
    logp = (old + rng.normal(0, 0.2, (4, 6))).astype(np.float32)
    adv = rng.normal(size=4).astype(np.float32)
    w = token_weights(mask, aggregation, norm_tokens=6)
    mw = token_weights(mask, "token-mean")
    cfg = LossConfig(0.1, 0.1, policy_loss=name, entropy_coef=0.01)
    entropy = rng.random((4, 6)).astype(np.float32)

    def f(lp, rows):
        return policy_loss(
            lp,
            jnp.asarray(old[rows]),
            jnp.asarray(adv[rows]),
            jnp.asarray(w[rows]),
            jnp.asarray(mw[rows]),
            cfg,
            entropy=jnp.asarray(entropy[rows]),
            mask=jnp.asarray(mask[rows]),
        )

    grad_fn = jax.value_and_grad(f, has_aux=True)
    (whole, m_whole), g_whole = grad_fn(jnp.asarray(logp), slice(0, 4))
    (a, m_a), g_a = grad_fn(jnp.asarray(logp[:2]), slice(0, 2))
    (b, m_b), g_b = grad_fn(jnp.asarray(logp[2:]), slice(2, 4))
    assert float(a + b) == pytest.approx(float(whole), rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(np.concatenate([g_a, g_b]), np.asarray(g_whole), rtol=1e-5, atol=1e-8)
    for k in m_whole:
        assert float(m_a[k] + m_b[k]) == pytest.approx(float(m_whole[k]), rel=1e-5, abs=1e-7), k
    assert float(whole) != 0.0


# ---- Other projects' formulas, re-implemented in NumPy on the same numbers -------------------------


def _random_batch(seed=3):
    rng = np.random.default_rng(seed)
    mask = rng.random((5, 7)) < 0.7
    mask[:, 0] = True
    old = rng.normal(-1.5, 0.5, (5, 7)).astype(np.float32)
    # log-ratios spread enough that some sequences clip at GSPO's narrow range and CISPO's wider one
    logp = (old + rng.normal(0, 1e-4, (5, 7)) + rng.normal(0, 1e-4, (5, 1))).astype(np.float32)
    logp[0] += 2.0  # a sequence (and tokens) far off-policy
    logp[1, 0] -= 1.0
    adv = np.array([1.0, -1.0, 0.5, -0.3, 2.0], np.float32)
    return mask, old, logp, adv


def _ours(name, mask, old, logp, adv, aggregation, eps_low, eps_high):
    w = token_weights(mask, aggregation)
    mw = token_weights(mask, "token-mean")

    def f(lp):
        return policy_loss(
            lp,
            jnp.asarray(old),
            jnp.asarray(adv),
            jnp.asarray(w),
            jnp.asarray(mw),
            LossConfig(eps_low, eps_high, policy_loss=name),
        )[0]

    loss, grad = jax.value_and_grad(f)(jnp.asarray(logp))
    return float(loss), np.asarray(grad)


def test_gspo_matches_trl_sequence_level_grpo_loss():
    # huggingface/trl, trl/trainer/grpo_trainer.py, GRPOTrainer._compute_loss with
    # importance_sampling_level="sequence", loss_type="grpo" (their GSPO recipe, docs/source/paper_index.md):
    #   log_w = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1);  coef_1 = exp(log_w)[:, None]
    #   coef_2 = clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    #   per_token_loss = -min(coef_1 * A, coef_2 * A)
    #   loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    mask, old, logp, adv = _random_batch()
    eps_low, eps_high = 3e-4, 4e-4
    log_w = ((logp - old) * mask).sum(-1) / np.maximum(mask.sum(-1), 1)
    coef_1 = np.exp(log_w.astype(np.float64))[:, None]
    coef_2 = np.clip(coef_1, 1 - eps_low, 1 + eps_high)
    per_token = -np.minimum(coef_1 * adv[:, None], coef_2 * adv[:, None])
    trl = ((per_token * mask).sum(-1) / np.maximum(mask.sum(-1), 1)).mean()
    clipped = (coef_2 != coef_1).ravel()
    assert clipped.any() and not clipped.all()  # both branches are exercised
    for name in ("gspo", "gspo-token"):
        ours, _ = _ours(name, mask, old, logp, adv, "seq-mean-token-mean", eps_low, eps_high)
        assert ours == pytest.approx(trl, rel=1e-5)


def test_gspo_token_matches_verl_value_and_gradient():
    # volcengine/verl, verl/trainer/ppo/core_algos.py, compute_policy_loss_gspo (GSPO-token form):
    #   log_s_t = log_prob - sg(log_prob) + sg(mean over the mask of (log_prob - old_log_prob))
    #   pg1 = -A * s_t;  pg2 = -A * clamp(s_t, 1 - clip_low, 1 + clip_high);  pg = max(pg1, pg2)
    #   aggregated "seq-mean-token-mean"; its gradient per token: d pg / d log_prob = -A * s where
    #   pg1 >= pg2 (unclipped branch), 0 where the clipped branch is taken (pg2 > pg1).
    mask, old, logp, adv = _random_batch()
    eps_low, eps_high = 3e-4, 4e-4
    s = np.exp((((logp - old) * mask).sum(-1) / np.maximum(mask.sum(-1), 1)).astype(np.float64))[:, None]
    pg1 = -adv[:, None] * s
    pg2 = -adv[:, None] * np.clip(s, 1 - eps_low, 1 + eps_high)
    pg = np.broadcast_to(np.maximum(pg1, pg2), mask.shape)
    lengths = mask.sum(-1, keepdims=True)
    verl = ((pg * mask).sum(-1) / lengths[:, 0]).mean()
    seq_weights = mask / lengths / mask.shape[0]
    verl_grad = np.broadcast_to(np.where(pg2 > pg1, 0.0, -adv[:, None] * s), mask.shape) * seq_weights
    ours, grad = _ours("gspo-token", mask, old, logp, adv, "seq-mean-token-mean", eps_low, eps_high)
    assert ours == pytest.approx(verl, rel=1e-5)
    np.testing.assert_allclose(grad, verl_grad, rtol=1e-4, atol=1e-7)
    # and plain gspo has the same gradient here (weights constant within each sequence)
    _, grad_seq = _ours("gspo", mask, old, logp, adv, "seq-mean-token-mean", eps_low, eps_high)
    np.testing.assert_allclose(grad_seq, verl_grad, rtol=1e-4, atol=1e-7)


def test_cispo_matches_verl_value_and_gradient():
    # volcengine/verl, verl/trainer/ppo/core_algos.py, compute_policy_loss_cispo:
    #   ratio = exp(clamp(log_prob - old_log_prob, -20, 20))
    #   clipped = sg(clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high))
    #   pg_losses = -clipped * A * log_prob;  loss_agg_mode "token-mean": sum(pg * mask) / sum(mask)
    #   gradient per token: -clipped * A / sum(mask)
    mask, old, logp, adv = _random_batch()
    eps_low, eps_high = 0.2, 0.28
    ratio = np.exp(np.clip((logp - old).astype(np.float64), -20, 20))
    clipped = np.clip(ratio, 1 - eps_low, 1 + eps_high)
    assert (clipped[mask] != ratio[mask]).any()
    pg = -clipped * adv[:, None] * logp
    verl = (pg * mask).sum() / mask.sum()
    verl_grad = -clipped * adv[:, None] * mask / mask.sum()
    ours, grad = _ours("cispo", mask, old, logp, adv, "token-mean", eps_low, eps_high)
    assert ours == pytest.approx(verl, rel=1e-5)
    np.testing.assert_allclose(grad, verl_grad, rtol=1e-4, atol=1e-7)


def test_cispo_defaults_match_trl_cispo():
    # huggingface/trl, trl/trainer/grpo_trainer.py, loss_type="cispo" (epsilon_high recommended 5.0,
    # trl/trainer/grpo_config.py):
    #   clamped = clamp(exp(log_ratio), max=epsilon_high).detach();  per_token_loss = -clamped * A * logp
    #   loss = (per_token_loss * mask).sum() / (tokens in the batch)
    mask, old, logp, adv = _random_batch()
    coef_1 = np.exp((logp - old).astype(np.float64))
    clamped = np.minimum(coef_1, 5.0)
    assert (clamped[mask] != coef_1[mask]).any()  # sequence 0 (log-ratio ~2, ratio ~7.4) is capped
    trl = (-clamped * adv[:, None] * logp * mask).sum() / mask.sum()
    ours, grad = _ours("cispo", mask, old, logp, adv, "token-mean", 1.0, 4.0)  # names.CLIP_DEFAULTS["cispo"]
    assert ours == pytest.approx(trl, rel=1e-5)
    np.testing.assert_allclose(grad, -clamped * adv[:, None] * mask / mask.sum(), rtol=1e-4, atol=1e-7)

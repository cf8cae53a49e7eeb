"""The policy loss, composed of registered pure pieces: a policy-gradient surrogate (grpo, gspo,
gspo-token, cispo), a loss aggregation (per-token weights), a KL estimator and an entropy bonus.

Shapes: [B, T] for per-token arrays (B sequences of a micro-batch, T completion tokens), [B] for
per-sequence advantages. Aggregation is expressed as per-token weights computed once for the
whole mini-batch (`token_weights`), so the loss of a micro-batch is `sum(token_loss * weights)`
and summing micro-batch gradients gives exactly the gradient of the whole mini-batch. Every
policy loss needs only its own sequences' tokens (GSPO's sequence ratio is a mean over one
sequence), so that exactness holds for all of them.

Registries (`trainers.registry`, declared with their names in `names.py`; each function registers here):
  POLICY_LOSSES  fn(logprobs, old_logprobs, advantages, mask, cfg) -> (pg [B, T], clipped [B, T])
  AGGREGATIONS   fn(mask float64 [B, T], norm_tokens) -> weights float64 [B, T]
  KL_ESTIMATORS  fn(logprobs, ref_logprobs) -> kl [B, T]
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from trainers.algo.names import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES

LOG_RATIO_LIMIT = 20.0
"""Log-ratios log(pi / pi') are clamped to +-this before `exp` (`ratio_from_log`). Why 20: e^20 ~ 4.9e8
is far outside every clip range (1 +- eps, a dual clip c of a few units), so the clipped surrogate's
value is unchanged for any ratio that matters; and e^20, its products with advantages and loss
weights, and its square (Adam's second moment, the global gradient norm) stay finite in float32
(e^40 ~ 2.4e17 < 3.4e38), whereas exp overflows to inf above ~88 and then the clipped branch's
gradient is 0 * inf = NaN, which global-norm clipping spreads to every parameter."""

POLICY_METRICS = ("loss/policy", "clip_fraction")
KL_METRICS = ("loss/kl", "kl")
ENTROPY_METRICS = ("loss/entropy_bonus",)


def ratio_from_log(log_ratio: jax.Array) -> jax.Array:
    """exp(log_ratio) with the log-ratio clamped to +-LOG_RATIO_LIMIT: always finite, with a finite
    gradient (0 where the clamp is active). The one place a policy ratio is exponentiated."""
    return jnp.exp(jnp.clip(log_ratio, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """The loss of a run. The first five fields keep their historical positional order.

    epsilon_low / epsilon_high: the ratio's clip range [1 - low, 1 + high] (`names.CLIP_DEFAULTS`
    gives each policy loss's usual values); dual_clip: grpo only; beta: weight of the KL penalty
    (estimator `kl_estimator`); policy_loss: a name of `POLICY_LOSSES`; entropy_coef: weight of
    the entropy bonus subtracted from the loss.
    """

    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    dual_clip: float | None = None
    beta: float = 0.0
    kl_estimator: str = "k3"
    policy_loss: str = "grpo"
    entropy_coef: float = 0.0


# ----------------------------------------------------------------------------------------------
# Loss aggregations: per-token weights over the whole mini-batch (NumPy, on the host). A sequence
# with no loss token (out of the loss: `Rollout.in_loss`, or every token masked) weighs 0 and is not
# counted among the mini-batch's sequences, as verl's aggregations exclude fully masked sequences.


def _live_sequences(mask: np.ndarray) -> float:
    """The sequences with at least one loss token (at least 1, so an empty mini-batch weighs 0)."""
    return max(float(np.count_nonzero(mask.any(axis=1))), 1.0)


@AGGREGATIONS.register("token-mean")
def token_mean_weights(mask: np.ndarray, norm_tokens: int | None) -> np.ndarray:
    """Token-level mean (DAPO, arXiv 2503.14476, "token-level policy gradient loss"):
    w = mask / (valid tokens in the mini-batch). Long completions weigh in proportion to their length."""
    del norm_tokens
    return mask / max(mask.sum(), 1.0)


@AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean_weights(mask: np.ndarray, norm_tokens: int | None) -> np.ndarray:
    """Mean over sequences of each sequence's token mean (GRPO, DeepSeekMath, arXiv 2402.03300, eq. 3):
    w = mask / (|o_i| * sequences with a loss token in the mini-batch)."""
    del norm_tokens
    return mask / np.maximum(mask.sum(axis=1, keepdims=True), 1.0) / _live_sequences(mask)


@AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum_weights(mask: np.ndarray, norm_tokens: int | None) -> np.ndarray:
    """Mean over sequences of each sequence's token sum: w = mask / (sequences with a loss token in the
    mini-batch)."""
    del norm_tokens
    return mask / _live_sequences(mask)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm_weights(mask: np.ndarray, norm_tokens: int | None) -> np.ndarray:
    """Dr. GRPO (arXiv 2503.20783, eq. 8): token sum divided by a constant instead of |o_i|:
    w = mask / (sequences with a loss token in the mini-batch * norm_tokens), norm_tokens = the run's
    completion budget (max_new_tokens), as TRL's loss_type="dr_grpo" (sum / (batch * max_completion_length)).
    No length bias: every token of every completion has the same weight, whatever its sequence's length."""
    if norm_tokens is None:
        raise ValueError("loss aggregation 'seq-mean-token-sum-norm' needs norm_tokens (the completion budget)")
    if norm_tokens <= 0:
        raise ValueError(f"norm_tokens must be positive, got {norm_tokens}")
    return mask / (_live_sequences(mask) * float(norm_tokens))


def token_weights(mask: np.ndarray, aggregation: str, norm_tokens: int | None = None) -> np.ndarray:
    """Per-token weights [B, T] float32 for a whole mini-batch so that loss = sum(token_loss * weights).

    token-mean:              mask / (tokens in the mini-batch)
    seq-mean-token-mean:     mask / (tokens in the sequence * S)
    seq-mean-token-sum:      mask / S
    seq-mean-token-sum-norm: mask / (S * norm_tokens)   (needs norm_tokens)

    S = the mini-batch's sequences with at least one loss token: a row of `mask` with none weighs 0
    and does not count (as in verl), so rows left out of the loss change no other row's weight.
    """
    mask = np.asarray(mask, dtype=np.float64)
    return AGGREGATIONS[aggregation](mask, norm_tokens).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# KL estimators (Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html).
# With log r = ref_logprobs - logprobs, samples from pi, each estimates KL(pi || pi_ref) per token.


@KL_ESTIMATORS.register("k1", metric_keys=KL_METRICS)
def kl_k1(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """k1 = -log r (unbiased, high variance, can be negative). Schulman's KL-approximation blog."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k2", metric_keys=KL_METRICS)
def kl_k2(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """k2 = (log r)^2 / 2 (biased, low variance, >= 0). Schulman's KL-approximation blog."""
    return 0.5 * jnp.square(ref_logprobs - logprobs)


@KL_ESTIMATORS.register("k3", metric_keys=KL_METRICS)
def kl_k3(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """k3 = r - 1 - log r (unbiased, low variance, >= 0; GRPO's, DeepSeekMath eq. 4). Schulman's blog."""
    log_ratio = ref_logprobs - logprobs
    return jnp.exp(log_ratio) - 1.0 - log_ratio


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, estimator: str) -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's estimators).

    With log r = ref_logprobs - logprobs:  k1 = -log r;  k2 = (log r)^2 / 2;  k3 = r - 1 - log r.
    """
    return KL_ESTIMATORS[estimator](logprobs, ref_logprobs)


# ----------------------------------------------------------------------------------------------
# Policy losses: per-token surrogate to MINIMISE, and where a clip is active. 0 / False on padding.


def _clipped_surrogate(ratio: jax.Array, adv: jax.Array, cfg: LossConfig) -> tuple[jax.Array, jax.Array]:
    """PPO's pessimistic surrogate: max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))."""
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - cfg.epsilon_low, 1.0 + cfg.epsilon_high)
    return jnp.maximum(unclipped, clipped), clipped > unclipped


def _sequence_log_ratio(logprobs: jax.Array, old_logprobs: jax.Array, mask: jax.Array) -> jax.Array:
    """[B]: mean over each sequence's valid tokens of (logprobs - old_logprobs) = log s_i."""
    log_ratio = jnp.where(mask, logprobs - old_logprobs, 0.0)
    return jnp.sum(log_ratio, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1)


@POLICY_LOSSES.register("grpo", metric_keys=POLICY_METRICS)
def grpo_policy_loss(logprobs, old_logprobs, advantages, mask, cfg: LossConfig):
    """GRPO / PPO clipped surrogate per token (DeepSeekMath, arXiv 2402.03300, eq. 3; separate
    eps_low / eps_high as DAPO's clip-higher, arXiv 2503.14476):
      r_t = exp(logprobs_t - old_logprobs_t) (log-ratio clamped to +-LOG_RATIO_LIMIT, `ratio_from_log`)
      pg_t = max(-A * r_t, -A * clip(r_t, 1 - eps_low, 1 + eps_high))
      dual clip c (A < 0 only; Ye et al., arXiv 1912.09729): pg_t = min(pg_t, -A * c)
    clipped_t: the clipped branch (or the dual clip) is the one taken: no gradient through that token.
    """
    adv = advantages[:, None]
    ratio = ratio_from_log(logprobs - old_logprobs)
    pg, was_clipped = _clipped_surrogate(ratio, adv, cfg)
    if cfg.dual_clip is not None:
        dual = -adv * cfg.dual_clip
        dual_active = (adv < 0) & (pg > dual)
        pg = jnp.where(adv < 0, jnp.minimum(pg, dual), pg)
        was_clipped = was_clipped | dual_active
    return jnp.where(mask, pg, 0.0), was_clipped & mask


@POLICY_LOSSES.register("gspo", metric_keys=POLICY_METRICS)
def gspo_policy_loss(logprobs, old_logprobs, advantages, mask, cfg: LossConfig):
    """GSPO (Zheng et al., "Group Sequence Policy Optimization", arXiv 2507.18071, eqs. 5-7):
      s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|) = exp(mean over the valid tokens of log-ratios)
      pg_i = max(-A_i * s_i, -A_i * clip(s_i, 1 - eps_low, 1 + eps_high)), on every valid token of y_i.
    The gradient flows through s_i: d pg_i / d logprobs_t = -A_i * s_i / |y_i| when unclipped, 0 when
    clipped. With seq-mean-token-mean weights the loss is the paper's mean over sequences of pg_i.
    """
    adv = advantages[:, None]
    s = ratio_from_log(_sequence_log_ratio(logprobs, old_logprobs, mask))[:, None]
    pg, was_clipped = _clipped_surrogate(s, adv, cfg)
    pg = jnp.broadcast_to(pg, logprobs.shape)
    was_clipped = jnp.broadcast_to(was_clipped, logprobs.shape)
    return jnp.where(mask, pg, 0.0), was_clipped & mask


@POLICY_LOSSES.register("gspo-token", metric_keys=POLICY_METRICS)
def gspo_token_policy_loss(logprobs, old_logprobs, advantages, mask, cfg: LossConfig):
    """GSPO-token (arXiv 2507.18071, eqs. 13-14): a per-token ratio with GSPO's value and a per-token
    gradient, so token-level advantages could be used:
      s_{i,t} = sg(s_i) * pi(y_t) / sg(pi(y_t)) = exp(sg(log s_i) + logprobs_t - sg(logprobs_t))
      pg_t = max(-A_i * s_{i,t}, -A_i * clip(s_{i,t}, 1 - eps_low, 1 + eps_high))
    Same value as "gspo"; d pg_t / d logprobs_t = -A_i * s_i when unclipped, 0 when clipped (and no
    cross-token terms). As verl's compute_policy_loss_gspo.
    """
    adv = advantages[:, None]
    log_s = jax.lax.stop_gradient(_sequence_log_ratio(logprobs, old_logprobs, mask))[:, None]
    s_token = ratio_from_log(log_s + logprobs - jax.lax.stop_gradient(logprobs))
    pg, was_clipped = _clipped_surrogate(s_token, adv, cfg)
    return jnp.where(mask, pg, 0.0), was_clipped & mask


@POLICY_LOSSES.register("cispo", metric_keys=POLICY_METRICS)
def cispo_policy_loss(logprobs, old_logprobs, advantages, mask, cfg: LossConfig):
    """CISPO (MiniMax-M1, arXiv 2506.13585, eqs. 4-5): REINFORCE with a clipped, stop-gradient IS weight
      r_t = exp(logprobs_t - old_logprobs_t);  w_t = sg(clip(r_t, 1 - eps_low, 1 + eps_high))
      pg_t = -w_t * A * logprobs_t
    d pg_t / d logprobs_t = -w_t * A for every token, clipped or not (no token's gradient is dropped).
    clipped_t: r_t lies outside [1 - eps_low, 1 + eps_high] (the weight was capped).
    The loss value is not a surrogate of the return (it contains log pi): only its gradient matters.
    Defaults (`names.CLIP_DEFAULTS`): eps_low 1.0 (no lower bound), eps_high 4.0 (weight <= 5).
    """
    ratio = ratio_from_log(logprobs - old_logprobs)
    low, high = 1.0 - cfg.epsilon_low, 1.0 + cfg.epsilon_high
    weight = jax.lax.stop_gradient(jnp.clip(ratio, low, high))
    pg = -weight * advantages[:, None] * logprobs
    was_clipped = (ratio < low) | (ratio > high)
    return jnp.where(mask, pg, 0.0), was_clipped & mask


# ----------------------------------------------------------------------------------------------
# The composed loss.


def metric_keys(cfg: LossConfig, use_ref: bool) -> tuple[str, ...]:
    """Every metric key `policy_loss` returns for this config (use_ref: ref_logprobs will be given)."""
    keys = POLICY_LOSSES.get(cfg.policy_loss).metric_keys
    if use_ref:
        keys += KL_ESTIMATORS.get(cfg.kl_estimator).metric_keys
    if cfg.entropy_coef > 0:
        keys += ENTROPY_METRICS
    return keys


def policy_loss(
    logprobs: jax.Array,
    old_logprobs: jax.Array,
    advantages: jax.Array,
    weights: jax.Array,
    metric_weights: jax.Array,
    cfg: LossConfig,
    ref_logprobs: jax.Array | None = None,
    is_weights: jax.Array | None = None,
    entropy: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Loss of one micro-batch and its metric contributions (keys: `metric_keys(cfg, use_ref)`).

    logprobs, old_logprobs, ref_logprobs, weights, metric_weights, entropy, mask: [B, T];
    advantages: [B]. `weights` come from `token_weights` over the whole mini-batch; `metric_weights`
    are token-mean weights over the whole mini-batch, so every returned metric sums across
    micro-batches. `mask` (bool, True on completion tokens) defaults to metric_weights > 0; pass the
    completion mask itself where metric weights may be 0 on a valid token.

      pg_t = POLICY_LOSSES[cfg.policy_loss](logprobs, old_logprobs, advantages, mask, cfg)
      loss = sum(is_t * (pg_t + beta * kl_t) * weights_t) - entropy_coef * sum(entropy_t * weights_t)
    kl_t = KL_ESTIMATORS[cfg.kl_estimator] (only with ref_logprobs). is_t: importance weights
    pi_old / pi_gen for async GRPO (`importance.importance_weights`), under stop_gradient; None applies
    no correction (weights of exactly 1 give exactly the uncorrected loss). The entropy bonus (only
    with entropy_coef > 0, and then `entropy`, the differentiable per-token entropy of pi, is
    required) is not IS-weighted: it regularises the current policy, it estimates nothing about pi_old.
    Metrics: loss/policy = sum(is * pg * weights); clip_fraction = sum(clipped * metric_weights);
    loss/kl = beta * sum(is * kl * weights); kl = sum(kl * metric_weights); loss/entropy_bonus =
    entropy_coef * sum(entropy * weights) (the amount subtracted). clip_fraction and kl stay
    uncorrected (they describe the tokens, not the estimate).
    """
    if mask is None:
        mask = metric_weights > 0
    mask = mask.astype(bool)
    pg, clipped = POLICY_LOSSES[cfg.policy_loss](logprobs, old_logprobs, advantages, mask, cfg)
    loss_weights = weights if is_weights is None else weights * jax.lax.stop_gradient(is_weights)
    policy = jnp.sum(pg * loss_weights)
    metrics = {
        "loss/policy": policy,
        "clip_fraction": jnp.sum(clipped.astype(jnp.float32) * metric_weights),
    }
    loss = policy
    if ref_logprobs is not None:
        kl = jnp.where(mask, kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator), 0.0)
        kl_loss = cfg.beta * jnp.sum(kl * loss_weights)
        loss = loss + kl_loss
        metrics["loss/kl"] = kl_loss
        metrics["kl"] = jnp.sum(kl * metric_weights)
    if cfg.entropy_coef > 0:
        if entropy is None:
            raise ValueError("grpo.entropy_coef > 0 needs the per-token entropy (policy_loss(entropy=...))")
        bonus = cfg.entropy_coef * jnp.sum(jnp.where(mask, entropy, 0.0) * weights)
        loss = loss - bonus
        metrics["loss/entropy_bonus"] = bonus
    return loss, metrics

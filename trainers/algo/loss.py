"""The GRPO policy loss: clipped surrogate, optional dual clip, KL to a frozen reference, and
loss aggregation normalised over the whole mini-batch.

Shapes: [B, T] for per-token arrays (B sequences of a micro-batch, T completion tokens), [B] for
per-sequence advantages. Aggregation is expressed as per-token weights computed once for the
whole mini-batch (`token_weights`), so the loss of a micro-batch is `sum(token_loss * weights)`
and summing micro-batch gradients gives exactly the gradient of the whole mini-batch.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

LOG_RATIO_LIMIT = 20.0
"""Log-ratios log(pi / pi') are clamped to +-this before `exp` (`ratio_from_log`). Why 20: e^20 ~ 4.9e8
is far outside every clip range (1 +- eps, a dual clip c of a few units), so the clipped surrogate's
value is unchanged for any ratio that matters; and e^20, its products with advantages and loss
weights, and its square (Adam's second moment, the global gradient norm) stay finite in float32
(e^40 ~ 2.4e17 < 3.4e38), whereas exp overflows to inf above ~88 and then the clipped branch's
gradient is 0 * inf = NaN, which global-norm clipping spreads to every parameter."""


def ratio_from_log(log_ratio: jax.Array) -> jax.Array:
    """exp(log_ratio) with the log-ratio clamped to +-LOG_RATIO_LIMIT: always finite, with a finite
    gradient (0 where the clamp is active). The one place a policy ratio is exponentiated."""
    return jnp.exp(jnp.clip(log_ratio, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


@dataclasses.dataclass(frozen=True)
class LossConfig:
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    dual_clip: float | None = None
    beta: float = 0.0
    kl_estimator: str = "k3"


def token_weights(mask: np.ndarray, aggregation: str) -> np.ndarray:
    """Per-token weights [B, T] for a whole mini-batch so that loss = sum(token_loss * weights).

    token-mean:          mask / (tokens in the mini-batch)
    seq-mean-token-mean: mask / (tokens in the sequence * sequences in the mini-batch)
    seq-mean-token-sum:  mask / (sequences in the mini-batch)
    """
    mask = np.asarray(mask, dtype=np.float64)
    sequences = mask.shape[0]
    if aggregation == "token-mean":
        weights = mask / max(mask.sum(), 1.0)
    elif aggregation == "seq-mean-token-mean":
        weights = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1.0) / sequences
    elif aggregation == "seq-mean-token-sum":
        weights = mask / sequences
    else:
        raise ValueError(f"unknown loss aggregation {aggregation!r}")
    return weights.astype(np.float32)


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, estimator: str) -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's estimators).

    With log r = ref_logprobs - logprobs:  k1 = -log r;  k2 = (log r)^2 / 2;  k3 = r - 1 - log r.
    """
    log_ratio = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * jnp.square(log_ratio)
    if estimator == "k3":
        return jnp.exp(log_ratio) - 1.0 - log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}")


def policy_loss(
    logprobs: jax.Array,
    old_logprobs: jax.Array,
    advantages: jax.Array,
    weights: jax.Array,
    metric_weights: jax.Array,
    cfg: LossConfig,
    ref_logprobs: jax.Array | None = None,
    is_weights: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Loss of one micro-batch and its metric contributions.

    logprobs, old_logprobs, ref_logprobs, weights, metric_weights: [B, T]; advantages: [B].
    `weights` come from `token_weights` over the whole mini-batch; `metric_weights` are token-mean
    weights over the whole mini-batch, so every returned metric sums across micro-batches.

    Per token: ratio = exp(logprobs - old_logprobs), the log-ratio clamped to +-LOG_RATIO_LIMIT first
      (`ratio_from_log`: a finite loss and gradient for any input; the value is the unclamped one for
      every ratio in [e^-20, e^20], and so for every ratio inside the clip range);
      pg = max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))
      dual clip (A < 0 only): pg = min(pg, -A * c)
      loss_token = pg + beta * kl
    Importance-sampling correction (async GRPO; `is_weights` [B, T] from
    `importance.importance_weights`, under stop_gradient): both terms are expectations over samples
    assumed to come from pi_old, and both are multiplied per token:
      loss_token = is_weight * (pg + beta * kl)
    None (the default) applies no correction; weights of exactly 1 give exactly the uncorrected loss.
    `clip_fraction` and `kl` metrics stay uncorrected (they describe the tokens, not the estimate).
    """
    adv = advantages[:, None]
    ratio = ratio_from_log(logprobs - old_logprobs)
    clipped_ratio = jnp.clip(ratio, 1.0 - cfg.epsilon_low, 1.0 + cfg.epsilon_high)
    unclipped = -adv * ratio
    clipped = -adv * clipped_ratio
    pg = jnp.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if cfg.dual_clip is not None:
        dual = -adv * cfg.dual_clip
        dual_active = (adv < 0) & (pg > dual)
        pg = jnp.where(adv < 0, jnp.minimum(pg, dual), pg)
        was_clipped = was_clipped | dual_active
    loss_weights = weights if is_weights is None else weights * jax.lax.stop_gradient(is_weights)
    policy = jnp.sum(pg * loss_weights)
    metrics = {
        "loss/policy": policy,
        "clip_fraction": jnp.sum(was_clipped.astype(jnp.float32) * metric_weights),
    }
    loss = policy
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator)
        kl_loss = cfg.beta * jnp.sum(kl * loss_weights)
        loss = loss + kl_loss
        metrics["loss/kl"] = kl_loss
        metrics["kl"] = jnp.sum(kl * metric_weights)
    return loss, metrics

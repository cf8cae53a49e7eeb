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

    Per token: ratio = exp(logprobs - old_logprobs);
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
    ratio = jnp.exp(logprobs - old_logprobs)
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

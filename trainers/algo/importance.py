"""Importance-sampling correction for asynchronous GRPO: pi_old / pi_generator per token.

In async GRPO a trajectory is sampled by the generator's weights (version v) but trained at step
s >= v, where the clipped surrogate assumes samples from pi_old (the trainer's weights at the start
of the update). Multiplying each token's loss by w = pi_old / pi_gen makes the expectation over the
generator's samples equal the expectation over pi_old's (see the NeMo-RL async GRPO notes). Large
weights make the estimate high-variance, so they are truncated:

  mode="clamp": w = min(w, max)                          (truncated IS, "TIS")
  mode="mask":  w = w if min <= w <= max, else 0         (tokens outside the range are dropped)

Levels:
  level="token":    w_t = exp(logp_old_t - logp_gen_t), one weight per completion token.
  level="sequence": w = exp(sum over the sequence's valid tokens of (logp_old_t - logp_gen_t)),
                    the same weight broadcast to every token of the sequence.

The sequence level uses the SUM of the per-token log-ratios, i.e. the exact likelihood ratio
pi_old(y | x) / pi_gen(y | x) of the whole completion: that is the ratio that makes a sequence-level
correction unbiased. The length-normalised geometric mean exp(mean log-ratio) (GSPO's policy ratio)
is lower-variance but is not an importance ratio of any distribution, so it would leave a bias that
grows with the policy lag; here variance is controlled by the truncation instead (a long sequence
with a small per-token drift is truncated as a whole, which the metrics show).

Everything is computed in log space: truncation is decided on the true log-ratio (against log(max)
and log(min)), and a weight is exponentiated only through `loss.ratio_from_log`, the loss's own
ratio, whose log-ratio is clamped to +-`loss.LOG_RATIO_LIMIT` (20): so a weight is never above `max`
and never underflows below e^-20, and the untruncated weights in the metrics stay finite numbers a
JSON metric row can hold. Weights are returned under `stop_gradient`: they correct the sampling
distribution, they are not optimised.

Shapes: [B, T] for per-token arrays (B sequences, T completion tokens); `mask` is True (or 1) on
real completion tokens. Weights are 0 on padding. Pure jax.numpy: usable inside `jit` (the config
is a static, hashable dataclass).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import jax
import jax.numpy as jnp

from trainers.algo.loss import ratio_from_log

IS_METRICS = ("is/weight_mean", "is/weight_max", "is/truncated_fraction")


@dataclasses.dataclass(frozen=True)
class ImportanceConfig:
    """How pi_old / pi_gen weights are formed (mirrors the config's `async.importance_sampling`).

    level: "token" or "sequence" (see the module docstring).
    mode: "clamp" (min(w, max_weight)) or "mask" (0 outside [min_weight, max_weight]).
    max_weight: upper truncation (> 0; >= 1 so that on-policy tokens, w = 1, are never truncated).
    min_weight: lower bound of the kept range, mode "mask" only (0 = no lower bound).
    """

    level: Literal["token", "sequence"] = "token"
    mode: Literal["clamp", "mask"] = "clamp"
    max_weight: float = 2.0
    min_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.level not in ("token", "sequence"):
            raise ValueError(f"unknown importance-sampling level {self.level!r}; use 'token' or 'sequence'")
        if self.mode not in ("clamp", "mask"):
            raise ValueError(f"unknown importance-sampling mode {self.mode!r}; use 'clamp' or 'mask'")
        if not 0.0 <= self.min_weight < self.max_weight:
            raise ValueError(f"need 0 <= min_weight < max_weight, got {self.min_weight}, {self.max_weight}")


def log_ratios(old_logprobs: jax.Array, gen_logprobs: jax.Array, mask: jax.Array, level: str) -> jax.Array:
    """log(pi_old / pi_gen) per token [B, T]: per token, or the masked per-sequence sum broadcast to
    the sequence's tokens. 0 on padding (token level) so padding never produces inf or NaN."""
    valid = jnp.asarray(mask).astype(bool)
    per_token = jnp.where(valid, jnp.asarray(old_logprobs, jnp.float32) - jnp.asarray(gen_logprobs, jnp.float32), 0.0)
    if level == "token":
        return per_token
    if level == "sequence":
        return jnp.broadcast_to(jnp.sum(per_token, axis=1, keepdims=True), per_token.shape)
    raise ValueError(f"unknown importance-sampling level {level!r}; use 'token' or 'sequence'")


def importance_weights(
    old_logprobs: jax.Array,
    gen_logprobs: jax.Array,
    mask: jax.Array,
    cfg: ImportanceConfig,
    metric_weights: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Truncated importance weights pi_old / pi_gen and their metrics.

    old_logprobs: [B, T] float, log pi_old of each sampled token (the trainer's weights before the update).
    gen_logprobs: [B, T] float, log pi_gen of each sampled token, recorded by the generator when sampling.
    mask: [B, T] bool/0-1, real completion tokens.
    metric_weights: optional [B, T] token weights for the metrics (e.g. token-mean weights over a
      whole mini-batch, as `loss.policy_loss` takes), so that `is/weight_mean` and
      `is/truncated_fraction` of several micro-batches SUM to the mini-batch's values;
      `is/weight_max` then combines by max. Default: token-mean over the valid tokens given here.

    Returns (weights [B, T] float32 under stop_gradient, 0 on padding; metrics):
      is/weight_mean:        mean over valid tokens of the UNtruncated weight (1 when the generator
                             and pi_old agree; drifts as the policy lag grows)
      is/weight_max:         max over valid tokens of the untruncated weight (0 if no valid token)
      is/truncated_fraction: fraction of valid tokens whose weight was clamped (clamp) or zeroed (mask)
    Weights, and the untruncated weights in the metrics, have their log clamped at +-loss.LOG_RATIO_LIMIT.
    """
    valid = jnp.asarray(mask).astype(bool)
    log_w = log_ratios(old_logprobs, gen_logprobs, valid, cfg.level)
    log_max = math.log(cfg.max_weight)
    if cfg.mode == "clamp":
        truncated = log_w > log_max
        weights = jnp.where(truncated, cfg.max_weight, ratio_from_log(jnp.minimum(log_w, log_max)))
    elif cfg.mode == "mask":
        log_min = math.log(cfg.min_weight) if cfg.min_weight > 0 else -math.inf
        truncated = (log_w > log_max) | (log_w < log_min)
        weights = jnp.where(truncated, 0.0, ratio_from_log(jnp.minimum(log_w, log_max)))
    else:
        raise ValueError(f"unknown importance-sampling mode {cfg.mode!r}; use 'clamp' or 'mask'")
    truncated = truncated & valid
    weights = jax.lax.stop_gradient(jnp.where(valid, weights, 0.0).astype(jnp.float32))

    if metric_weights is None:
        validf = valid.astype(jnp.float32)
        metric_weights = validf / jnp.maximum(jnp.sum(validf), 1.0)
    raw = ratio_from_log(log_w)
    metrics = {
        "is/weight_mean": jnp.sum(raw * metric_weights),
        "is/weight_max": jnp.max(jnp.where(valid, raw, 0.0), initial=0.0),
        "is/truncated_fraction": jnp.sum(truncated.astype(jnp.float32) * metric_weights),
    }
    return weights, jax.lax.stop_gradient(metrics)

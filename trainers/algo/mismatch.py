"""Sampler/trainer mismatch: how far the sampler's log-probs are from the trainer's, and the
corrections that keep training stable when they drift.

The rollout samples token by token from a generation copy of the weights (its matrices in
`model.dtype`, bfloat16 on an accelerator) with a KV cache, while the update scores the same tokens
in one forward pass: the two disagree per token even on-policy, by rounding in float32 and by much
more in bfloat16. The gap grows with sequence length, model size and kernel differences and has
been behind silent training collapse in several RL frameworks; the field's answer is to report it
and to weight or mask tokens by r = pi_trainer / pi_sampler (Yao et al., "Your Efficient RL
Framework Secretly Brings You Off-Policy RL Training", 2025; Liu et al., "When Speed Kills
Stability", 2025; Ling Team, IcePop, arXiv 2510.18855).

Both log-probs are of the full distribution log_softmax(logits / temperature): the sampler records
it beside the log-prob of the top-k / top-p distribution it drew from (`generate.sample_token_logprobs`,
`Rollout.full_logprobs`), so with a filter the figures still measure the two sides' precision, not
the truncation (which the asynchronous importance weight corrects, `importance.py`).

With log r_t = log pi_trainer(y_t) - log pi_sampler(y_t) per sampled token (0 on padding) and the
bounds `max`, `min` and `mis_min` of `grpo.mismatch`, each registered correction gives a weight per token:

  none:      w_t = 1 (the figures below are reported, nothing is corrected)
  tis:       w_t = min(r_t, max)                                       truncated IS, per token
  mis:       w_t = R if mis_min <= R <= max else 0, R = prod_t r_t     masked IS, per sequence
  icepop:    w_t = r_t if min <= r_t <= max else 0                     IcePop's two-sided token mask
  geo-mask:  w_t = 1 if min <= G <= max else 0, G = exp(mean_t log r_t)  geometric-mean sequence mask

(`mis`'s lower bound has its own field, 0 by default: none, as in Liu et al.; a sequence's ratio is a
product over its tokens, far wider than a token's band. `geo-mask` rejects or keeps a whole sequence
without reweighting it: a geometric mean is not an importance ratio.) A weight multiplies the token's
loss like the asynchronous importance weight (`importance.py`), under stop_gradient.

Every step reports, over the tokens sampled by the weights being trained (the on-policy rows):
  mismatch/logprob_diff_mean  mean |log r_t|
  mismatch/logprob_diff_max   max |log r_t|
  mismatch/kl                 KL(sampler || trainer), Schulman's k3 estimate mean(r - 1 - log r)
  mismatch/corrected_fraction the fraction of those tokens whose weight the correction changed
                              (clamped or zeroed; with a correction only)

Pure jax.numpy on [B, T] arrays (B sequences, T completion tokens), usable inside `jit`; the weights
use `loss.ratio_from_log`, so a weight is always finite.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from trainers.algo.loss import kl_k3, ratio_from_log
from trainers.algo.names import MISMATCH_CORRECTIONS

MISMATCH_METRICS = ("mismatch/logprob_diff_mean", "mismatch/logprob_diff_max", "mismatch/kl")
CORRECTION_METRICS = ("mismatch/corrected_fraction",)


@dataclasses.dataclass(frozen=True)
class MismatchConfig:
    """grpo.mismatch as the update uses it: the correction's name and its bounds (static, hashable)."""

    correction: str = "none"
    max: float = 2.0
    min: float = 0.5
    mis_min: float = 0.0

    def __post_init__(self) -> None:
        MISMATCH_CORRECTIONS.get(self.correction)  # an unknown name says the known ones
        if not 0.0 <= self.min < 1.0 <= self.max:
            raise ValueError(f"need 0 <= min < 1 <= max, got min={self.min}, max={self.max}")
        if not 0.0 <= self.mis_min < 1.0:
            raise ValueError(f"need 0 <= mis_min < 1, got mis_min={self.mis_min}")

    @property
    def corrects(self) -> bool:
        return self.correction != "none"


def log_ratios(trainer_logprobs: jax.Array, sampler_logprobs: jax.Array, mask: jax.Array) -> jax.Array:
    """log(pi_trainer / pi_sampler) per token [B, T], 0 where `mask` is False."""
    valid = jnp.asarray(mask).astype(bool)
    diff = jnp.asarray(trainer_logprobs, jnp.float32) - jnp.asarray(sampler_logprobs, jnp.float32)
    return jnp.where(valid, diff, 0.0)


def _sequence_sum(log_r: jax.Array) -> jax.Array:
    return jnp.sum(log_r, axis=1, keepdims=True)


@MISMATCH_CORRECTIONS.register("none")
def no_correction(log_r: jax.Array, valid: jax.Array, cfg: MismatchConfig) -> jax.Array:
    """w_t = 1: the mismatch is reported, not corrected."""
    return jnp.ones_like(log_r)


@MISMATCH_CORRECTIONS.register("tis")
def truncated_token_is(log_r: jax.Array, valid: jax.Array, cfg: MismatchConfig) -> jax.Array:
    """Truncated importance sampling per token, w_t = min(r_t, max) (Yao et al. 2025)."""
    return ratio_from_log(jnp.minimum(log_r, math.log(cfg.max)))


@MISMATCH_CORRECTIONS.register("mis")
def masked_sequence_is(log_r: jax.Array, valid: jax.Array, cfg: MismatchConfig) -> jax.Array:
    """Masked importance sampling per sequence: the sequence's ratio R = prod_t r_t on each of its
    tokens, or 0 when R > max (Liu et al., "When Speed Kills Stability", 2025) or R < mis_min
    (mis_min 0: no lower bound)."""
    seq = jnp.broadcast_to(_sequence_sum(log_r), log_r.shape)
    low = math.log(cfg.mis_min) if cfg.mis_min > 0 else -math.inf
    return jnp.where((seq > math.log(cfg.max)) | (seq < low), 0.0, ratio_from_log(seq))


@MISMATCH_CORRECTIONS.register("icepop")
def icepop_token_mask(log_r: jax.Array, valid: jax.Array, cfg: MismatchConfig) -> jax.Array:
    """IcePop: w_t = r_t inside the band [min, max], 0 outside it (Ling Team, arXiv 2510.18855)."""
    low = math.log(cfg.min) if cfg.min > 0 else -math.inf
    outside = (log_r > math.log(cfg.max)) | (log_r < low)
    return jnp.where(outside, 0.0, ratio_from_log(log_r))


@MISMATCH_CORRECTIONS.register("geo-mask")
def geometric_sequence_mask(log_r: jax.Array, valid: jax.Array, cfg: MismatchConfig) -> jax.Array:
    """Geometric-mean sequence masking: keep a sequence (w = 1) when G = exp(mean_t log r_t) is in
    [min, max], drop it (w = 0) otherwise; the mean is over the sequence's valid tokens."""
    count = jnp.maximum(jnp.sum(jnp.asarray(valid, jnp.float32), axis=1, keepdims=True), 1.0)
    mean = _sequence_sum(log_r) / count
    low = math.log(cfg.min) if cfg.min > 0 else -math.inf
    kept = (mean >= low) & (mean <= math.log(cfg.max))
    return jnp.broadcast_to(jnp.where(kept, 1.0, 0.0), log_r.shape)


def correction_weights(
    trainer_logprobs: jax.Array, sampler_logprobs: jax.Array, mask: jax.Array, cfg: MismatchConfig
) -> tuple[jax.Array, jax.Array]:
    """(weights [B, T] float32 under stop_gradient, 0 on padding; changed [B, T] bool: the valid
    tokens the correction capped (tis, at max) or dropped (weight 0)). A token merely weighed by its
    own ratio does not count as changed."""
    valid = jnp.asarray(mask).astype(bool)
    log_r = log_ratios(trainer_logprobs, sampler_logprobs, valid)
    weights = MISMATCH_CORRECTIONS[cfg.correction](log_r, valid, cfg)
    weights = jnp.where(valid, weights, 0.0).astype(jnp.float32)
    if cfg.correction == "tis":
        changed = valid & (log_r > math.log(cfg.max))
    else:
        changed = valid & (weights == 0.0)
    return jax.lax.stop_gradient(weights), changed


def mismatch_metrics(
    trainer_logprobs: jax.Array,
    sampler_logprobs: jax.Array,
    mask: jax.Array,
    metric_weights: jax.Array,
    changed: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """The mismatch figures (module docstring) of one micro-batch as contributions that add up over
    micro-batches: `metric_weights` [B, T] are token-mean weights over the on-policy tokens of the
    whole mini-batch (0 elsewhere), so the sums of several micro-batches are the mini-batch's means;
    the max combines by max. `changed` (from `correction_weights`) adds the corrected fraction."""
    valid = jnp.asarray(mask).astype(bool) & (metric_weights > 0)
    log_r = log_ratios(trainer_logprobs, sampler_logprobs, valid)
    # k3 with samples from the sampler: log r = trainer - sampler, E[r - 1 - log r] = KL(sampler || trainer)
    kl = jnp.where(valid, kl_k3(sampler_logprobs, trainer_logprobs), 0.0)
    metrics = {
        "mismatch/logprob_diff_mean": jnp.sum(jnp.abs(log_r) * metric_weights),
        "mismatch/logprob_diff_max": jnp.max(jnp.abs(log_r), initial=0.0),
        "mismatch/kl": jnp.sum(kl * metric_weights),
    }
    if changed is not None:
        metrics["mismatch/corrected_fraction"] = jnp.sum(changed.astype(jnp.float32) * metric_weights)
    return jax.lax.stop_gradient(metrics)

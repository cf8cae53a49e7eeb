"""Jitted device work of the training phase: log-prob passes and one optimizer update.

`make_update_fn` builds the function for one optimizer update: a `lax.scan` over the update's
micro-batches sums gradients (each micro-batch loss is already normalised over the whole
mini-batch, see `loss.token_weights`), then clips and applies the Optax update once. One jitted
call per optimizer update, whatever the accumulation.

A batch is a dict of arrays with a leading micro-batch axis [A, micro, ...]:
  prompt_tokens [A, M, Lp] int32, prompt_valid [A, M, Lp] bool,
  completion_tokens [A, M, Lc] int32, completion_mask [A, M, Lc] bool,
  advantages [A, M] float32, weights / metric_weights [A, M, Lc] float32,
  old_logprobs [A, M, Lc] (only when the plan needs them), ref_logprobs [A, M, Lc] (only when beta > 0),
  gen_logprobs [A, M, Lc] and on_policy [A, M] bool (only with `importance`, see `make_update_fn`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from trainers.importance import IS_METRICS, ImportanceConfig, importance_weights
from trainers.loss import LossConfig, policy_loss
from trainers.model import completion_logprobs

METRIC_KEYS_BASE = ("loss/policy", "clip_fraction", "entropy")


def make_logprob_fn(graphdef: Any, temperature: float) -> Callable:
    """jit(params, prompt_tokens, prompt_valid, completion_tokens, completion_mask) -> logprobs [B, Lc]."""

    def logprobs(params, prompt_tokens, prompt_valid, completion_tokens, completion_mask):
        lp, _ = completion_logprobs(
            graphdef, params, prompt_tokens, prompt_valid, completion_tokens, completion_mask, temperature
        )
        return lp

    return jax.jit(logprobs)


def make_update_fn(
    graphdef: Any,
    optimizer: optax.GradientTransformation,
    loss_cfg: LossConfig,
    temperature: float,
    use_old_logprobs: bool,
    importance: ImportanceConfig | None = None,
) -> Callable:
    """jit(params, opt_state, batch) -> (params, opt_state, metrics) for one optimizer update.

    importance (async GRPO, only without old_logprobs: mu = 1 and one mini-batch, so pi_old is the
    current weights): the importance weights pi_old / pi_gen are formed here from this update's own
    forward pass (pi_old = stop_gradient(log-probs)) and batch["gen_logprobs"], instead of from a
    separate log-prob pass; rows with batch["on_policy"] were sampled by these very weights and get
    weight 1. They multiply batch["weights"], and the is/* metrics come back with the others.
    """
    use_ref = loss_cfg.beta > 0
    if importance is not None and use_old_logprobs:
        raise ValueError("in-update importance weights need pi_old = the current weights (no old_logprobs)")

    def micro_loss(params, mb):
        logprobs, entropy = completion_logprobs(
            graphdef, params, mb["prompt_tokens"], mb["prompt_valid"],
            mb["completion_tokens"], mb["completion_mask"], temperature,
        )
        old = mb["old_logprobs"] if use_old_logprobs else jax.lax.stop_gradient(logprobs)
        ref = mb["ref_logprobs"] if use_ref else None
        weights, is_metrics = mb["weights"], {}
        if importance is not None:
            gen = jnp.where(mb["on_policy"][:, None], old, mb["gen_logprobs"])
            is_weights, is_metrics = importance_weights(old, gen, mb["completion_mask"], importance,
                                                        mb["metric_weights"])
            weights = weights * is_weights
        loss, metrics = policy_loss(
            logprobs, old, mb["advantages"], weights, mb["metric_weights"], loss_cfg, ref
        )
        metrics["entropy"] = jnp.sum(jax.lax.stop_gradient(entropy) * mb["metric_weights"])
        return loss, {**metrics, **is_metrics}

    grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

    def update(params, opt_state, batch):
        def body(carry, mb):
            grads_sum, metrics_sum = carry
            (_, metrics), grads = grad_fn(params, mb)
            grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
            # Micro-batch metrics are already weighted over the mini-batch: they add up (a max combines by max).
            metrics_sum = {k: (jnp.maximum if k == "is/weight_max" else jnp.add)(metrics_sum[k], metrics[k])
                           for k in metrics_sum}
            return (grads_sum, metrics_sum), None

        metric_keys = (METRIC_KEYS_BASE + (("loss/kl", "kl") if use_ref else ())
                       + (IS_METRICS if importance is not None else ()))
        zeros = (jax.tree.map(jnp.zeros_like, params), {k: jnp.zeros((), jnp.float32) for k in metric_keys})
        (grads, metrics), _ = jax.lax.scan(body, zeros, batch)
        metrics["grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, metrics

    return jax.jit(update, donate_argnums=(0, 1))


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
  gen_logprobs [A, M, Lc] and on_policy [A, M] bool (only with `importance` or `mismatch`, see
  `make_update_fn`), gen_full_logprobs [A, M, Lc] (with `mismatch`, when the sampler truncated its
  distribution: top-k / top-p; else the mismatch reads gen_logprobs, the same values),
  mismatch_weights [A, M, Lc] float32 (only with `mismatch`),
  loss_mask [A, M, Lc] bool (only for multi-turn episodes: the sampled tokens, which the loss, KL and
  importance weights cover; completion_mask then also marks an environment's replies, which the
  forward pass reads as context).
A packed batch (batch.packing, `trainers.step.packing`) carries the rows' packed_* arrays [A, R, ...]
in place of prompt_tokens, prompt_valid and completion_tokens; the rest keeps its [A, M, ...] layout.
Lc here is the step's completion width (`completion_width`: its longest completion, bucketed), at
most max_new_tokens. Arrays may be placed on several devices along the batch axis M (data parallel); XLA then adds the
gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from trainers.algo.importance import IS_METRICS, ImportanceConfig, importance_weights
from trainers.algo.loss import LossConfig, metric_keys, policy_loss
from trainers.algo.mismatch import (
    CORRECTION_METRICS,
    MISMATCH_METRICS,
    MismatchConfig,
    correction_weights,
    mismatch_metrics,
)
from trainers.algo.names import CLIP_DEFAULTS
from trainers.config import ExperimentConfig
from trainers.models.transformer import completion_logprobs, packed_logprobs

MAX_METRICS = ("is/weight_max", "mismatch/logprob_diff_max")
"""Metrics that combine across micro-batches and updates by max; every other one is a weighted sum
over micro-batches and a mean over a step's updates."""


COMPLETION_WIDTH_PARTS = 4
COMPLETION_WIDTH_MULTIPLE_TOKENS = 16


def completion_width(
    completion_mask: np.ndarray,
    parts: int = COMPLETION_WIDTH_PARTS,
    multiple_tokens: int = COMPLETION_WIDTH_MULTIPLE_TOKENS,
) -> int:
    """The completion columns a step's log-prob passes and updates need: the step's longest
    completion (its last column with a valid token) rounded up to a width bucket, capped at Lc.

    completion_mask [N, Lc] bool. The buckets are multiples of Lc / parts rounded up to a multiple
    of `multiple_tokens` (Lc = 64: 16, 32, 48, 64; Lc = 512: 128, 256, 384, 512), so a run sees at
    most `parts` + 1 widths, each compiled once. Columns past the longest completion are masked in
    every row: cutting them changes no log-prob of a valid token (attention is causal, masked
    tokens weigh 0 in the loss and metrics), only the work done on padding.
    """
    total = completion_mask.shape[1]
    used = np.flatnonzero(np.asarray(completion_mask).any(axis=0))
    longest = int(used[-1]) + 1 if used.size else 1
    per_part = -(-total // parts)  # ceil(total / parts)
    bucket = max(multiple_tokens, -(-per_part // multiple_tokens) * multiple_tokens)
    return min(-(-longest // bucket) * bucket, total)


def loss_config(config: ExperimentConfig) -> LossConfig:
    """The policy loss of a config: grpo.policy_loss with its clip range (grpo.epsilon_low /
    epsilon_high, or the loss's own defaults, `names.CLIP_DEFAULTS`), dual clip, KL and entropy terms."""
    g = config.grpo
    low, high = CLIP_DEFAULTS[g.policy_loss]
    return LossConfig(
        epsilon_low=low if g.epsilon_low is None else g.epsilon_low,
        epsilon_high=high if g.epsilon_high is None else g.epsilon_high,
        dual_clip=g.dual_clip,
        beta=g.beta,
        kl_estimator=g.kl_estimator,
        policy_loss=g.policy_loss,
        entropy_coef=g.entropy_coef,
    )


def make_logprob_fn(graphdef: Any, temperature: float) -> Callable:
    """jit(params, prompt_tokens, prompt_valid, completion_tokens, completion_mask, prompt_group=1)
    -> logprobs [B, Lc]. prompt_group (static): see `completion_logprobs` and `plan.shared_prompt_group`."""

    def logprobs(params, prompt_tokens, prompt_valid, completion_tokens, completion_mask, prompt_group=1):
        lp, _ = completion_logprobs(
            graphdef,
            params,
            prompt_tokens,
            prompt_valid,
            completion_tokens,
            completion_mask,
            temperature,
            prompt_group,
        )
        return lp

    return jax.jit(logprobs, static_argnames=("prompt_group",))


def make_packed_logprob_fn(graphdef: Any, temperature: float) -> Callable:
    """jit(params, packed, completion_shape) -> logprobs [A, S, Lc] of A packed log-prob micro-batches,
    one after the other in one program (as an update runs its micro-batches: one micro-batch's
    activations alive at a time, and one program in flight per pass): packed holds the
    `packing.PackedRows.arrays` stacked [A, R, ...], completion_shape (static) is each one's (S, Lc)."""

    def logprobs(params, packed, completion_shape):
        return jax.lax.map(
            lambda rows: packed_logprobs(graphdef, params, rows, completion_shape, temperature)[0], packed
        )

    return jax.jit(logprobs, static_argnames=("completion_shape",))


def make_update_fn(
    graphdef: Any,
    optimizer: optax.GradientTransformation,
    loss_cfg: LossConfig,
    temperature: float,
    use_old_logprobs: bool,
    importance: ImportanceConfig | None = None,
    state_shardings: tuple[Any, Any] | None = None,
    mismatch: MismatchConfig | None = None,
) -> Callable:
    """jit(params, opt_state, batch, prompt_group=1, frozen=None) -> (params, opt_state, metrics) for one
    optimizer update. frozen: parameters that take part in the loss but are not trained (model.lora's
    base weights; `params` are then the adapters): the policy is nnx.merge_state(params, frozen), and
    gradients and optimizer state exist for `params` only. prompt_group (static) = G when every micro-batch is whole
    groups of G rows sharing a prompt (`plan.shared_prompt_group`): each prompt then runs once per group
    (`completion_logprobs`).

    use_old_logprobs: pi_old is batch["old_logprobs"] (a separate log-prob pass under the weights the
    step started with: mu > 1 or several mini-batches); otherwise pi_old is this update's own forward
    pass, stop_gradient(log-probs) (the update's weights are the step's weights).

    importance (async GRPO; the one place importance weights are formed): per micro-batch, the
    weights pi_old / pi_gen = `importance.importance_weights(pi_old, batch["gen_logprobs"])`, with
    pi_old as above and pi_gen the log-probs recorded by the generator (those of the distribution
    it sampled from, after top-k / top-p: see `generate.sample_token`). Rows with
    batch["on_policy"] were sampled by these very weights: they take pi_gen = pi_old, so weight
    exactly 1 (decode-vs-forward rounding and the sampler's truncation are not a policy lag; the
    synchronous loop treats such rows the same way). The weights multiply the loss weights
    (`loss.policy_loss(is_weights=...)`), and the is/* metrics come back with the others.

    mismatch (grpo.mismatch; None: neither reported nor corrected): the gap between pi_old and the
    sampler's log-probs of the full distribution, before top-k / top-p (batch["gen_full_logprobs"],
    or batch["gen_logprobs"] when the sampler used no filter), so that it measures the two sides'
    precision and not the truncation, on the rows the current weights sampled
    (batch["on_policy"]), as the mismatch/* metrics over the tokens batch["mismatch_weights"]
    weighs (token-mean over the mini-batch's on-policy tokens, 0 elsewhere); and with a correction,
    its weights (`mismatch.correction_weights`) on those rows in place of the weight 1 above. The
    other rows keep the asynchronous importance weight, which already includes the sampler's gap.

    state_shardings: (params, optimizer state) shardings on a mesh (`Placement.state_shardings`):
    the updated state keeps them (the gradients are reduce-scattered into the parameters' FSDP
    shards) and the metrics come back replicated. None = one device.
    """
    use_ref = loss_cfg.beta > 0

    def micro_loss(params, mb, prompt_group, frozen):
        policy = params if frozen is None else nnx.merge_state(params, frozen)
        if "packed_tokens" in mb:  # a packed micro-batch (`packing.pack_micro_batches`)
            logprobs, entropy = packed_logprobs(graphdef, policy, mb, mb["completion_mask"].shape, temperature)
        else:
            logprobs, entropy = completion_logprobs(
                graphdef,
                policy,
                mb["prompt_tokens"],
                mb["prompt_valid"],
                mb["completion_tokens"],
                mb["completion_mask"],
                temperature,
                prompt_group,
            )
        old = mb["old_logprobs"] if use_old_logprobs else jax.lax.stop_gradient(logprobs)
        ref = mb["ref_logprobs"] if use_ref else None
        trained = mb.get("loss_mask", mb["completion_mask"])  # multi-turn: the sampled tokens only
        is_weights, is_metrics = None, {}
        if importance is not None:
            gen = jnp.where(mb["on_policy"][:, None], old, mb["gen_logprobs"])
            is_weights, is_metrics = importance_weights(old, gen, trained, importance, mb["metric_weights"])
        if mismatch is not None:
            on_policy = mb["on_policy"][:, None]
            sampler = mb["gen_full_logprobs"] if "gen_full_logprobs" in mb else mb["gen_logprobs"]
            changed = None
            if mismatch.corrects:
                corrected, changed = correction_weights(old, sampler, trained, mismatch)
                is_weights = jnp.where(on_policy, corrected, 1.0 if is_weights is None else is_weights)
                changed = changed & on_policy
            is_metrics.update(mismatch_metrics(old, sampler, trained, mb["mismatch_weights"], changed))
        loss, metrics = policy_loss(
            logprobs,
            old,
            mb["advantages"],
            mb["weights"],
            mb["metric_weights"],
            loss_cfg,
            ref,
            is_weights,
            entropy=entropy if loss_cfg.entropy_coef > 0 else None,
            mask=trained,
        )
        metrics["entropy"] = jnp.sum(jax.lax.stop_gradient(entropy) * mb["metric_weights"])
        return loss, {**metrics, **is_metrics}

    grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

    def update(params, opt_state, batch, prompt_group=1, frozen=None):
        def body(carry, mb):
            grads_sum, metrics_sum = carry
            (_, metrics), grads = grad_fn(params, mb, prompt_group, frozen)
            grads_sum = jax.tree.map(jnp.add, grads_sum, grads)
            # Micro-batch metrics are already weighted over the mini-batch: they add up (a max combines by max).
            metrics_sum = {
                k: (jnp.maximum if k in MAX_METRICS else jnp.add)(metrics_sum[k], metrics[k]) for k in metrics_sum
            }
            return (grads_sum, metrics_sum), None

        keys = metric_keys(loss_cfg, use_ref) + ("entropy",) + (IS_METRICS if importance is not None else ())
        if mismatch is not None:
            keys += MISMATCH_METRICS + (CORRECTION_METRICS if mismatch.corrects else ())
        zeros = (jax.tree.map(jnp.zeros_like, params), {k: jnp.zeros((), jnp.float32) for k in keys})
        (grads, metrics), _ = jax.lax.scan(body, zeros, batch)
        metrics["grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics["param_norm"] = optax.tree.norm(params)
        return params, opt_state, metrics

    return _jit_update(update, state_shardings, static_argnames=("prompt_group",))


@dataclasses.dataclass(frozen=True)
class TrainingFunctions:
    """The jitted device work of a run's training phase (`training_functions`). temperature: the
    log-prob passes' and updates' (rollout.temperature, 1 for greedy sampling)."""

    loss_cfg: LossConfig
    temperature: float
    mismatch: MismatchConfig
    logprob_fn: Callable
    packed_logprob_fn: Callable
    update_fn: Callable
    zero_update_fn: Callable


def training_functions(
    config: ExperimentConfig,
    graphdef: Any,
    optimizer: optax.GradientTransformation,
    use_old_logprobs: bool,
    importance: ImportanceConfig | None = None,
    state_shardings: tuple[Any, Any] | None = None,
) -> TrainingFunctions:
    """The log-prob passes (padded and packed) and the updates a run under `config` trains with, as
    `GRPOTrainer` builds them: from the config, the model's graphdef and the optimizer alone (no
    weights or rollout needed, so they can be traced over abstract inputs). use_old_logprobs: the
    plan's `needs_old_logprobs`; importance: the rollout source's; state_shardings: as `make_update_fn`."""
    g = config.grpo
    loss_cfg = loss_config(config)
    temperature = config.rollout.temperature or 1.0
    mismatch = MismatchConfig(g.mismatch.correction, g.mismatch.max, g.mismatch.min, g.mismatch.mis_min)
    return TrainingFunctions(
        loss_cfg=loss_cfg,
        temperature=temperature,
        mismatch=mismatch,
        logprob_fn=make_logprob_fn(graphdef, temperature),
        packed_logprob_fn=make_packed_logprob_fn(graphdef, temperature),
        update_fn=make_update_fn(
            graphdef,
            optimizer,
            loss_cfg,
            temperature,
            use_old_logprobs,
            importance=importance,
            state_shardings=state_shardings,
            mismatch=mismatch,
        ),
        zero_update_fn=make_zero_update_fn(optimizer, state_shardings),
    )


def make_zero_update_fn(
    optimizer: optax.GradientTransformation, state_shardings: tuple[Any, Any] | None = None
) -> Callable:
    """jit(params, opt_state) -> (params, opt_state, {"grad_norm": 0, "param_norm"}): one optimizer update with a
    zero gradient, and no forward or backward pass. It is the update of a mini-batch whose every
    group is flat when the loss has no KL or entropy term (their gradient is exactly 0), so skipping
    the passes changes nothing: momentum, weight decay and the schedule's count still move as they
    would. state_shardings: as `make_update_fn`."""

    def update(params, opt_state):
        grads = jax.tree.map(jnp.zeros_like, params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"grad_norm": jnp.zeros((), jnp.float32), "param_norm": optax.tree.norm(params)}

    return _jit_update(update, state_shardings)


def _jit_update(update: Callable, state_shardings: tuple[Any, Any] | None, **jit_kwargs: Any) -> Callable:
    """jit an update(params, opt_state, ...) -> (params, opt_state, metrics) that donates the state;
    on a mesh the new state keeps `state_shardings` and the metrics come back replicated."""
    if state_shardings is None:
        return jax.jit(update, donate_argnums=(0, 1), **jit_kwargs)
    params_sharding, opt_sharding = state_shardings
    metrics_sharding = jax.sharding.NamedSharding(
        jax.tree.leaves(params_sharding)[0].mesh, jax.sharding.PartitionSpec()
    )
    return jax.jit(
        update, donate_argnums=(0, 1), out_shardings=(params_sharding, opt_sharding, metrics_sharding), **jit_kwargs
    )

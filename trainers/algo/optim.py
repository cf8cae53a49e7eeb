"""Optax optimizer and learning-rate schedule from the config.

Schedules count optimizer updates; the config speaks in steps, so warmup and decay lengths are
converted with the batch plan's updates per step. `opt` is the config's `optimizer` section
(`trainers.config.schema.OptimizerSection`); this package stands below the config and does not import it.

Registries (declared with their names in `names.py`; each function registers here):
  SCHEDULES   fn(opt, decay_updates) -> optax.Schedule after warmup, from the peak learning rate
  OPTIMIZERS  fn(opt, schedule) -> optax.GradientTransformation (before gradient clipping)
"""

from __future__ import annotations

import optax

from trainers.algo.names import OPTIMIZERS, SCHEDULES


@SCHEDULES.register("constant")
def constant_schedule(opt, decay_updates: int) -> optax.Schedule:
    """The peak learning rate to the end."""
    del decay_updates
    return optax.constant_schedule(opt.learning_rate)


@SCHEDULES.register("cosine")
def cosine_schedule(opt, decay_updates: int) -> optax.Schedule:
    """Cosine decay from the peak learning rate to 0 over `decay_updates` updates."""
    return optax.cosine_decay_schedule(opt.learning_rate, decay_updates)


@SCHEDULES.register("linear")
def linear_schedule(opt, decay_updates: int) -> optax.Schedule:
    """Linear decay from the peak learning rate to 0 over `decay_updates` updates."""
    return optax.linear_schedule(opt.learning_rate, 0.0, decay_updates)


@OPTIMIZERS.register("adamw")
def adamw(opt, schedule: optax.Schedule) -> optax.GradientTransformation:
    """Adam with decoupled weight decay (`weight_decay`), betas `b1`, `b2`."""
    return optax.adamw(schedule, b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay)


@OPTIMIZERS.register("adam")
def adam(opt, schedule: optax.Schedule) -> optax.GradientTransformation:
    """Adam, betas `b1`, `b2` (`weight_decay` unused)."""
    return optax.adam(schedule, b1=opt.b1, b2=opt.b2)


@OPTIMIZERS.register("sgd")
def sgd(opt, schedule: optax.Schedule) -> optax.GradientTransformation:
    """SGD with momentum `b1` (none when b1 is 0)."""
    return optax.sgd(schedule, momentum=opt.b1 or None)


def make_schedule(opt, updates_per_step: int, max_steps: int) -> optax.Schedule:
    """Linear warmup over `warmup_steps`, then constant, cosine or linear decay to 0 at max_steps.

    Warmup update k (0-based, of W) uses peak x (k + 1) / W: the first update already learns (a
    ramp that starts at 0 would waste it) and update W - 1 reaches the peak."""
    warmup_updates = opt.warmup_steps * updates_per_step
    total_updates = max(max_steps * updates_per_step, warmup_updates + 1)
    decay_updates = total_updates - warmup_updates
    after = SCHEDULES[opt.schedule](opt, decay_updates)
    if warmup_updates == 0:
        return after
    peak = opt.learning_rate

    def warmup(count):
        return peak * (count + 1) / warmup_updates

    return optax.join_schedules([warmup, after], [warmup_updates])


def make_optimizer(opt, schedule: optax.Schedule) -> optax.GradientTransformation:
    """Gradient clipping by global norm (if max_grad_norm > 0) chained with the named optimizer."""
    base = OPTIMIZERS[opt.name](opt, schedule)
    if opt.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(opt.max_grad_norm), base)
    return base

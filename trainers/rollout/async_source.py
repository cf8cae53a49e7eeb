"""Asynchronous GRPO as a rollout source: step s's rollout comes from a replay buffer that a
background `Collector` fills ahead of training with the newest weights it has.

The trainer (`trainers.loop.trainer.GRPOTrainer`, with this source) holds weights of version s at step s:
  1. `next(s)` waits (bounded waits on the buffer's condition, each checking the collector's error
     and, every half second, `Control` for STOP or PAUSE, which end the run at once) until the buffer
     yields exactly the next `prompts_per_step` groups in data order, each at most
     `async.max_trajectory_age_steps` versions old, and returns them as one `Rollout`;
  2. pi_old: log-probs of the groups' tokens under the trainer's current weights (version s): a
     separate log-prob pass when the plan has several updates per step (mu > 1 or several
     mini-batches), as in the synchronous loop; with one update, pi_old is what that update's own
     forward pass computes, so async costs no extra pass;
  3. importance weights pi_old / pi_gen (pi_gen recorded by the generator when sampling: the
     log-prob of the distribution it sampled from, after top-k / top-p), truncated per
     `async.importance_sampling` (this source's `importance`), formed inside the jitted update in
     both cases (`make_update_fn(importance=...)`); they multiply the per-token loss weights. A
     sequence every token of which was sampled by version s (every sequence of a group of age 0;
     groups are stamped with the oldest version that sampled any of their tokens) was sampled by
     exactly these weights (the published copy of them), so pi_gen = pi_old and its weights are
     exactly 1 (the generator's KV-cached log-probs are replaced by pi_old rather than letting
     decode-vs-forward rounding noise, or the sampler's truncation, pose as a policy lag): max age
     0 is therefore bit-for-bit the synchronous loop (with at most one device per list; with
     several, up to the rounding of the cross-device gradient sum);
  4. the plan's optimizer updates (as the sync loop), then `publish` the new weights (version
     s + 1) to the collector: copied to the rollout devices, or copied on the same device when
     generation and training share it (updates donate the trainer's buffers, so the collector always
     holds its own copy).

Devices: see `trainers.step.placement` (mesh.train_devices, mesh.rollout_devices); without rollout
devices, generation shares the train mesh (or the default device).

Checkpoint and resume: a checkpoint saves the trainer's weights and `data_position` = the first
prompt not yet trained (= `ReplayBuffer.next_prompt_index`); buffered groups are NOT saved. On
resume the buffer starts empty at that position and the collector regenerates those prompts with
the restored weights (same keys: fold_in(fold_in(seed, step), slice)). No prompt is skipped or
repeated; with max age >= 1 the regenerated groups are sampled by newer weights than in the
uninterrupted run, so the resumed run is not bitwise equal to it (with max age 0 it is).

Dynamic sampling (rollout.dynamic_sampling): step s consumes buffered groups in data order, in runs
(`ReplayBuffer.peek_run` / `take_run`: each group fresh at step s, as above), walking them with
`dynamic_sampling.select_informative` (the synchronous loop's walk too): flat groups are consumed
and dropped, until the step holds prompts_per_step informative groups or has consumed
prompts_per_step x (1 + rollout.dynamic_sampling_max_rounds) prompts, when the first dropped groups
complete it out of the loss (`dynamic_sampling.assemble`). The returned rollout's `prompts_consumed`
is the prompts consumed, so the trainer's data position stays the first prompt not consumed and
resume is exact as above (a resumed position may lie inside a collector unit: the unit is
regenerated and its consumed groups are not put). Generation keys follow the prompt's block
i // prompts_per_step (see `collector`), not the synchronous loop's (its step's candidates), so async
dynamic sampling at max age 0 is deterministic and resumes bit for bit, but is not the synchronous
dynamic-sampling run. Extra metrics: dynamic/dropped_group_fraction, dynamic/refill_rounds (extra
prompts_per_step blocks consumed, (consumed - prompts_per_step) / prompts_per_step),
dynamic/prompts_consumed, dynamic/prompts_sampled (= consumed: unconsumed groups stay buffered for
the next step), and reward/mean, reward/std, accuracy over the consumed groups.

Metrics (`metrics()`, for the rollout `next` returned last): async/buffer_size,
async/trajectory_age_mean, async/dropped_stale (see `ReplayBuffer.metrics`), async/wait_s (seconds
`next` waited), async/token_age_mean (tokens, in steps: below the group age with in-flight updates).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from trainers.algo.importance import ImportanceConfig
from trainers.algo.sampling_filters import dynamic_sampling_values, informative_groups
from trainers.rollout.batch import Rollout
from trainers.rollout.collector import Collector, unit_prompts
from trainers.rollout.dynamic_sampling import Selection, assemble, select_informative, step_metrics
from trainers.rollout.replay_buffer import (
    ReplayBuffer,
    TrajectoryGroup,
    default_capacity,
)
from trainers.rollout.source import RolloutContext
from trainers.step.hooks import Action

WAIT_POLL_S = 0.1  # `next` re-checks the collector's error at least this often
CONTROL_POLL_S = 0.5  # ... and Control (STOP, PAUSE) this often while waiting


class AsyncRolloutSource:
    """Rollouts from a collector thread through a replay buffer (config.async_.enabled)."""

    def __init__(self, context: RolloutContext):
        self.context = context
        a, plan = context.config.async_, context.plan
        i = a.importance_sampling
        self.importance = ImportanceConfig(i.level, i.mode, i.max, i.min)
        self.capacity_groups = a.buffer_capacity_groups or default_capacity(
            plan.prompts_per_step, a.max_trajectory_age_steps
        )
        self.unit_prompts = unit_prompts(plan.num_generations, plan.rollout_micro_batch_sequences)
        self.cond = threading.Condition()
        self.buffer: ReplayBuffer | None = None
        self.collector: Collector | None = None
        self.interrupted_by: Action | None = None
        self._metrics: dict[str, float] = {}
        r = context.config.rollout
        # prompts one step may consume: prompts_per_step x (1 + extra rounds) with dynamic sampling
        self.max_step_prompts = plan.prompts_per_step * (1 + r.dynamic_sampling_max_rounds if r.dynamic_sampling else 1)

    def start(self, params: Any, step: int, data_position: int | None = None) -> None:
        c = self.context
        a, plan = c.config.async_, c.plan
        position = plan.data_position_at(step) if data_position is None else data_position
        end_prompt = plan.total_prompts
        if c.config.rollout.dynamic_sampling:  # the most the remaining steps can consume
            end_prompt = position + (plan.max_steps - step) * self.max_step_prompts
        self.buffer = ReplayBuffer(
            self.capacity_groups, a.max_trajectory_age_steps, next_prompt_index=position, next_step=step
        )
        self.collector = Collector(
            buffer=self.buffer,
            cond=self.cond,
            stream=c.stream,
            graphdef=c.graphdef,
            spec=c.spec,
            params=c.placement.rollout_copy(params),
            version=step,
            prompts_per_step=plan.prompts_per_step,
            max_age_steps=a.max_trajectory_age_steps,
            end_prompt=end_prompt,
            base_key=c.base_key,
            in_flight_chunk_tokens=a.in_flight_chunk_tokens if a.in_flight_weight_updates else 0,
            mesh=c.placement.generation_mesh,
        )
        swaps = (
            f"in-flight weight updates every {a.in_flight_chunk_tokens} decode steps"
            if a.in_flight_weight_updates
            else "weights swapped between units"
        )
        c.hooks.on_log(
            f"async: collector started at data position {position} (weights v{step}), max age "
            f"{a.max_trajectory_age_steps}, buffer {self.capacity_groups} groups, unit {self.unit_prompts} prompts, "
            f"{swaps}, {c.placement.describe()}"
        )
        self.collector.start()

    def next(self, step: int) -> Rollout | None:
        if self.context.config.rollout.dynamic_sampling:
            return self._next_informative(step)
        t0 = time.perf_counter()
        groups = self._wait_for_groups(step)
        if groups is None:
            return None
        wait_s = time.perf_counter() - t0
        with self.cond:
            buffer_metrics = self.buffer.metrics()
        rollout = Rollout.concat([group.payload for group in groups])
        self._metrics = {**buffer_metrics, "async/wait_s": wait_s, "async/token_age_mean": rollout.token_age_mean(step)}
        return rollout

    def _next_informative(self, step: int) -> Rollout | None:
        """Dynamic sampling's step (see the module docstring): prompts_per_step groups, informative
        ones first, `prompts_consumed` = the groups consumed."""
        t0 = time.perf_counter()
        taken = self._wait_for_informative(step)
        if taken is None:
            return None
        groups, selection = taken
        wait_s = time.perf_counter() - t0
        with self.cond:
            buffer_metrics = self.buffer.metrics()
        payloads = [group.payload for group in groups]
        rollout = assemble(payloads, selection, self.context.spec.sampling.pad_id)
        rollout.generate_s = sum(p.generate_s for p in payloads)
        rollout.reward_s = sum(p.reward_s for p in payloads)
        p = self.context.plan.prompts_per_step
        dynamic = step_metrics(
            selection,
            (selection.consumed - p) / p,
            selection.consumed,
            np.concatenate([g.rewards for g in payloads]),
            np.concatenate([g.correct for g in payloads]),
            payloads,
        )
        self._metrics = {
            **buffer_metrics,
            "async/wait_s": wait_s,
            "async/token_age_mean": rollout.token_age_mean(step),
            **dynamic,
        }
        return rollout

    def saved_state(self) -> dict[str, Any]:
        return {}  # the buffer is regenerated from the data position on resume

    def restore_state(self, state: dict[str, Any]) -> None:
        pass

    def publish(self, params: Any, version: int) -> None:
        self.collector.publish(self.context.placement.rollout_copy(params), version)

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def stop(self) -> None:
        if self.collector is not None:
            self.collector.stop()

    def _wait_for_groups(self, step: int) -> list[TrajectoryGroup] | None:
        """Exactly the next prompts_per_step groups for `step`; None on a STOP or PAUSE request (in
        `interrupted_by`). Re-raises the collector's exception as soon as it is stored."""

        def attempt() -> tuple[list[TrajectoryGroup] | None, bool]:
            groups = self.buffer.take(step, self.context.plan.prompts_per_step)
            return groups, groups is not None

        return self._wait(step, attempt)

    def _wait_for_informative(self, step: int) -> tuple[list[TrajectoryGroup], Selection] | None:
        """The groups step `step` consumes under dynamic sampling (data order) and their selection;
        None on a STOP or PAUSE request (in `interrupted_by`; the groups consumed so far are lost with
        the step, and the trainer's data position has not moved). Groups are consumed in runs as they
        arrive: each run is walked on by `select_informative`, and only what it consumes is taken, so
        the groups after a complete step stay buffered for the next."""
        prompts = self.context.plan.prompts_per_step
        consumed: list[TrajectoryGroup] = []
        flags: list[bool] = []

        def attempt() -> tuple[tuple[list[TrajectoryGroup], Selection] | None, bool]:
            run = self.buffer.peek_run(step, self.max_step_prompts - len(consumed))
            metric = self.context.config.rollout.dynamic_sampling_metric
            run_flags = (
                informative_groups(
                    np.stack(
                        [dynamic_sampling_values(group.payload.rewards, group.payload.correct, metric) for group in run]
                    )
                ).tolist()
                if run
                else []
            )
            selection = select_informative(flags + run_flags, prompts, self.max_step_prompts)
            count = selection.consumed - len(consumed)
            if count or selection.complete:
                consumed.extend(self.buffer.take_run(step, count, step_done=selection.complete))
                flags.extend(run_flags[:count])
            return ((consumed, selection) if selection.complete else None), count > 0

        return self._wait(step, attempt)

    def _wait(self, step: int, attempt: Callable[[], tuple[Any, bool]]) -> Any:
        """Call attempt() -> (result or None, whether it took groups) under the buffer's lock until it
        gives a result; between tries wait on the buffer's condition (at most WAIT_POLL_S), re-raise
        the collector's exception as soon as it is stored, and every CONTROL_POLL_S poll Control: a
        STOP or PAUSE request returns None (in `interrupted_by`)."""
        assert self.buffer is not None and self.collector is not None, "start() first"
        last_poll = time.perf_counter()
        with self.cond:
            while True:
                error = self.collector.error
                if error is not None:
                    error.add_note(
                        f"raised in the rollout collector thread; the trainer was waiting for step "
                        f"{step + 1}'s trajectories"
                    )
                    raise error
                dropped_before = self.buffer.dropped_stale
                result, took = attempt()
                if took or self.buffer.dropped_stale != dropped_before:
                    self.cond.notify_all()  # the window moved, or stale prompts await regeneration
                if result is not None:
                    return result
                if not self.collector.is_alive():
                    raise RuntimeError(
                        "the rollout collector thread ended without an error before step "
                        f"{step + 1}'s trajectories were complete"
                    )
                now = time.perf_counter()
                if now - last_poll >= CONTROL_POLL_S:
                    last_poll = now
                    action = self.context.control.poll()
                    if action is not Action.CONTINUE:
                        self.interrupted_by = action
                        return None
                self.cond.wait(WAIT_POLL_S)

"""The asynchronous GRPO loop: `GRPOTrainer` whose rollouts come from a background `Collector`.

Per step s (the trainer holds weights of version s):
  1. wait (bounded waits on the buffer's condition, each checking the collector's error and, every
     half second, `Control` for STOP or PAUSE, which end the run at once) until the buffer yields
     exactly the next `prompts_per_step` groups in data order, each at most
     `async.max_trajectory_age_steps` versions old;
  2. pi_old: log-probs of the groups' tokens under the trainer's current weights (version s): a
     separate log-prob pass when the plan has several updates per step (mu > 1 or several
     mini-batches), as in the sync loop; with one update, pi_old is what that update's own forward
     pass computes, so async costs no extra pass;
  3. importance weights pi_old / pi_gen (pi_gen recorded by the generator when sampling), truncated
     per `async.importance_sampling`, formed inside the jitted update in both cases
     (`make_update_fn(importance=...)`); they multiply the per-token loss weights. A group of age 0
     (groups are stamped with the oldest version that sampled any of their tokens) was sampled by
     exactly these weights (the published copy of them), so pi_gen = pi_old and its weights are
     exactly 1 (the generator's KV-cached log-probs are replaced by pi_old rather
     than letting decode-vs-forward rounding noise pose as a policy lag): max age 0 is therefore
     bit-for-bit the synchronous loop (with at most one device per list; with several, up to the
     rounding of the cross-device gradient sum);
  4. the plan's optimizer updates (as the sync loop), then publish the new weights (version s + 1)
     to the collector: copied to the rollout devices, or copied on the same device when generation
     and training share it (updates donate the trainer's buffers, so the collector always holds its
     own copy).

Devices: params, optimizer state and reference are replicated over `async.train_devices`, and every
update and log-prob micro-batch is split over them along its batch axis (data parallel: XLA adds
the gradient all-reduce); the collector's weights are replicated over `async.rollout_devices` and
each generation call's sequences are split over them. So generation and training run on disjoint
devices and overlap. Micro-batch sizes must divide by the device counts (config validation says
which). Empty lists: both share the default device.

Checkpoint and resume: a checkpoint saves the trainer's weights and `data_position` = the first
prompt not yet trained (= `ReplayBuffer.next_prompt_index`); buffered groups are NOT saved. On
resume the buffer starts empty at that position and the collector regenerates those prompts with
the restored weights (same keys: fold_in(fold_in(seed, step), slice)). No prompt is skipped or
repeated; with max age >= 1 the regenerated groups are sampled by newer weights than in the
uninterrupted run, so the resumed run is not bitwise equal to it (with max age 0 it is).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainers.collector import Collector, GroupPayload, unit_prompts
from trainers.hooks import Action
from trainers.importance import ImportanceConfig
from trainers.replay_buffer import ReplayBuffer, TrajectoryGroup, default_capacity
from trainers.rollout import Rollout, completion_text
from trainers.train_step import make_update_fn
from trainers.trainer import GRPOTrainer

WAIT_POLL_S = 0.1          # the trainer re-checks the collector's error at least this often
CONTROL_POLL_S = 0.5       # ... and Control (STOP, PAUSE) this often while waiting


def device_mesh(index_list: list[int], field: str) -> Mesh | None:
    """A one-axis ("data") mesh over the listed devices; None for an empty list (the default device)."""
    if not index_list:
        return None
    devices = jax.devices()
    missing = [i for i in index_list if i >= len(devices)]
    if missing:
        raise ValueError(f"{field}: device index {missing[0]} is out of range: this process sees {len(devices)} "
                         "device(s) (on a CPU host, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N)")
    return Mesh(np.array([devices[i] for i in index_list]), ("data",))


def replicated(mesh: Mesh | None) -> NamedSharding | None:
    return None if mesh is None else NamedSharding(mesh, PartitionSpec())


def split_along(mesh: Mesh | None, batch_axis: int) -> NamedSharding | None:
    """Arrays split along `batch_axis` over the mesh's devices (data parallel)."""
    return None if mesh is None else NamedSharding(mesh, PartitionSpec(*([None] * batch_axis), "data"))


class AsyncGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with a collector thread and a replay buffer (config.async_.enabled)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        a = self.config.async_
        self.train_mesh = device_mesh(a.train_devices, "async.train_devices")
        self.rollout_mesh = device_mesh(a.rollout_devices, "async.rollout_devices")
        i = a.importance_sampling
        self.is_cfg = ImportanceConfig(i.level, i.mode, i.max, i.min)
        self.capacity_groups = a.buffer_capacity_groups or default_capacity(self.plan.prompts_per_step,
                                                                            a.max_trajectory_age_steps)
        self.unit_prompts = unit_prompts(self.plan.num_generations, self.plan.rollout_micro_batch_sequences)
        # The importance weights are formed inside the update, from pi_old of the separate pass when
        # the plan has one, else from the update's own forward pass.
        self.update_fn = make_update_fn(self.graphdef, self.optimizer, self.loss_cfg, self.logprob_temperature,
                                        self.plan.needs_old_logprobs, importance=self.is_cfg)
        self.cond = threading.Condition()
        self.buffer: ReplayBuffer | None = None
        self.collector: Collector | None = None
        self._place_training_state()

    # -- devices and weights ------------------------------------------------------------------

    def _place_training_state(self) -> None:
        """Params, optimizer state and reference replicated over the train devices."""
        sharding = replicated(self.train_mesh)
        if sharding is None:
            return
        self.state.params = jax.device_put(self.state.params, sharding)
        self.state.opt_state = jax.device_put(self.state.opt_state, sharding)
        if self.ref_params is not None:
            self.ref_params = jax.device_put(self.ref_params, sharding)

    def _on_train_devices(self, arrays: dict[str, np.ndarray], batch_axis: int) -> dict[str, Any]:
        sharding = split_along(self.train_mesh, batch_axis)
        if sharding is None:
            return arrays
        return {name: jax.device_put(value, sharding) for name, value in arrays.items()}

    def restore_latest(self) -> int | None:
        step = super().restore_latest()
        if step is not None:
            self._place_training_state()
        return step

    def _rollout_copy(self, params: Any) -> Any:
        """The collector's own copy of `params`, replicated over the rollout devices (never the
        trainer's buffers, which the next update donates)."""
        if self.rollout_mesh is not None:
            return jax.device_put(params, replicated(self.rollout_mesh))
        return jax.tree.map(jnp.copy, params)

    # -- the collector ------------------------------------------------------------------------

    def _start_collector(self) -> None:
        a, s = self.config.async_, self.state
        self.buffer = ReplayBuffer(self.capacity_groups, a.max_trajectory_age_steps,
                                   next_prompt_index=s.data_position, next_step=s.step)
        self.collector = Collector(
            buffer=self.buffer, cond=self.cond, stream=self.stream, graphdef=self.graphdef,
            params=self._rollout_copy(s.params), version=s.step, tokenizer=self.tokenizer,
            decode=lambda ids: completion_text(self.tokenizer, ids), sampling=self.sampling,
            max_prompt_tokens=self.config.data.max_prompt_tokens, reward_specs=self.reward_specs,
            advantage=self.config.grpo.advantage, advantage_eps=self.config.grpo.advantage_eps,
            prompts_per_step=self.plan.prompts_per_step, num_generations=self.plan.num_generations,
            rollout_micro_batch_sequences=self.plan.rollout_micro_batch_sequences,
            max_age_steps=a.max_trajectory_age_steps,
            end_prompt=self.config.train.max_steps * self.plan.prompts_per_step,
            base_key=self.base_key,
            in_flight_chunk_tokens=a.in_flight_chunk_tokens if a.in_flight_weight_updates else 0,
            prompt_sharding=split_along(self.rollout_mesh, 0),
        )
        swaps = (f"in-flight weight updates every {a.in_flight_chunk_tokens} decode steps" if a.in_flight_weight_updates
                 else "weights swapped between units")
        self.hooks.on_log(
            f"async: collector started at data position {s.data_position} (weights v{s.step}), max age "
            f"{a.max_trajectory_age_steps}, buffer {self.capacity_groups} groups, unit {self.unit_prompts} prompts, "
            f"{swaps}, "
            f"rollout devices {a.rollout_devices or 'default'}, train devices {a.train_devices or 'default'}")
        self.collector.start()

    def run(self):
        try:
            return super().run()
        finally:
            if self.collector is not None:
                self.collector.stop()

    def _wait_for_groups(self, step: int) -> list[TrajectoryGroup] | None:
        """Exactly the next prompts_per_step groups for `step`; None on a STOP or PAUSE request (in
        `interrupted_by`). Re-raises the collector's exception as soon as it is stored."""
        assert self.buffer is not None and self.collector is not None
        last_poll = time.perf_counter()
        with self.cond:
            while True:
                error = self.collector.error
                if error is not None:
                    error.add_note(f"raised in the rollout collector thread; the trainer was waiting for step "
                                   f"{step + 1}'s trajectories")
                    raise error
                dropped_before = self.buffer.dropped_stale
                groups = self.buffer.take(step, self.plan.prompts_per_step)
                if groups is not None or self.buffer.dropped_stale != dropped_before:
                    self.cond.notify_all()      # the window moved, or stale prompts await regeneration
                if groups is not None:
                    return groups
                if not self.collector.is_alive():
                    raise RuntimeError("the rollout collector thread ended without an error before step "
                                       f"{step + 1}'s trajectories were complete")
                now = time.perf_counter()
                if now - last_poll >= CONTROL_POLL_S:
                    last_poll = now
                    action = self.control.poll()
                    if action is not Action.CONTINUE:
                        self.interrupted_by = action
                        return None
                self.cond.wait(WAIT_POLL_S)

    # -- one step -----------------------------------------------------------------------------

    @staticmethod
    def assemble(groups: list[TrajectoryGroup]) -> Rollout:
        payloads: list[GroupPayload] = [g.payload for g in groups]

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in payloads])

        return Rollout(
            examples=[p.example for p in payloads],
            prompt_tokens=cat("prompt_tokens"), prompt_valid=cat("prompt_valid"),
            completion_tokens=cat("completion_tokens"), completion_mask=cat("completion_mask"),
            sample_logprobs=cat("sample_logprobs"),
            completions=[c for p in payloads for c in p.completions],
            rewards=cat("rewards"), correct=cat("correct"), advantages=cat("advantages"),
            decode_steps=0,
        )

    def step(self) -> dict[str, float] | None:
        if self.collector is None:
            self._start_collector()
        s = self.state
        t0 = time.perf_counter()
        groups = self._wait_for_groups(s.step)
        if groups is None:
            return None
        t_wait = time.perf_counter()
        with self.cond:
            buffer_metrics = self.buffer.metrics()
        r = self.assemble(groups)
        token_ages = s.step - np.concatenate([p.payload.token_versions for p in groups])[r.completion_mask]
        g = self.plan.num_generations
        # every token of a group of age 0 was sampled by these very weights: pi_gen = pi_old
        on_policy = np.repeat([group.weight_version == s.step for group in groups], g)
        train_metrics = self.train_on(r, in_update_importance={"gen_logprobs": r.sample_logprobs,
                                                               "on_policy": on_policy})
        if train_metrics is None:
            return None
        s.step += 1
        s.data_position += self.plan.prompts_per_step
        self.collector.publish(self._rollout_copy(s.params), s.step)
        jax.block_until_ready(s.params)
        t_end = time.perf_counter()
        generate_s = sum(p.payload.generate_s for p in groups) / self.unit_prompts
        metrics = {
            **r.metrics(),
            **train_metrics,
            **buffer_metrics,
            "async/token_age_mean": float(token_ages.mean()),
            "async/wait_s": t_wait - t0,
            "timing/rollout_s": generate_s,
            "timing/train_s": t_end - t_wait,
            "timing/step_s": t_end - t0,
            "throughput/tokens_per_s": r.total_tokens() / max(t_end - t0, 1e-9),
        }
        self.hooks.on_samples(s.step, r.samples(self.config.train.samples_per_step, g))
        return metrics

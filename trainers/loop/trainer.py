"""The GRPO training loop: the one entry point `train(config, run_dir, hooks, control)`.

Each step walks the batch plan:
  1. the step's rollout from the trainer's `RolloutSource` (`trainers.rollout.source`): the
     `prompts_per_step` prompts at the run's data position (one integer, saved in checkpoints), G
     completions each, rewards, group advantages. The synchronous source generates them now with
     the current weights; the asynchronous one (`trainers.rollout.async_source`, async.enabled) takes them
     from a replay buffer that a collector thread fills ahead of training;
  2. old-policy and reference log-probs in log-prob micro-batches, where the plan needs them;
  3. mu passes x mini-batches optimizer updates, each one jitted call that accumulates its
     micro-batches (with an asynchronous source, each also forms the importance weights);
  4. publish the new weights to the source; report metrics and samples, evaluate and checkpoint
     when due.

Each part runs inside a phase (`trainers.step.phases`): "setup", "restore", then per step "step N"
holding "generation" (an asynchronous run: "rollout wait") and "training", then "evaluation" and
"checkpoint" when due, so a watcher that finds the trainer quiet can tell where it is. A STOP ends
the run with the control's `stopped_as()`: "cancelled", or "requeued" when the run goes on elsewhere.

Where arrays live is the trainer's `Placement` (`trainers.step.placement`): the default device, or the
train and rollout device meshes of the config's `mesh` section, with parameters, optimizer state and
batches split by the logical-axis rules of `trainers.parallel.rules`.

Everything random derives from `config.seed`: the step's sampling key is fold_in(seed key, step),
so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers import devices
from trainers.algo.loss import token_weights
from trainers.algo.optim import make_optimizer, make_schedule
from trainers.algo.sampling_filters import informative_groups
from trainers.config import ExperimentConfig
from trainers.data.examples import load_examples
from trainers.data.prompt_stream import PromptStream
from trainers.loop.checkpoint import Checkpointer, IncompatibleCheckpoint, restore_params_at
from trainers.loop.memory_estimate import fit_step
from trainers.loop.policy import check_tokenizer_fits, initial_params, model_config_for, model_field, tokenizer_for
from trainers.loop.scoring import score_prompts
from trainers.loop.system_metrics import SystemMetricsSampler
from trainers.loop.update import MAX_METRICS, completion_width, training_functions
from trainers.models.hf_weights import abstract_params
from trainers.models.lora import adapters_off, add_lora, lora_settings, split_adapters
from trainers.models.segment_attention import shares_prompts
from trainers.models.transformer import param_count
from trainers.parallel.host import to_host
from trainers.rollout.async_source import AsyncRolloutSource
from trainers.rollout.batch import Rollout
from trainers.rollout.source import (
    RolloutContext,
    RolloutSource,
    SourceFactory,
    SyncRolloutSource,
)
from trainers.rollout.spec import RolloutSpec, check_prompts_fit
from trainers.step.hooks import Action, Control, Hooks, RunInfo, TrainResult, shared_control
from trainers.step.packing import PassBatch, pack_micro_batches, unpacked_positions
from trainers.step.phases import phase
from trainers.step.placement import Placement
from trainers.step.plan import BatchPlan, informative_first, make_plan, shared_prompt_group


def params_digest(params: Any) -> str:
    """SHA-256 over every parameter's path, dtype, shape and bytes: equal for equal parameters.
    Arrays split over several processes are gathered one at a time (every process must call it)."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = to_host(leaf)
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


DIVERGENCE_METRICS = ("loss/policy", "loss/kl", "grad_norm", "param_norm")
"""The metrics of a step's optimizer updates that must be finite: a NaN or infinity in any of them
means the weights are (or are about to be) garbage, so the run fails instead of training on.
param_norm (the trained parameters' global norm after each update) catches weights that an update
made non-finite at once, before they are checkpointed, and also when no later loss is computed
(an update whose groups are all flat runs no forward pass)."""


class TrainingDiverged(RuntimeError):
    """A step's loss or gradient norm was not finite. `str(exc)` is the whole message for people
    (step, metric, value and what to change): callers show it as it is, without a traceback."""

    def __init__(self, message: str, step: int, metric: str):
        super().__init__(message)
        self.step = step
        self.metric = metric


def divergence(step: int, metrics: dict[str, float], config: ExperimentConfig) -> TrainingDiverged | None:
    """The error for step `step` when one of its DIVERGENCE_METRICS is NaN or infinite, else None.
    Only host floats are looked at (the step's metrics, already fetched): no device work."""
    for name in DIVERGENCE_METRICS:
        value = metrics.get(name)
        if value is not None and not math.isfinite(value):
            o = config.optimizer
            clip = (
                f"optimizer.max_grad_norm (now {o.max_grad_norm:g})"
                if o.max_grad_norm
                else "set optimizer.max_grad_norm (now 0, no clipping)"
            )
            return TrainingDiverged(
                f"step {step}: {name} is {value} (non-finite): training diverged; lower "
                f"optimizer.learning_rate (now {o.learning_rate:g}) or {clip}",
                step,
                name,
            )
    return None


def rollout_source_for(config: ExperimentConfig) -> SourceFactory:
    """The rollout source a config asks for: asynchronous with `async.enabled`, else synchronous.
    The one place the two modes are told apart."""
    return AsyncRolloutSource if config.async_.enabled else SyncRolloutSource


def _fetch(tree: Any) -> Any:
    """Every array of `tree` on the host (numpy), fetched after all of them were dispatched."""
    return jax.tree.map(to_host, tree)


def logprob_pass_batch(
    plan: BatchPlan,
    inputs: dict[str, np.ndarray],
    micro_batch_tokens: int | None,
    row_multiple: int,
    enabled: bool,
    share_prompts: bool,
) -> PassBatch:
    """A log-prob pass over a step's `inputs` ([N, ...]: prompt_tokens, prompt_valid,
    completion_tokens, completion_mask), packed where it pays (`pack_micro_batches`): the step's
    rows in as few micro-batches as hold them in `micro_batch_tokens` positions each (None: those a
    padded micro-batch of plan.logprob_micro_batch_sequences computes), with arrays["sequence"]
    [A, slots] the sequence each slot holds, 1-based (0: an empty slot). Not packed, the inputs
    run padded in the plan's log-prob slices."""
    first = plan.logprob_slices()[0]
    prompts, valid = inputs["prompt_tokens"], inputs["prompt_valid"]
    group = shared_prompt_group(
        prompts[first.start : first.stop], valid[first.start : first.stop], plan.num_generations
    )
    width = inputs["completion_mask"].shape[1]
    budget = micro_batch_tokens or unpacked_positions(prompts.shape[1], first.size, width, group)
    sequence = np.arange(1, len(prompts) + 1, dtype=np.int32)
    return pack_micro_batches(
        {k: v[None] for k, v in {**inputs, "sequence": sequence}.items()},
        group,
        row_multiple,
        enabled,
        micro_batch_tokens=budget,
        share_prompts=share_prompts,
    )


def _assembled(parts: list[np.ndarray], slots: np.ndarray | None, sequences: int, width: int) -> np.ndarray:
    """A log-prob pass's fetched results as [sequences, width], in sequence order (`_logprob_parts`):
    the parts end to end, or with `slots` the one packed result [A, slots, width], each slot to the
    sequence slots[a] names (-1: empty); a sequence in no slot (no completion token) gets zeros."""
    if slots is None:
        return np.concatenate(parts)
    (packed,) = parts
    out = np.zeros((sequences, width), packed.dtype)
    for part, sequence in zip(packed, slots):
        live = sequence >= 0
        out[sequence[live]] = part[live]
    return out


def _stack(arrays: dict[str, np.ndarray], micro_batches: tuple) -> dict[str, np.ndarray]:
    """Slice each step-level [N, ...] array by an update's micro-batches and stack to [A, M, ...]."""
    return {k: np.stack([v[m.start : m.stop] for m in micro_batches]) for k, v in arrays.items()}


@dataclasses.dataclass
class _State:
    params: Any
    opt_state: Any
    step: int  # completed steps = the version of `params`
    data_position: int  # prompts consumed


class GRPOTrainer:
    """Holds what a run needs (model, optimizer, data, compiled functions) and runs steps.

    source: builds the rollout source from the run's `RolloutContext` (a `RolloutSource` class:
      `SyncRolloutSource`, `AsyncRolloutSource`); default `rollout_source_for(config)`.
    placement: where arrays live; default `Placement.from_config(config)`.
    init_checkpoint: a checkpoint directory (`<run_dir>/checkpoints/<step>`, e.g. another run's) whose
      params replace the model's first weights; the optimizer state is new and training starts at
      step 0 (a "fresh" fork). It is also the reference policy. A checkpoint of this run's own, if
      any, still wins: a resumed run goes on from where it was.
    """

    def __init__(
        self,
        config: ExperimentConfig,
        run_dir: str,
        hooks: Hooks | None = None,
        control: Control | None = None,
        *,
        source: SourceFactory | None = None,
        placement: Placement | None = None,
        init_checkpoint: str | None = None,
    ):
        self.config = config
        self.run_dir = os.path.abspath(run_dir)
        # A run of several processes (`trainers.parallel.distributed`): every process trains the same
        # steps on the same data; only process 0 reports, and all share one control decision.
        self.hooks = (hooks or Hooks()) if jax.process_index() == 0 else Hooks()
        self.control = shared_control(control or Control())
        if config.async_.enabled and jax.process_count() > 1:
            raise ValueError(
                "async.enabled: asynchronous GRPO runs in one process only (its collector's timing "
                f"would differ between the {jax.process_count()} processes); turn it off or run one "
                "process"
            )
        self.placement = placement if placement is not None else Placement.from_config(config)
        self.tokenizer = tokenizer_for(config)
        d = config.data
        self.train_examples, self.eval_examples = load_examples(
            d.task, d.train_path, d.eval_path, d.train_prompts, d.eval_prompts, config.seed
        )
        self.stream = PromptStream(self.train_examples, seed=config.seed)
        self.plan: BatchPlan = make_plan(config, len(self.train_examples))
        self.spec = RolloutSpec.from_config(config, self.tokenizer, self.plan.rollout_micro_batch_sequences)
        longest_prompt_tokens = check_prompts_fit(self.spec, self.train_examples, "training")
        if self.eval_examples:
            check_prompts_fit(self.spec, self.eval_examples[: config.eval.prompts or None], "eval")
        # Null model.remat / batch.train_micro_batch_sequences: chosen so the step's estimate fits
        # the memory the run has (the plan preview and the run's log say what was chosen).
        fitted = fit_step(config, self.plan, devices.run_memory_bytes(), longest_prompt_tokens)
        self.plan, self.fitted_to_memory = fitted.plan, fitted.memory.automatic
        self.model_config = model_config_for(config, fitted.remat)
        check_tokenizer_fits(self.tokenizer, self.model_config, model_field(config))
        # Loaded (or drawn) straight into the train mesh's shards: no device ever holds the whole model.
        shardings = self.placement.state_shardings(abstract_params(self.model_config)[1])
        self.graphdef, params = initial_params(config, self.model_config, shardings=shardings)
        # With model.lora the trained params are the adapters only; the base weights are frozen,
        # shared by the policy and the reference, and never donated (`policy_params` joins them).
        self.frozen_params, self.base_digest = None, None
        if config.model.lora.rank:
            self.graphdef, params = add_lora(self.graphdef, params, lora_settings(config.model.lora), config.seed)
            params, self.frozen_params = split_adapters(params)
            self.base_digest = params_digest(self.frozen_params)
        if init_checkpoint is not None:
            params = restore_params_at(init_checkpoint, params, config.model)
        self.init_checkpoint = init_checkpoint
        # The reference policy is the initial one (the model folder's weights, with model.path); a
        # copy, since updates donate `params`' buffers. With LoRA: the base with the adapters off.
        self.ref_params = None
        if self.plan.needs_reference:
            self.ref_params = jax.tree.map(jnp.copy, params)
            if self.frozen_params is not None:
                self.ref_params = adapters_off(self.policy_params(self.ref_params))
        self.schedule = make_schedule(config.optimizer, self.plan.optimizer_updates_per_step, config.train.max_steps)
        self.optimizer = make_optimizer(config.optimizer, self.schedule)
        self.state = _State(params, self.placement.init_optimizer(self.optimizer, params), 0, 0)
        self.base_key = jax.random.key(config.seed)
        self.source: RolloutSource = (source or rollout_source_for(config))(
            RolloutContext(
                config=config,
                plan=self.plan,
                spec=self.spec,
                graphdef=self.graphdef,
                stream=self.stream,
                base_key=self.base_key,
                placement=self.placement,
                hooks=self.hooks,
                control=self.control,
            )
        )
        g = config.grpo
        self.packing = config.batch.packing  # pack where it pays (`packing.pack_micro_batches`)
        # a prompt copy shared by a unit's completions on CPU; one sequence per segment where the
        # packed attention runs in a segment-id kernel (a GPU, a TPU: `segment_attention`)
        self.share_prompts = shares_prompts()
        # packed rows are split over the train mesh's data x fsdp devices like sequences: whole rows each
        mesh = self.placement.train_mesh
        self.rows_per_split = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
        # Without a KL term or an entropy bonus, the sequences of a group whose rewards are all equal
        # (advantage 0) add exactly nothing to the gradient: each update trains only the micro-batches
        # that hold the informative groups (`plan.informative_first`), and an update with none applies
        # the optimizer to a zero gradient without a forward or backward pass.
        self.skip_flat_groups = g.beta == 0 and g.entropy_coef == 0
        state_shardings = self.placement.state_shardings((self.state.params, self.state.opt_state))
        functions = training_functions(
            config,
            self.graphdef,
            self.optimizer,
            self.plan.needs_old_logprobs,
            importance=self.source.importance,
            state_shardings=state_shardings,
        )
        self.loss_cfg, self.mismatch = functions.loss_cfg, functions.mismatch
        self.logprob_temperature = functions.temperature
        self.logprob_fn, self.packed_logprob_fn = functions.logprob_fn, functions.packed_logprob_fn
        self.update_fn, self.zero_update_fn = functions.update_fn, functions.zero_update_fn
        c = config.checkpoint
        self.checkpointer = Checkpointer(
            os.path.join(self.run_dir, "checkpoints"),
            c.keep_last,
            c.keep_best_metric,
            c.keep_best_mode,
            model=config.model,
        )
        self.last_metrics: dict[str, float] = {}
        # system/ metrics (CPU, memory, accelerator memory) merged into a step's metrics at low frequency
        self.system_metrics = SystemMetricsSampler(config.train.system_metrics_every_s)
        self.interrupted_by: Action | None = None  # why the last step() returned None: STOP, or PAUSE

    def policy_params(self, trained: Any = None) -> Any:
        """The whole policy's params: the trained ones (default: the current state's), joined with the
        frozen base under model.lora (the same arrays, no copy)."""
        trained = self.state.params if trained is None else trained
        return trained if self.frozen_params is None else nnx.merge_state(trained, self.frozen_params)

    def _place_training_state(self) -> None:
        self.state.params = self.placement.train_state(self.state.params)
        self.state.opt_state = self.placement.train_state(self.state.opt_state)
        if self.ref_params is not None:
            self.ref_params = self.placement.train_state(self.ref_params)

    # -- checkpoints -------------------------------------------------------------------------

    def restore_latest(self) -> int | None:
        step = self.checkpointer.latest_step()
        if step is None:
            return None
        params, opt_state, meta = self.checkpointer.restore(step, self.state.params, self.state.opt_state)
        saved_base = meta.get("lora_base", {}).get("digest")
        if saved_base is not None and saved_base != self.base_digest:
            raise IncompatibleCheckpoint(
                "model.path",
                f"checkpoint {step} holds LoRA adapters trained on other base weights than "
                f"{self.config.model.path or self.config.model.preset}'s (digest {saved_base[:12]} vs "
                f"{(self.base_digest or 'none')[:12]}); point model.path at the base model the run started from",
            )
        self.state = _State(params, opt_state, int(meta["step"]), int(meta["data_position"]))
        self.source.restore_state(meta.get("rollout_source", {}))
        self._place_training_state()
        self.last_metrics = dict(meta.get("metrics", {}))
        return step

    def save_checkpoint(self) -> str:
        """Write the checkpoint of the current step and report it, as phase "checkpoint" (the
        platform's supervisor lets a cancel wait for it: runner.supervisor)."""
        with phase("checkpoint", f"step {self.state.step}"):
            return self._save_checkpoint()

    def _save_checkpoint(self) -> str:
        s = self.state
        meta = {
            "step": s.step,
            "data_position": s.data_position,
            "epoch": self.stream.epoch_of(s.data_position),
            "seed": self.config.seed,
            "rng": "per-step key = fold_in(key(seed), step)",
            "optimizer_updates": s.step * self.plan.optimizer_updates_per_step,
            "params_digest": params_digest(s.params),
            "metrics": self.last_metrics,
        }
        source_state = self.source.saved_state()
        if source_state:  # dynamic sampling's groups carried into the next step
            meta["rollout_source"] = source_state
        if self.base_digest is not None:  # the checkpoint holds adapters: name the base they belong to
            meta["lora_base"] = {
                "model": self.config.model.path or self.config.model.preset,
                "digest": self.base_digest,
            }
        path = self.checkpointer.save(s.step, s.params, s.opt_state, meta, self.last_metrics)
        size = self.checkpointer.size_bytes(s.step)
        self.hooks.on_checkpoint(s.step, path, size, dict(self.last_metrics))
        self.hooks.on_log(f"checkpoint saved at step {s.step}: {path}")
        return path

    # -- one step ----------------------------------------------------------------------------

    def logprobs(self, params: Any, r: Rollout) -> np.ndarray:
        """Log-probs [N, Lc] of the rollout's tokens under `params`, in log-prob micro-batches (computed
        over the step's `completion_width` columns; zero beyond, like every masked token)."""
        width = completion_width(r.completion_mask)
        parts, slots = self._logprob_parts(params, r, width)
        lp = _assembled(_fetch(parts), slots, len(r.prompt_tokens), width)
        return np.pad(lp, ((0, 0), (0, r.completion_mask.shape[1] - width)))

    def _logprob_parts(self, params: Any, r: Rollout, width: int) -> tuple[list[jax.Array], np.ndarray | None]:
        """The log-prob micro-batches' results on the device, all dispatched, none fetched: the caller
        fetches them together (`_fetch`), so the device never waits on the host between them, and
        puts them in sequence order (`_assembled`).

        Packed (where it pays: `pack_micro_batches`), the step's sequences are laid in rows together
        and the rows go into as few micro-batches as hold them in batch.logprob_micro_batch_tokens
        positions each (by default those a padded log-prob micro-batch computes), run one after the
        other in one program: one result [A, slots, width], with [A, slots] the sequence each slot
        holds (-1: empty). Otherwise the plan's log-prob slices, padded: results [n, width] in
        sequence order, and None."""
        inputs = {
            "prompt_tokens": r.prompt_tokens,
            "prompt_valid": r.prompt_valid,
            "completion_tokens": r.completion_tokens[:, :width],
            "completion_mask": r.completion_mask[:, :width],
        }
        run = logprob_pass_batch(
            self.plan,
            inputs,
            self.config.batch.logprob_micro_batch_tokens,
            self.rows_per_split,
            self.packing,
            self.share_prompts,
        )
        parts = []
        if run.packed:  # one program over the pass's micro-batches
            slots = run.arrays["sequence"] - 1
            packed = {k: v for k, v in run.arrays.items() if k.startswith("packed_")}
            batch = self.placement.train_batch(packed, batch_axis=1)
            with self.placement.training():
                parts.append(self.packed_logprob_fn(params, batch, completion_shape=(slots.shape[1], width)))
            return parts, slots
        for s in self.plan.logprob_slices():
            piece = {k: v[s.start : s.stop] for k, v in inputs.items()}
            group = shared_prompt_group(piece["prompt_tokens"], piece["prompt_valid"], self.plan.num_generations)
            a = self.placement.train_batch(piece, batch_axis=0)
            with self.placement.training():
                parts.append(
                    self.logprob_fn(
                        params,
                        a["prompt_tokens"],
                        a["prompt_valid"],
                        a["completion_tokens"],
                        a["completion_mask"],
                        prompt_group=group,
                    )
                )
        return parts, None

    def train_on(self, r: Rollout) -> dict[str, float] | None:
        """All optimizer updates of one step on rollout `r`; None if stopped between updates.

        The updates also get the generator's log-probs and which rows are on-policy (every token
        sampled by the current weights): for the importance correction of an asynchronous source
        (those of the distribution sampled from, after top-k / top-p), and for the mismatch figures
        and correction (grpo.mismatch: those of the full distribution, `Rollout.full_logprobs`), whose
        token weights cover the on-policy tokens; an update whose rows have none reports no mismatch/* figure.

        Log-prob passes and updates run over the step's `completion_width` columns (the longest
        completion, bucketed), not all max_new_tokens: the columns cut are masked in every row.
        The updates' metrics stay on the device until all updates are dispatched, then come back
        in one fetch: the host never waits for one update before dispatching the next."""
        width = completion_width(r.completion_mask)
        mask = r.completion_mask[:, :width]
        arrays = {
            "prompt_tokens": r.prompt_tokens,
            "prompt_valid": r.prompt_valid,
            "completion_tokens": r.completion_tokens[:, :width],
            "completion_mask": mask,
            "advantages": r.advantages,
        }
        passes, slots = {}, {}
        if self.plan.needs_old_logprobs:
            passes["old_logprobs"], slots["old_logprobs"] = self._logprob_parts(self.policy_params(), r, width)
        if self.plan.needs_reference:
            passes["ref_logprobs"], slots["ref_logprobs"] = self._logprob_parts(self.ref_params, r, width)
        for name, parts in _fetch(passes).items():
            arrays[name] = _assembled(parts, slots[name], len(r.prompt_tokens), width)
        # the sampler's log-probs: of the distribution it drew from for the importance weights (async), of
        # the full one (before top-k / top-p, as the trainer scores it) for the mismatch figures and
        # correction; without a filter the two are the same array
        truncated = self.spec.sampling.truncates
        if self.source.importance is not None or not truncated:
            arrays["gen_logprobs"] = r.sample_logprobs[:, :width]
        if truncated:
            arrays["gen_full_logprobs"] = r.full_logprobs[:, :width]
        on_policy = r.on_policy(self.state.step)
        arrays["on_policy"] = on_policy
        if r.loss_mask is not None:  # multi-turn: the environment's replies are context, not trained on
            arrays["loss_mask"] = r.loss_mask[:, :width]
        # Loss weights are normalised over each mini-batch (the same partition in every pass); sequences
        # out of the loss (`Rollout.in_loss`) weigh 0 and do not count in the normalisers: neither their
        # tokens (token-mean) nor the sequences themselves (the seq-mean aggregations, `token_weights`). Metric
        # weights (token-mean) cover the sequences the update learns from: with flat groups skipped,
        # those of informative groups, whatever micro-batches the skip rounds up to.
        g = self.plan.num_generations
        informative = np.repeat(informative_groups(r.rewards.reshape(-1, g)), g)
        loss_mask = r.trained_mask[:, :width] & r.in_loss[:, None]
        learned = loss_mask & informative[:, None] if self.skip_flat_groups else loss_mask
        aggregation = self.config.grpo.loss_aggregation
        weights = np.zeros(mask.shape, np.float32)
        metric_weights = np.zeros(mask.shape, np.float32)
        mismatch_weights = np.zeros(mask.shape, np.float32)  # the mismatch figures: on-policy tokens only
        for update in self.plan.updates()[: self.plan.mini_batches_per_iteration]:
            s = slice(update.sequences.start, update.sequences.stop)
            weights[s] = token_weights(loss_mask[s], aggregation, norm_tokens=self.plan.completion_token_budget)
            metric_weights[s] = token_weights(learned[s], "token-mean")
            mismatch_weights[s] = token_weights(learned[s] & on_policy[s, None], "token-mean")
        arrays["weights"], arrays["metric_weights"] = weights, metric_weights
        arrays["mismatch_weights"] = mismatch_weights
        update_metrics: list[dict[str, jax.Array]] = []  # on the device until every update is dispatched
        updates = self.plan.updates()
        trained_sequences = 0
        positions = tokens = 0  # token positions the updates compute, and the tokens among them
        for i, update in enumerate(updates):
            if i > 0 and self.control.poll() is Action.STOP:
                self.interrupted_by = Action.STOP
                return None
            if self.skip_flat_groups:
                rows, count = informative_first(informative, update)
                if count == 0:  # no informative group: the gradient is exactly 0
                    with self.placement.training():
                        params, opt_state, metrics = self.zero_update_fn(self.state.params, self.state.opt_state)
                    self.state.params, self.state.opt_state = params, opt_state
                    update_metrics.append(metrics)
                    continue
                size = update.micro_batches[0].size
                kept = rows[: count * size]
                stacked = {k: v[kept].reshape(count, size, *v.shape[1:]) for k, v in arrays.items()}
                trained_sequences += len(kept)
            else:
                stacked = _stack(arrays, update.micro_batches)
                trained_sequences += update.sequences.size
            group = shared_prompt_group(stacked["prompt_tokens"], stacked["prompt_valid"], self.plan.num_generations)
            # packed, the update's rows go into micro-batches of batch.train_micro_batch_tokens
            # positions, by default those a padded micro-batch computes
            sequences, prompt_width = stacked["prompt_tokens"].shape[1:]
            budget = self.config.batch.train_micro_batch_tokens or unpacked_positions(
                prompt_width, sequences, width, group
            )
            run = pack_micro_batches(
                stacked,
                group,
                self.rows_per_split,
                self.packing,
                micro_batch_tokens=budget,
                share_prompts=self.share_prompts,
            )
            positions, tokens = positions + run.positions, tokens + run.tokens
            group = 1 if run.packed else group  # a packed update shares prompts in its rows
            batch = self.placement.train_batch(run.arrays, batch_axis=1)
            with self.placement.training():
                frozen = {} if self.frozen_params is None else {"frozen": self.frozen_params}
                params, opt_state, metrics = self.update_fn(
                    self.state.params, self.state.opt_state, batch, prompt_group=group, **frozen
                )
            self.state.params, self.state.opt_state = params, opt_state
            update_metrics.append(metrics)
        # The rate of this step's last update: the schedule counts optimizer updates from 0.
        last_update = (self.state.step + 1) * self.plan.optimizer_updates_per_step - 1
        fetched, learning_rate = _fetch((update_metrics, self.schedule(last_update)))
        # Each metric averages over the updates that report it (an update with no informative group
        # reports only its grad_norm of 0 and its param_norm), so a metric means the same whatever was
        # skipped.
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for update, metrics in zip(updates, fetched):
            if not mismatch_weights[update.sequences.start : update.sequences.stop].any():
                metrics = {k: v for k, v in metrics.items() if not k.startswith("mismatch/")}  # no on-policy token
            for k, v in metrics.items():
                combine = max if k in MAX_METRICS else (lambda a, b: a + b)
                sums[k] = combine(sums[k], float(v)) if k in sums else float(v)
                counts[k] = counts.get(k, 0) + 1
        out = {k: v if k in MAX_METRICS else v / counts[k] for k, v in sums.items()}
        out["train/trained_sequence_fraction"] = trained_sequences / sum(u.sequences.size for u in updates)
        if positions:
            out["train/padding_fraction"] = 1.0 - tokens / positions
        out["learning_rate"] = float(learning_rate)
        return out

    def evaluate(self) -> dict[str, float]:
        """One completion (eval.temperature; 0 = greedy) of each eval prompt: reward mean and accuracy.
        Up to train.samples_per_step of them go to `hooks.on_samples` with "kind": "eval"."""
        examples = self.eval_examples[: self.config.eval.prompts or None]
        if not examples:
            return {}
        key = jax.random.fold_in(jax.random.fold_in(self.base_key, self.state.step), 1 << 20)
        params = self.placement.generation_weights(self.policy_params())  # matrices cast once, not per decode step
        weights = lambda: (params, self.state.step)  # noqa: E731
        e = self.config.eval
        scored = score_prompts(
            self.graphdef,
            weights,
            examples,
            self.spec,
            key,
            temperature=e.temperature,
            samples_per_prompt=e.samples_per_prompt,
            sample_temperature=self.config.rollout.temperature,
            mesh=self.placement.train_mesh,
        )
        evaluated = [{**sample, "kind": "eval"} for sample in scored.greedy.samples(self.config.train.samples_per_step)]
        if evaluated:
            self.hooks.on_samples(self.state.step, evaluated)
        return {f"eval/{name}": value for name, value in scored.metrics(e.pass_k).items()}

    def step(self) -> dict[str, float] | None:
        """Run one whole step; returns its metrics, or None if interrupted mid-step (`interrupted_by`).

        timing/rollout_s: seconds spent encoding, generating, decoding and scoring the step's
        sequences (`Rollout.generate_s`; in async mode spent by the collector, overlapping training);
        timing/train_s: from the rollout in hand to the updated weights published and ready;
        timing/step_s: the whole step, waiting for the rollout included."""
        s = self.state
        t0 = time.perf_counter()
        # an asynchronous source generates in its collector thread (its own "generation" phase)
        waiting = "rollout wait" if isinstance(self.source, AsyncRolloutSource) else "generation"
        with phase(waiting):
            r = self.source.next(s.step)
        if r is None:
            self.interrupted_by = self.source.interrupted_by or Action.STOP
            return None
        t_ready = time.perf_counter()
        with phase("training"):
            train_metrics = self.train_on(r)
            if train_metrics is None:
                return None
            s.step += 1
            s.data_position += r.prompts_consumed
            self.source.publish(self.policy_params(), s.step)
            jax.block_until_ready(s.params)
        t_end = time.perf_counter()
        metrics = {
            **r.metrics(),
            **train_metrics,
            **self.source.metrics(),
            "timing/rollout_s": r.generate_s,
            "timing/train_s": t_end - t_ready,
            "timing/step_s": t_end - t0,
            "throughput/tokens_per_s": r.total_tokens() / max(t_end - t0, 1e-9),
        }
        self.hooks.on_samples(s.step, r.samples(self.config.train.samples_per_step))
        return metrics

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train to train.max_steps (resuming from the newest checkpoint), or until STOP / PAUSE."""
        try:
            return self._run()
        finally:
            self.source.stop()

    def _run(self) -> TrainResult:
        cfg = self.config
        with phase("restore", "the newest checkpoint"):
            resumed = self.restore_latest()
        if resumed is not None:
            self.hooks.on_resume(resumed)
            self.hooks.on_log(f"resumed from checkpoint at step {resumed} (data position {self.state.data_position})")
        elif self.init_checkpoint is not None:
            self.hooks.on_log(f"starting from the weights of checkpoint {self.init_checkpoint} (new optimizer state)")
        for choice in self.fitted_to_memory:
            self.hooks.on_log(f"chosen to fit the memory: {choice}")
        self.hooks.on_start(
            RunInfo(
                config=cfg.to_dict(),
                plan_text=self.plan.describe(),
                start_step=self.state.step,
                max_steps=cfg.train.max_steps,
                run_dir=self.run_dir,
                param_count=param_count(self.policy_params()),
            )
        )
        if self.state.step == 0 and cfg.eval.every_steps and cfg.eval.before_training and self.eval_examples:
            # The starting policy's held-out scores, as step 0: what training is measured against.
            with phase("evaluation", "step 0"):
                self.last_metrics = self.evaluate()
            self.hooks.on_step(0, dict(self.last_metrics))
        status = "succeeded"
        last_saved = resumed
        if self.state.step < cfg.train.max_steps:
            self.source.start(self.policy_params(), self.state.step, self.state.data_position)
        while self.state.step < cfg.train.max_steps:
            action = self.control.poll()
            if action is Action.CONTINUE:
                with phase("step", str(self.state.step + 1)):
                    metrics = self.step()
                if metrics is None:  # interrupted mid-step; the step's updates, if any, are not saved
                    action = self.interrupted_by or Action.STOP
            if action is Action.STOP:
                status = self.control.stopped_as()  # "cancelled"; "requeued" when another attempt took over
                break
            if action is Action.PAUSE:
                if last_saved != self.state.step:
                    self.save_checkpoint()
                status = "paused"
                break
            step = self.state.step
            diverged = divergence(step, metrics, cfg)
            if diverged is not None:
                # The bad step's metrics are reported (the chart shows where it went wrong); its
                # weights are not checkpointed: the newest checkpoint is the last good one.
                self.hooks.on_step(step, metrics)
                self.hooks.on_log(str(diverged), "error")
                self.checkpointer.close()
                raise diverged
            if cfg.eval.every_steps and (step % cfg.eval.every_steps == 0 or step == cfg.train.max_steps):
                with phase("evaluation", f"step {step}"):
                    metrics.update(self.evaluate())
            metrics.update(self.system_metrics.maybe_sample(step))
            self.last_metrics = metrics
            self.hooks.on_step(step, metrics)
            every = cfg.checkpoint.every_steps
            if (every and step % every == 0) or step == cfg.train.max_steps:
                self.save_checkpoint()
                last_saved = step
        result = TrainResult(status, self.state.step, params_digest(self.state.params), self.last_metrics, self.run_dir)
        self.checkpointer.close()
        self.hooks.on_log(f"run {status} at step {self.state.step}")
        self.hooks.on_end(result)
        return result


def train(
    config: ExperimentConfig,
    run_dir: str,
    hooks: Hooks | None = None,
    control: Control | None = None,
    init_checkpoint: str | None = None,
) -> TrainResult:
    """Train under `config`, resuming from the newest checkpoint in `run_dir/checkpoints` if any
    (else from `init_checkpoint`'s weights when given: see GRPOTrainer).
    With `async.enabled` the rollouts come from the asynchronous source (`rollout_source_for`)."""
    with phase("setup", "loading the model and data, placing the state"):
        trainer = GRPOTrainer(config, run_dir, hooks, control, init_checkpoint=init_checkpoint)
    return trainer.run()

"""The synchronous GRPO training loop: the one entry point `train(config, run_dir, hooks, control)`.

Each step walks the batch plan:
  1. take `prompts_per_step` prompts at the run's data position (one integer, saved in checkpoints);
  2. rollout: G completions per prompt in rollout micro-batches, rewards, group advantages;
  3. old-policy and reference log-probs in log-prob micro-batches, where the plan needs them;
  4. mu passes x mini-batches optimizer updates, each one jitted call that accumulates its
     micro-batches;
  5. report metrics and samples, evaluate and checkpoint when due.

Everything random derives from `config.seed`: the step's sampling key is fold_in(seed key, step),
so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from trainers.checkpoint import Checkpointer
from trainers.config import ExperimentConfig
from trainers.data import PromptStream, encode_prompts, load_examples
from trainers.generate import SamplingParams
from trainers.hooks import Action, Control, Hooks, RunInfo, TrainResult
from trainers.loss import LossConfig, token_weights
from trainers.model import PRESETS, init_params, param_count
from trainers.optim import make_optimizer, make_schedule
from trainers.plan import BatchPlan, make_plan, split_sequences
from trainers.rewards import is_correct, score
from trainers.rollout import Rollout, collect_rollout, completion_text, generate_completions
from trainers.tasks import TASKS
from trainers.tokenizer import get_tokenizer
from trainers.train_step import make_logprob_fn, make_update_fn

DEFAULT_MAX_NEW_TOKENS = 64


def params_digest(params: Any) -> str:
    """SHA-256 over every parameter's path, dtype, shape and bytes: equal for equal parameters."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        arr = np.asarray(leaf)
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def reward_specs(config: ExperimentConfig) -> list[tuple[str, float]]:
    """The configured rewards, or the built-in task's own when none are named."""
    if config.rewards:
        return [(r.name, r.weight) for r in config.rewards]
    return list(TASKS[config.data.task].default_rewards)


def max_new_tokens(config: ExperimentConfig) -> int:
    if config.rollout.max_new_tokens is not None:
        return config.rollout.max_new_tokens
    if config.data.task is not None:
        return TASKS[config.data.task].max_new_tokens
    return DEFAULT_MAX_NEW_TOKENS


def sampling_params(config: ExperimentConfig, tokenizer: Any, temperature: float | None = None) -> SamplingParams:
    r = config.rollout
    return SamplingParams(
        max_new_tokens=max_new_tokens(config),
        temperature=r.temperature if temperature is None else temperature,
        top_k=r.top_k,
        top_p=r.top_p,
        stop_at_eos=r.stop_at_eos,
        eos_id=tokenizer.eos_id,
        pad_id=tokenizer.pad_id,
    )


def _stack(arrays: dict[str, np.ndarray], micro_batches: tuple) -> dict[str, np.ndarray]:
    """Slice each step-level [N, ...] array by an update's micro-batches and stack to [A, M, ...]."""
    return {k: np.stack([v[m.start:m.stop] for m in micro_batches]) for k, v in arrays.items()}


@dataclasses.dataclass
class _State:
    params: Any
    opt_state: Any
    step: int            # completed steps
    data_position: int   # prompts consumed


class GRPOTrainer:
    """Holds what a run needs (model, optimizer, data, compiled functions) and runs steps."""

    def __init__(self, config: ExperimentConfig, run_dir: str, hooks: Hooks | None = None,
                 control: Control | None = None):
        self.config = config
        self.run_dir = os.path.abspath(run_dir)
        self.hooks = hooks or Hooks()
        self.control = control or Control()
        self.tokenizer = get_tokenizer(config.data.tokenizer)
        d = config.data
        self.train_examples, self.eval_examples = load_examples(
            d.task, d.train_path, d.eval_path, d.train_prompts, d.eval_prompts, config.seed
        )
        self.stream = PromptStream(self.train_examples, seed=config.seed)
        self.plan: BatchPlan = make_plan(config, len(self.train_examples))
        self.reward_specs = reward_specs(config)
        self.sampling = sampling_params(config, self.tokenizer)
        self.model_config = dataclasses.replace(PRESETS[config.model.preset], dtype=config.model.dtype)
        self.graphdef, params = init_params(self.model_config, config.seed)
        # The reference policy is the initial one; a copy, since updates donate `params`' buffers.
        self.ref_params = jax.tree.map(jnp.copy, params) if self.plan.needs_reference else None
        self.schedule = make_schedule(config.optimizer, self.plan.optimizer_updates_per_step, config.train.max_steps)
        self.optimizer = make_optimizer(config.optimizer, self.schedule)
        self.state = _State(params, self.optimizer.init(params), 0, 0)
        g = config.grpo
        self.loss_cfg = LossConfig(g.epsilon_low, g.epsilon_high, g.dual_clip, g.beta, g.kl_estimator)
        self.logprob_temperature = config.rollout.temperature or 1.0
        self.logprob_fn = make_logprob_fn(self.graphdef, self.logprob_temperature)
        self.update_fn = make_update_fn(
            self.graphdef, self.optimizer, self.loss_cfg, self.logprob_temperature,
            self.plan.needs_old_logprobs,
        )
        c = config.checkpoint
        self.checkpointer = Checkpointer(os.path.join(self.run_dir, "checkpoints"), c.keep_last,
                                         c.keep_best_metric, c.keep_best_mode)
        self.base_key = jax.random.key(config.seed)
        self.last_metrics: dict[str, float] = {}
        self.interrupted_by: Action | None = None  # why the last step() returned None: STOP, or PAUSE

    # -- checkpoints -------------------------------------------------------------------------

    def restore_latest(self) -> int | None:
        step = self.checkpointer.latest_step()
        if step is None:
            return None
        params, opt_state, meta = self.checkpointer.restore(step, self.state.params, self.state.opt_state)
        self.state = _State(params, opt_state, int(meta["step"]), int(meta["data_position"]))
        self.last_metrics = dict(meta.get("metrics", {}))
        return step

    def save_checkpoint(self) -> str:
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
        path = self.checkpointer.save(s.step, s.params, s.opt_state, meta, self.last_metrics)
        size = self.checkpointer.size_bytes(s.step)
        self.hooks.on_checkpoint(s.step, path, size, dict(self.last_metrics))
        self.hooks.on_log(f"checkpoint saved at step {s.step}: {path}")
        return path

    # -- one step ----------------------------------------------------------------------------

    def rollout(self, examples: list[dict], key: jax.Array) -> Rollout:
        return collect_rollout(
            self.graphdef, self.state.params, examples, self.tokenizer,
            num_generations=self.plan.num_generations,
            slices=self.plan.rollout_slices(),
            sampling=self.sampling,
            max_prompt_tokens=self.config.data.max_prompt_tokens,
            reward_specs=self.reward_specs,
            advantage=self.config.grpo.advantage,
            advantage_eps=self.config.grpo.advantage_eps,
            key=key,
        )

    def _on_train_devices(self, arrays: dict[str, np.ndarray], batch_axis: int) -> dict[str, Any]:
        """The update's and log-prob passes' inputs, where they run: here as they are (the default
        device); the async trainer shards them over `async.train_devices` along `batch_axis`."""
        return arrays

    def _logprobs(self, params: Any, r: Rollout) -> np.ndarray:
        parts = []
        for s in self.plan.logprob_slices():
            a = self._on_train_devices({"prompt_tokens": r.prompt_tokens[s.start:s.stop],
                                        "prompt_valid": r.prompt_valid[s.start:s.stop],
                                        "completion_tokens": r.completion_tokens[s.start:s.stop],
                                        "completion_mask": r.completion_mask[s.start:s.stop]}, batch_axis=0)
            parts.append(self.logprob_fn(params, a["prompt_tokens"], a["prompt_valid"], a["completion_tokens"],
                                         a["completion_mask"]))
        return np.concatenate([np.asarray(p) for p in parts])

    def train_on(self, r: Rollout,
                 in_update_importance: dict[str, np.ndarray] | None = None) -> dict[str, float] | None:
        """All optimizer updates of one step; None if stopped between updates.

        in_update_importance: {"gen_logprobs": [N, Lc], "on_policy": [N] bool} for an update
        function that forms the importance weights itself (`make_update_fn(importance=...)`)."""
        arrays = {
            "prompt_tokens": r.prompt_tokens,
            "prompt_valid": r.prompt_valid,
            "completion_tokens": r.completion_tokens,
            "completion_mask": r.completion_mask,
            "advantages": r.advantages,
        }
        if self.plan.needs_old_logprobs:
            arrays["old_logprobs"] = self._logprobs(self.state.params, r)
        if self.plan.needs_reference:
            arrays["ref_logprobs"] = self._logprobs(self.ref_params, r)
        # Loss weights are normalised over each mini-batch (the same partition in every pass).
        aggregation = self.config.grpo.loss_aggregation
        weights = np.zeros(r.completion_mask.shape, np.float32)
        metric_weights = np.zeros(r.completion_mask.shape, np.float32)
        for update in self.plan.updates()[: self.plan.mini_batches_per_iteration]:
            s = update.sequences
            weights[s.start:s.stop] = token_weights(r.completion_mask[s.start:s.stop], aggregation)
            metric_weights[s.start:s.stop] = token_weights(r.completion_mask[s.start:s.stop], "token-mean")
        arrays["weights"], arrays["metric_weights"] = weights, metric_weights
        arrays.update(in_update_importance or {})
        sums: dict[str, float] = {}
        updates = self.plan.updates()
        for i, update in enumerate(updates):
            if i > 0 and self.control.poll() is Action.STOP:
                self.interrupted_by = Action.STOP
                return None
            batch = self._on_train_devices(_stack(arrays, update.micro_batches), batch_axis=1)
            params, opt_state, metrics = self.update_fn(self.state.params, self.state.opt_state, batch)
            self.state.params, self.state.opt_state = params, opt_state
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        out = {k: v / len(updates) for k, v in sums.items()}
        # The rate of this step's last update: the schedule counts optimizer updates from 0.
        last_update = (self.state.step + 1) * self.plan.optimizer_updates_per_step - 1
        out["learning_rate"] = float(self.schedule(last_update))
        return out

    def evaluate(self) -> dict[str, float]:
        """Greedy (eval.temperature) completion of the eval prompts; reward mean and accuracy."""
        examples = self.eval_examples[: self.config.eval.prompts or None]
        if not examples:
            return {}
        sampling = dataclasses.replace(self.sampling, temperature=self.config.eval.temperature)
        tokens, valid = encode_prompts(self.tokenizer, [e["prompt"] for e in examples], self.config.data.max_prompt_tokens)
        size = self.plan.rollout_micro_batch_sequences
        slices = split_sequences(len(examples), size)
        key = jax.random.fold_in(jax.random.fold_in(self.base_key, self.state.step), 1 << 20)
        out_tokens, out_mask, _, _ = generate_completions(self.graphdef, self.state.params, tokens, valid, slices, sampling, key)
        completions = [completion_text(self.tokenizer, t[m]) for t, m in zip(out_tokens, out_mask)]
        rewards, _ = score(completions, examples, self.reward_specs)
        correct = [is_correct(c, e) for c, e in zip(completions, examples)]
        return {"eval/reward_mean": float(np.mean(rewards)), "eval/accuracy": float(np.mean(correct))}

    def step(self) -> dict[str, float] | None:
        """Run one whole step; returns its metrics, or None if interrupted mid-step (`interrupted_by`)."""
        s = self.state
        t0 = time.perf_counter()
        examples = self.stream.take(s.data_position, self.plan.prompts_per_step)
        r = self.rollout(examples, jax.random.fold_in(self.base_key, s.step))
        t1 = time.perf_counter()
        train_metrics = self.train_on(r)
        if train_metrics is None:
            return None
        jax.block_until_ready(self.state.params)
        t2 = time.perf_counter()
        s.step += 1
        s.data_position += self.plan.prompts_per_step
        metrics = {
            **r.metrics(),
            **train_metrics,
            "timing/rollout_s": t1 - t0,
            "timing/train_s": t2 - t1,
            "timing/step_s": t2 - t0,
            "throughput/tokens_per_s": r.total_tokens() / max(t2 - t0, 1e-9),
        }
        self.hooks.on_samples(s.step, r.samples(self.config.train.samples_per_step, self.plan.num_generations))
        return metrics

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> TrainResult:
        cfg = self.config
        resumed = self.restore_latest()
        if resumed is not None:
            self.hooks.on_resume(resumed)
            self.hooks.on_log(f"resumed from checkpoint at step {resumed} (data position {self.state.data_position})")
        self.hooks.on_start(RunInfo(
            config=cfg.to_dict(), plan_text=self.plan.describe(), start_step=self.state.step,
            max_steps=cfg.train.max_steps, run_dir=self.run_dir, param_count=param_count(self.state.params),
        ))
        status = "succeeded"
        last_saved = resumed
        while self.state.step < cfg.train.max_steps:
            action = self.control.poll()
            if action is Action.CONTINUE:
                metrics = self.step()
                if metrics is None:  # interrupted mid-step; the step's updates, if any, are not saved
                    action = self.interrupted_by or Action.STOP
            if action is Action.STOP:
                status = "cancelled"
                break
            if action is Action.PAUSE:
                if last_saved != self.state.step:
                    self.save_checkpoint()
                status = "paused"
                break
            step = self.state.step
            if cfg.eval.every_steps and (step % cfg.eval.every_steps == 0 or step == cfg.train.max_steps):
                metrics.update(self.evaluate())
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


def train(config: ExperimentConfig, run_dir: str, hooks: Hooks | None = None, control: Control | None = None) -> TrainResult:
    """Train under `config`, resuming from the newest checkpoint in `run_dir/checkpoints` if any.
    With `async.enabled` the asynchronous loop (`trainers.async_trainer`) runs instead."""
    if config.async_.enabled:
        from trainers.async_trainer import AsyncGRPOTrainer

        return AsyncGRPOTrainer(config, run_dir, hooks, control).run()
    return GRPOTrainer(config, run_dir, hooks, control).run()


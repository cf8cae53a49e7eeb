"""Where a training step's rollout comes from: the `RolloutSource` interface, what a source is built
from (`RolloutContext`), and the synchronous source.

The trainer (`trainers.loop.trainer.GRPOTrainer`) owns the weights and the loop; per step s it asks its
source for the step's `Rollout` (`next(s)`), trains on it, and hands the new weights (version s + 1)
back (`publish`). The synchronous source generates the step's rollout when asked, with the weights
just published; the asynchronous one (`trainers.rollout.async_source.AsyncRolloutSource`) takes it from a
replay buffer that a collector thread fills ahead of training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import jax

from trainers.algo.importance import ImportanceConfig
from trainers.config import ExperimentConfig
from trainers.data.prompt_selection import PromptHistory, SkipRule, Walk, group_outcome, history_walk
from trainers.data.prompt_stream import PromptStream
from trainers.rollout.batch import Rollout
from trainers.rollout.collect import collect_rollout
from trainers.rollout.dynamic_sampling import (
    InformativeGate,
    carry_state,
    fill_informative,
    groups_from_carry_state,
    is_informative,
)
from trainers.rollout.spec import RolloutSpec
from trainers.step.hooks import Action, Control, Hooks
from trainers.step.placement import Placement
from trainers.step.plan import BatchPlan


@dataclasses.dataclass(frozen=True)
class RolloutContext:
    """What a rollout source is built from: the run's pieces that the trainer also uses."""

    config: ExperimentConfig
    plan: BatchPlan
    spec: RolloutSpec
    graphdef: Any
    stream: PromptStream
    base_key: jax.Array  # key(seed); step s samples with fold_in(base_key, s)
    placement: Placement
    hooks: Hooks
    control: Control


class RolloutSource(Protocol):
    """A step's rollouts, for the trainer's loop.

    importance: the correction the trainer's update applies to this source's rollouts (pi_old /
      pi_gen, `make_update_fn(importance=...)`), or None when every rollout is sampled by the
      weights that train it.
    interrupted_by: why the last `next` returned None (Action.STOP or Action.PAUSE).
    """

    importance: ImportanceConfig | None
    interrupted_by: Action | None

    def start(self, params: Any, step: int, data_position: int | None = None) -> None:
        """Begin before step `step` (0, or a resumed checkpoint's step) at `data_position` (the prompts
        consumed before it; None = plan.data_position_at(step)), with the trainer's weights
        `params` (version `step`). `params` (here and in `publish`) are the trainer's own buffers,
        valid until its next update, which donates them: a source that keeps weights longer (async)
        copies them (`Placement.rollout_copy`)."""

    def next(self, step: int) -> Rollout | None:
        """Step `step`'s rollout: `prompts_per_step` prompt groups from the source's data position on,
        G completions each; None if interrupted (`interrupted_by`). The position then moves by the
        rollout's `prompts_consumed` (more than prompts_per_step with dynamic sampling)."""

    def publish(self, params: Any, version: int) -> None:
        """The trainer's new weights after step version - 1 (so of version `version`)."""

    def saved_state(self) -> dict[str, Any]:
        """What a checkpoint must hold, besides the data position, for `restore_state` to resume the
        source exactly (JSON values; {} when nothing: the data position is enough)."""

    def restore_state(self, state: dict[str, Any]) -> None:
        """Take back `saved_state` from a checkpoint, before `start`."""

    def metrics(self) -> dict[str, float]:
        """The source's own metrics about the rollout `next` returned last (async/*, dynamic/*); they
        override the rollout's own of the same name (dynamic sampling's reward/mean and accuracy
        cover every completion sampled, not only the groups kept)."""

    def stop(self) -> None:
        """End the source (threads joined); called once when the run ends, however it ends."""


SourceFactory = Callable[[RolloutContext], RolloutSource]


class SyncRolloutSource:
    """Generates step s's rollout when asked, with the weights published last (the trainer's own,
    version s: on-policy, so no importance correction). With rollout.dynamic_sampling, flat groups
    are dropped and replaced without rounds (`dynamic_sampling.fill_informative`); the informative
    groups generated past the step's need are carried to the next step (`carried`, in checkpoints),
    which weighs them by pi_old / pi_gen as `async.importance_sampling` says (`importance`; rows
    sampled by the step's own weights weigh exactly 1).

    With rollout.prompt_selection, the step's prompts are walked from its data position on, skipping
    those whose flat streak says so (`prompt_selection.walk`); the position moves past the last prompt
    generated, skipped ones included. Each generated group's outcome goes to the per-prompt history
    (`history`, in checkpoints) once the step is trained (`publish`), so a step interrupted before
    its update leaves the history as the checkpoint of the step before holds it."""

    interrupted_by = None

    def __init__(self, context: RolloutContext):
        self.context = context
        self.params: Any = None
        self.version = -1
        self.position = 0
        self.carried: list[Rollout] = []
        self._metrics: dict[str, float] = {}
        self.importance = None
        r = context.config.rollout
        self.history: PromptHistory | None = PromptHistory() if r.prompt_selection else None
        self.skip_rule = SkipRule(r.prompt_selection_base_skip_probability, r.prompt_selection_max_skip_probability)
        self._pending_outcomes: list[tuple[int, str]] = []  # the step's groups, recorded on publish
        if context.config.rollout.dynamic_sampling:
            i = context.config.async_.importance_sampling
            self.importance = ImportanceConfig(i.level, i.mode, i.max, i.min)

    def start(self, params: Any, step: int, data_position: int | None = None) -> None:
        self.params, self.version = params, step
        self.position = self.context.plan.data_position_at(step) if data_position is None else data_position

    def next(self, step: int) -> Rollout:
        c = self.context
        if step != self.version:
            raise ValueError(f"step {step} needs weights of version {step}; the newest published are {self.version}")
        params = c.placement.generation_weights(self.params)  # cast once per step, not per decode step
        step_key = jax.random.fold_in(c.base_key, step)
        prompts = c.plan.prompts_per_step

        r = c.config.rollout
        count = prompts * (1 + r.dynamic_sampling_max_rounds) if r.dynamic_sampling else prompts
        chosen = self._walk(count)
        generated: list[Rollout] = []

        def generate(gate: InformativeGate | None = None) -> Rollout:
            examples = c.stream.take(self.position, count) if chosen is None else c.stream.examples(chosen.indices)
            rollout = collect_rollout(
                c.graphdef,
                lambda: (params, self.version),
                examples,
                c.spec,
                step_key,
                mesh=c.placement.train_mesh,
                gate=gate,
            )
            generated.append(rollout)
            return rollout

        if r.dynamic_sampling:
            rollout, self.carried, self._metrics = fill_informative(
                generate,
                self.carried,
                prompts,
                count,
                c.spec.sampling.pad_id,
                lambda step_rollout: step_rollout.with_prompt_width(c.spec.prompt_bucket_tokens),
                r.dynamic_sampling_metric,
            )
        else:
            rollout = generate()
        if chosen is not None:
            self._select(chosen, rollout, generated[0] if generated else None)
        self.position += rollout.prompts_consumed
        self.params = None  # the next update donates these buffers
        return rollout

    def _walk(self, count: int) -> Walk | None:
        """The step's candidates under prompt selection (None without it): `count` prompts kept from
        the data position on; a step skips at most one epoch's worth of prompts."""
        if self.history is None:
            return None
        c = self.context
        return history_walk(
            self.position, count, c.stream.indices, self.history, self.skip_rule, c.config.seed, len(c.stream)
        )

    def _select(self, chosen: Walk, rollout: Rollout, generated: Rollout | None) -> None:
        """Moves the step's data position over the prompts it skipped (`rollout.prompts_consumed`,
        as dynamic/prompts_consumed), notes the outcome of every group generated (`generated`: the
        candidates' rollout, None when the step generated nothing) for the history, and sets the
        selection/* metrics."""
        c = self.context
        used = rollout.prompts_consumed  # candidates generated: every one of them, or those the gate admitted
        metric = c.config.rollout.dynamic_sampling_metric
        groups = [] if generated is None else [generated.group(j) for j in range(generated.prompts)]
        outcomes = [group_outcome(is_informative(group, metric), group.correct) for group in groups]
        self._pending_outcomes = list(zip(chosen.indices[: len(groups)], outcomes, strict=True))
        rollout.prompts_consumed = chosen.consumed(used)
        skipped = chosen.skipped(used)
        self._metrics = {
            **self._metrics,
            "selection/prompts_skipped": float(skipped),
            "selection/completions_saved": float(skipped * c.plan.num_generations),
            "selection/flat_group_fraction": sum(o != "mixed" for o in outcomes) / len(outcomes) if outcomes else 0.0,
        }
        if "dynamic/prompts_consumed" in self._metrics:
            self._metrics["dynamic/prompts_consumed"] = float(rollout.prompts_consumed)

    def publish(self, params: Any, version: int) -> None:
        self.params, self.version = params, version
        if self.history is not None:  # the step is trained: its groups join the history
            for index, outcome in self._pending_outcomes:
                self.history.record(index, outcome)
            self._pending_outcomes = []

    def saved_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"carried_groups": carry_state(self.carried)} if self.carried else {}
        if self.history is not None:
            state["prompt_history"] = self.history.state()
        return state

    def restore_state(self, state: dict[str, Any]) -> None:
        self.carried = groups_from_carry_state(state.get("carried_groups", []))
        if self.history is not None:
            self.history = PromptHistory.from_state(state.get("prompt_history", {}))

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def stop(self) -> None:
        self.params = None

"""The seam between the trainer and whoever runs it (CLI, web platform).

The trainer reports through a `Hooks` object and asks a `Control` object between steps (and
between optimizer updates) whether to go on. The CLI implements hooks with files and a progress
bar (`trainers.loop.run_files`); the platform implements them by writing to its database. Neither side
reaches into the other's internals.

A run of several processes (`trainers.parallel.distributed`): every process trains, only process 0
calls the hooks (the trainer gives the others silent ones), and every poll of the control is one
decision for all processes (`ProcessSharedControl`), so a cancel or pause stops all of them at the
same step boundary.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from trainers.step.phases import phase


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a run is about to do, given to `Hooks.on_start`."""

    config: dict[str, Any]  # the validated config as plain data
    plan_text: str  # BatchPlan.describe()
    start_step: int  # 0, or the checkpoint step a resume starts after
    max_steps: int
    run_dir: str
    param_count: int


@dataclasses.dataclass(frozen=True)
class TrainResult:
    status: str  # "succeeded", "paused", or a stop's `Control.stopped_as()`: "cancelled" or "requeued"
    final_step: int
    params_digest: str
    metrics: dict[str, float]  # the last step's metrics
    run_dir: str


class Hooks:
    """Receives everything a run reports. Every method is optional (these defaults do nothing)."""

    def on_start(self, info: RunInfo) -> None: ...

    def on_resume(self, step: int) -> None:
        """Resuming after checkpoint `step`: anything recorded for later steps is to be replaced."""

    def on_step(self, step: int, metrics: dict[str, float]) -> None: ...

    def on_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        """A few rollout samples: prompt, completion, answer, reward, advantage."""

    def on_checkpoint(self, step: int, path: str, size_bytes: int, metrics: dict[str, float]) -> None: ...

    def on_log(self, message: str, level: str = "info") -> None: ...

    def on_end(self, result: TrainResult) -> None: ...


class MultiHooks(Hooks):
    """Forward every call to several hooks, in order."""

    def __init__(self, *hooks: Hooks):
        self.hooks = hooks

    def on_start(self, info: RunInfo) -> None:
        for h in self.hooks:
            h.on_start(info)

    def on_resume(self, step: int) -> None:
        for h in self.hooks:
            h.on_resume(step)

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        for h in self.hooks:
            h.on_step(step, metrics)

    def on_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for h in self.hooks:
            h.on_samples(step, samples)

    def on_checkpoint(self, step: int, path: str, size_bytes: int, metrics: dict[str, float]) -> None:
        for h in self.hooks:
            h.on_checkpoint(step, path, size_bytes, metrics)

    def on_log(self, message: str, level: str = "info") -> None:
        for h in self.hooks:
            h.on_log(message, level)

    def on_end(self, result: TrainResult) -> None:
        for h in self.hooks:
            h.on_end(result)


class Action(enum.Enum):
    CONTINUE = "continue"
    PAUSE = "pause"  # checkpoint, then return with status "paused"
    STOP = "stop"  # return with status `Control.stopped_as()`; no checkpoint of a partial step


class Control:
    """Asked between steps and between optimizer updates. The default always continues."""

    def poll(self) -> Action:
        return Action.CONTINUE

    def stopped_as(self) -> str:
        """The status a STOP ends the run with: "cancelled" (someone asked it to stop), unless the
        control knows the run goes on elsewhere: the platform's says "requeued" once another attempt
        has taken the run over (runner.control)."""
        return "cancelled"


_URGENCY = (Action.CONTINUE, Action.PAUSE, Action.STOP)  # a later one wins over an earlier one


def most_urgent(actions: list[Action]) -> Action:
    """STOP over PAUSE over CONTINUE: the decision of several processes' requests."""
    return max(actions, key=_URGENCY.index, default=Action.CONTINUE)


class ProcessSharedControl(Control):
    """One decision for all processes of a run: each `poll()` asks this process's own control, and
    every process gets the most urgent answer of all of them (`most_urgent`; usually only process 0's
    control reports anything: the platform's, or the CLI's signals).

    Every poll is a collective (an all-gather of one integer per process), so all processes must
    poll at the same points of the loop, which the trainer does: before each step and between
    optimizer updates (a synchronous source polls nowhere else). Then every process stops or pauses
    at the same step boundary (or update), and a pause's checkpoint is written by all of them.
    """

    def __init__(self, inner: Control):
        self.inner = inner

    def poll(self) -> Action:
        # lazy: keeps this module JAX-free (`import trainers` exports the hooks)
        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        own = np.int32(_URGENCY.index(self.inner.poll()))
        with phase("gang", f"agreeing on the control with {jax.process_count()} processes"):
            everyone = np.asarray(multihost_utils.process_allgather(own)).reshape(-1)
        return most_urgent([_URGENCY[int(i)] for i in everyone])

    def stopped_as(self) -> str:
        return self.inner.stopped_as()


def shared_control(control: Control) -> Control:
    """`control` as the one decision of all processes (`ProcessSharedControl`); itself in a run of
    one process."""
    # lazy: keeps this module JAX-free (`import trainers` exports the hooks)
    import jax

    if jax.process_count() == 1 or isinstance(control, ProcessSharedControl):
        return control
    return ProcessSharedControl(control)

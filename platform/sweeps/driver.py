"""Optuna through its ask-and-tell interface, with the platform's database as the record.

Nothing of Optuna's is stored: for every decision an in-memory study is built from the trials as
plain records (`TrialRecord`: params, state, value, the metric by step, the attributes a halving
pruner keeps), then asked for the next trial's params (`ask_params`) or whether a running trial
should stop (`should_prune`). Samplers are seeded from the sweep's seed and the trial's number, so
equal histories give equal answers. No Django here: sweeps.scheduler turns rows into records.

The samplers and pruners a sweep may name are registered here (`trainers.registry`), one decorated
function each; the Sweep model's choices are their names.
  SAMPLERS  fn(spec, number) -> the Optuna sampler asking for trial `number` (None: the grid)
  PRUNERS   fn(spec) -> the Optuna pruner; `rungs=True`: it judges a trial at its rungs' steps
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import TrialState, create_trial

from trainers.registry import Registry

optuna.logging.set_verbosity(optuna.logging.WARNING)

COMPLETE, PRUNED, FAIL, RUNNING = "complete", "pruned", "fail", "running"
_STATES = {COMPLETE: TrialState.COMPLETE, PRUNED: TrialState.PRUNED, FAIL: TrialState.FAIL, RUNNING: TrialState.RUNNING}
HALVING_REDUCTION_FACTOR = 3
SEED_STRIDE = 100_003  # sweep seeds s and s+1 must not give shifted copies of one sequence

SAMPLERS = Registry("sweep sampler")
PRUNERS = Registry("sweep pruner")


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One trial as Optuna needs it. `intermediate`: {step: metric value} (finite values only)."""

    number: int
    params: dict[str, Any]
    state: str  # COMPLETE | PRUNED | FAIL | RUNNING
    value: float | None = None  # the objective of a COMPLETE trial
    intermediate: dict[int, float] = dataclasses.field(default_factory=dict)
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class StudySpec:
    """What a sweep tells Optuna: its name (Hyperband assigns brackets from it), direction,
    sampler and pruner names and the pruner's settings."""

    name: str
    direction: str  # "maximize" | "minimize"
    sampler: str  # a SAMPLERS name
    pruner: str  # a PRUNERS name
    seed: int = 0
    max_trials: int = 10
    startup_trials: int = 2
    warmup_steps: int = 1
    max_steps: int = 100


def trial_seed(seed: int, number: int) -> int:
    """The sampler's seed when asking for trial `number` (the study is rebuilt for every ask, so
    one seed for all would repeat the same draw)."""
    return (seed * SEED_STRIDE + number) % 2**32


@SAMPLERS.register("grid")
def grid_sampler(spec: StudySpec, number: int) -> None:
    """The grid's points in order (sweeps.space.grid_point): trial n takes point n; Optuna samples nothing."""
    return None


@SAMPLERS.register("random")
def random_sampler(spec: StudySpec, number: int) -> optuna.samplers.BaseSampler:
    """Optuna's RandomSampler."""
    return optuna.samplers.RandomSampler(seed=trial_seed(spec.seed, number))


@SAMPLERS.register("tpe")
def tpe_sampler(spec: StudySpec, number: int) -> optuna.samplers.BaseSampler:
    """Optuna's TPESampler: a third of the trials (2 to 10) are random before TPE models the history."""
    startup = max(2, min(10, spec.max_trials // 3))
    return optuna.samplers.TPESampler(seed=trial_seed(spec.seed, number), n_startup_trials=startup, constant_liar=True)


@PRUNERS.register("none")
def no_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """Every trial runs to the end."""
    return optuna.pruners.NopPruner()


@PRUNERS.register("median")
def median_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """Optuna's MedianPruner: stop a trial below the median of the others at its step."""
    return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials, n_warmup_steps=spec.warmup_steps)


@PRUNERS.register("successive_halving", rungs=True)
def successive_halving_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """Optuna's SuccessiveHalvingPruner, the first rung at warmup_steps, each next one 3x later."""
    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=max(1, spec.warmup_steps), reduction_factor=HALVING_REDUCTION_FACTOR
    )


@PRUNERS.register("hyperband", rungs=True)
def hyperband_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    """Optuna's HyperbandPruner: successive halving in brackets, from warmup_steps to the run's max_steps."""
    min_resource = max(1, spec.warmup_steps)
    return optuna.pruners.HyperbandPruner(
        min_resource=min_resource,
        max_resource=max(min_resource, spec.max_steps),
        reduction_factor=HALVING_REDUCTION_FACTOR,
    )


def make_sampler(spec: StudySpec, number: int) -> optuna.samplers.BaseSampler | None:
    return SAMPLERS[spec.sampler](spec, number)


def make_pruner(spec: StudySpec) -> optuna.pruners.BasePruner:
    return PRUNERS[spec.pruner](spec)


def _frozen(record: TrialRecord, distributions: dict[str, BaseDistribution]) -> optuna.trial.FrozenTrial:
    state = _STATES[record.state]
    value = record.value
    if state == TrialState.COMPLETE and (value is None or not math.isfinite(value)):
        state, value = TrialState.FAIL, None  # a trial that never reported its metric
    params = {k: v for k, v in record.params.items() if k in distributions}
    return create_trial(
        state=state,
        value=value if state == TrialState.COMPLETE else None,
        params=params,
        distributions={k: distributions[k] for k in params},
        intermediate_values={int(s): float(v) for s, v in record.intermediate.items() if math.isfinite(v)},
        system_attrs=dict(record.attrs),
    )


def build_study(
    spec: StudySpec, distributions: dict[str, BaseDistribution], records: list[TrialRecord], number: int = 0
) -> optuna.Study:
    """An in-memory study holding `records` in number order (Optuna numbers them 0, 1, ...: the
    records' own numbers must be 0..n-1 for Hyperband's brackets to match; gaps are filled with
    failed trials). `number` seeds the sampler."""
    study = optuna.create_study(
        study_name=spec.name,
        direction=spec.direction,
        sampler=make_sampler(spec, number),
        pruner=make_pruner(spec),
    )
    by_number = {r.number: r for r in records}
    for n in range(max(by_number, default=-1) + 1):
        record = by_number.get(n) or TrialRecord(number=n, params={}, state=FAIL)
        study.add_trial(_frozen(record, distributions))
    return study


def ask_params(
    spec: StudySpec, distributions: dict[str, BaseDistribution], records: list[TrialRecord]
) -> dict[str, Any]:
    """The params of the next trial (number = len(records)), sampled with the history as context."""
    number = max((r.number for r in records), default=-1) + 1
    study = build_study(spec, distributions, records, number=number)
    trial = study.ask(distributions)
    return dict(trial.params)


def rung_steps(spec: StudySpec, last_step: int) -> list[int]:
    """The steps up to `last_step` where a halving pruner (successive halving, or any of
    Hyperband's brackets) may have a rung: min_resource x 3^k."""
    step, steps = max(1, spec.warmup_steps), []
    while step <= last_step:
        steps.append(step)
        step *= HALVING_REDUCTION_FACTOR
    return steps


def value_at(intermediate: dict[int, float], step: int) -> float:
    """The trial's value at `step`: its last report at or before it, else its first after it."""
    before = [s for s in intermediate if s <= step]
    return intermediate[max(before)] if before else intermediate[min(intermediate)]


def should_prune(
    spec: StudySpec, distributions: dict[str, BaseDistribution], records: list[TrialRecord], running: TrialRecord
) -> tuple[bool, dict[str, Any]]:
    """Whether the pruner stops `running` (one of `records`, state RUNNING) by its reports so far,
    and its attributes after the decision (a halving pruner records the rungs it passed: keep them
    for the next rebuild).

    The median pruner compares the last reported step with the others' at that step. A halving
    pruner (and Hyperband) judges each rung at the rung's own step, whenever the trial is first
    seen past it: the pruner is shown the trial as it was at each rung step in turn (its value at
    that step, `value_at`), so equal curves get equal decisions however late a tick saw them."""
    if spec.pruner == "none" or not running.intermediate:
        return False, dict(running.attrs)
    study = build_study(spec, distributions, records)

    def frozen() -> optuna.trial.FrozenTrial:
        return next(t for t in study.get_trials(deepcopy=False) if t.number == running.number)

    finite = {int(s): float(v) for s, v in running.intermediate.items() if math.isfinite(v)}
    if not PRUNERS.get(spec.pruner).meta.get("rungs") or not finite:
        pruned = study.pruner.prune(study, frozen())
        return bool(pruned), dict(frozen().system_attrs)
    for step in rung_steps(spec, max(finite)):
        seen = copy.copy(frozen())
        seen.intermediate_values = {**{s: v for s, v in finite.items() if s < step}, step: value_at(finite, step)}
        if study.pruner.prune(study, seen):
            return True, dict(frozen().system_attrs)
    return False, dict(frozen().system_attrs)

"""Advancing running sweeps: `tick()` (settings.PLATFORM_PERIODIC_JOBS, run by the scheduler
process, runner.beat) advances each one, and a run status change of a trial advances its sweep
once that change commits (sweeps.receivers), so the next trial starts without waiting for a tick.

One advance, in one transaction holding the sweep's row (two processes never launch the same trial):
1. each trial takes its run's status and the best value of the sweep's metric so far;
2. the pruner (sweeps.driver, fed the metric's points by step) stops running trials it judges weak:
   runner.services.request_prune, so the run ends as `pruned` with its checkpoints and metrics.
   A trial is also judged as soon as its trainer writes the sweep's metric (`judge_trial`, from
   experiments.signals.metrics_reported in the trainer's process, sweeps.receivers), so it stops
   within a step of the decision; the tick is the fallback;
3. trials start up to max_concurrent_trials and max_trials: params from the grid or Optuna, set on
   the sweep's base config, validated through experiments.configs (invalid: the trial is `failed`
   with the message and the sweep goes on), launched by runner.services.launch_run, the user's own
   launch path, so per-user caps apply (refused: the trial waits, retried on the next advance, and
   the sweep's note says why);
4. a sweep whose trials have all ended is `finished`.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from experiments import configs
from experiments.models import MetricPoint, Run, RunStatus, Tag
from runner import services as run_services
from runner.limits import limits_for, queued_refusal
from sweeps import driver
from sweeps import space as spaces
from sweeps.models import TRIAL_ENDED, Direction, Sampler, Sweep, SweepStatus, Trial, TrialStatus

log = logging.getLogger(__name__)

S = RunStatus
ACTIVE_RUN = {S.RUNNING, S.PAUSING}  # reporting steps: what a pruner judges
OPTUNA_STATE = {S.SUCCEEDED: driver.COMPLETE, S.PRUNED: driver.PRUNED, S.FAILED: driver.FAIL, S.CANCELLED: driver.FAIL}


def tick() -> None:
    """Advance every running sweep (a failure in one is logged; the others go on). An owner found
    at their queued-run cap is not counted again for their other sweeps in this tick."""
    capped: dict[int, str] = {}
    for pk in Sweep.objects.filter(status=SweepStatus.RUNNING).values_list("pk", flat=True):
        advance_quietly(pk, capped)


def advance_quietly(sweep_id: int, capped: dict[int, str] | None = None) -> None:
    """`advance`, logging instead of raising (the scheduler and signal receivers must go on)."""
    try:
        advance(sweep_id, capped)
    except Exception:  # noqa: BLE001 - the next tick retries
        log.exception("advancing sweep %s failed", sweep_id)


def best(points: list[tuple[int, float]], direction: str) -> tuple[float, int] | tuple[None, None]:
    """The best finite (value, step) of `points` [(step, value)] in `direction` (the earliest step
    on a tie); (None, None) when there is none."""
    finite = [(v, s) for s, v in points if v is not None and math.isfinite(v)]
    if not finite:
        return None, None
    sign = 1.0 if direction == Direction.MAXIMIZE else -1.0
    value, step = max(finite, key=lambda vs: (sign * vs[0], -vs[1]))
    return value, step


def study_spec(sweep: Sweep) -> driver.StudySpec:
    return driver.StudySpec(
        name=f"sweep-{sweep.pk}",
        direction=sweep.direction,
        sampler=sweep.sampler,
        pruner=sweep.pruner,
        seed=sweep.seed,
        max_trials=sweep.max_trials,
        startup_trials=sweep.pruner_startup_trials,
        warmup_steps=sweep.pruner_warmup_steps,
        max_steps=int(sweep.base_config.get("train", {}).get("max_steps", 1)),
    )


def _points(sweep: Sweep, trials: list[Trial]) -> dict[int, list[tuple[int, float]]]:
    """run id -> [(step, value)] of the sweep's metric, by step (one query)."""
    run_ids = [t.run_id for t in trials if t.run_id is not None]
    out: dict[int, list[tuple[int, float]]] = defaultdict(list)
    if not run_ids:
        return out
    rows = (
        MetricPoint.objects.filter(run_id__in=run_ids, name=sweep.metric)
        .order_by("run_id", "step")
        .values_list("run_id", "step", "value")
    )
    for run_id, step, value in rows:
        out[run_id].append((step, float("nan") if value is None else value))
    return out


def record(trial: Trial, points: list[tuple[int, float]]) -> driver.TrialRecord:
    """A trial as the driver sees it: finished runs complete/pruned/failed, anything else running."""
    state = OPTUNA_STATE.get(trial.status, driver.RUNNING)
    return driver.TrialRecord(
        number=trial.number,
        params=trial.params,
        state=state,
        value=trial.value,
        intermediate={s: v for s, v in points},
        attrs=trial.optuna_attrs or {},
    )


def _sync(sweep: Sweep, trials: list[Trial], points: dict[int, list]) -> None:
    """Each trial with a run takes its status and best metric value; one whose run was deleted ends
    as cancelled (or the sweep would wait for it forever)."""
    for trial in trials:
        if trial.run is None:
            if trial.status not in (TrialStatus.WAITING, *TRIAL_ENDED):  # its run was deleted
                trial.status, trial.error = S.CANCELLED, "its run was deleted"
                trial.save(update_fields=["status", "error"])
            continue
        value, step = best(points.get(trial.run_id, []), sweep.direction)
        if (trial.status, trial.value, trial.value_step) != (trial.run.status, value, step):
            trial.status, trial.value, trial.value_step = trial.run.status, value, step
            trial.save(update_fields=["status", "value", "value_step"])


def _prune(sweep: Sweep, trials: list[Trial], points: dict[int, list], only_run_id: int | None = None) -> None:
    """Stop the running trials the pruner judges weak (`only_run_id`: judge that trial's run alone)."""
    if sweep.pruner == "none":
        return
    running = [
        t
        for t in trials
        if t.run is not None
        and t.run.status in ACTIVE_RUN
        and t.run.stop_as != S.PRUNED
        and only_run_id in (None, t.run_id)
    ]
    if not running:
        return
    spec = study_spec(sweep)
    distributions = spaces.distributions(sweep.space)
    records = [record(t, points.get(t.run_id, [])) for t in trials]
    for trial in running:
        this = next(r for r in records if r.number == trial.number)
        prune, attrs = driver.should_prune(spec, distributions, records, this)
        if attrs != (trial.optuna_attrs or {}):
            trial.optuna_attrs = attrs
            trial.save(update_fields=["optuna_attrs"])
        if prune:
            step = this.intermediate and max(this.intermediate)
            trial.run.add_event(f"pruned by sweep {sweep.name!r} ({sweep.pruner}) at step {step}", kind="status")
            run_services.request_prune(trial.run)
            trial.run.refresh_from_db(fields=["status", "stop_as"])
            trial.status = trial.run.status
            trial.save(update_fields=["status"])


def next_params(sweep: Sweep, trials: list[Trial], points: dict[int, list]) -> dict:
    """The params of trial number len(trials): the grid's next point, or Optuna's answer."""
    number = len(trials)
    if sweep.sampler == Sampler.GRID:
        return spaces.grid_point(sweep.space, number)
    records = [record(t, points.get(t.run_id, [])) for t in trials]
    return driver.ask_params(study_spec(sweep), spaces.distributions(sweep.space), records)


def _launch(sweep: Sweep, trial: Trial) -> bool:
    """Start `trial`'s run. False when the launch was refused (the trial waits; the note says why)."""
    experiment = sweep.experiment
    try:
        config = configs.validated(spaces.with_params(sweep.base_config, trial.params), experiment.owner)
    except configs.ConfigError as exc:
        trial.status = S.FAILED
        trial.error = "the trial's config is invalid: " + "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        trial.save(update_fields=["status", "error"])
        return True
    try:
        with transaction.atomic():
            run = run_services.launch_run(experiment, config=config)
            run.name = f"{sweep.name} #{trial.number}"[:120]
            run.save(update_fields=["name"])
            tag, _ = Tag.objects.get_or_create(name=sweep.name)
            run.tags.add(tag)
            trial.run, trial.status, trial.error = run, run.status, ""
            trial.save(update_fields=["run", "status", "error"])
    except run_services.LaunchRefused as exc:
        trial.error = f"waiting: {exc.message}"
        trial.save(update_fields=["error"])
        sweep.note = f"trial #{trial.number} waits: {exc.message} (retried every few seconds)"
        sweep.save(update_fields=["note"])
        return False
    if sweep.note:
        sweep.note = ""
        sweep.save(update_fields=["note"])
    return True


def _cap_wait(sweep: Sweep, capped: dict[int, str] | None = None) -> str | None:
    """Why the sweep's owner can queue no run now (their queued-run cap, runner.limits), from one
    count: checked before a waiting trial's config is validated again, so a tick over many sweeps
    whose trials wait on the cap costs a few queries per sweep, not a validation and a refused
    launch. `capped` (owner id -> why, one tick's) remembers an owner at the cap."""
    owner = sweep.experiment.owner
    if capped is not None and owner.pk in capped:
        return capped[owner.pk]
    queued = Run.objects.filter(experiment__owner_id=owner.pk, status=S.QUEUED).count()
    wait = queued_refusal(queued, limits_for(owner).max_queued_runs)
    if wait is not None and capped is not None:
        capped[owner.pk] = wait
    return wait


def _start_trials(
    sweep: Sweep, trials: list[Trial], points: dict[int, list], capped: dict[int, str] | None = None
) -> None:
    def active() -> int:
        return sum(1 for t in trials if not t.ended)

    waiting = [t for t in trials if t.status == TrialStatus.WAITING]
    if waiting or (len(trials) < sweep.max_trials and active() < sweep.max_concurrent_trials):
        wait = _cap_wait(sweep, capped)
        if wait is not None:  # no launch can pass: leave the trials as they are, the note says why
            number = waiting[0].number if waiting else len(trials)
            note = f"trial #{number} waits: {wait} (retried every few seconds)"
            if sweep.note != note:
                sweep.note = note
                sweep.save(update_fields=["note"])
            return

    for trial in [t for t in trials if t.status == TrialStatus.WAITING]:  # refused before: first in line
        if not _launch(sweep, trial):
            return
    while len(trials) < sweep.max_trials and active() < sweep.max_concurrent_trials:
        params = next_params(sweep, trials, points)
        trial = Trial.objects.create(sweep=sweep, number=len(trials), params=params)
        trials.append(trial)
        if not _launch(sweep, trial):
            return


def advance(sweep_id: int, capped: dict[int, str] | None = None) -> None:
    """One step of the sweep's life (see the module docstring); a sweep no longer running only
    syncs its trials. `capped`: see `_cap_wait`."""
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().select_related("experiment__owner").filter(pk=sweep_id).first()
        if sweep is None:
            return
        trials = list(sweep.trials.select_related("run").order_by("number"))
        points = _points(sweep, trials)
        _sync(sweep, trials, points)
        if sweep.status != SweepStatus.RUNNING:
            return  # a cancelled sweep's trials still take their runs' final statuses (the receiver)
        _prune(sweep, trials, points)
        _start_trials(sweep, trials, points, capped)
        if len(trials) >= sweep.max_trials and all(t.ended for t in trials):
            sweep.status, sweep.finished_at = SweepStatus.FINISHED, timezone.now()
            sweep.save(update_fields=["status", "finished_at"])


def judge_trial(run_id: int, names) -> None:
    """The trainer of run `run_id` has just written metrics `names` (experiments.signals.
    metrics_reported, in the trainer's process): if the run is a trial of a running sweep with a
    pruner and its metric is among them, judge that trial now, so it stops within a step of the
    decision instead of a tick later. One indexed query for a run that is no trial."""
    sweep_id = (
        Trial.objects.filter(run_id=run_id, sweep__status=SweepStatus.RUNNING, sweep__metric__in=list(names))
        .exclude(sweep__pruner="none")
        .values_list("sweep_id", flat=True)
        .first()
    )
    if sweep_id is None:
        return
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().filter(pk=sweep_id, status=SweepStatus.RUNNING).first()
        if sweep is None:
            return
        trials = list(sweep.trials.select_related("run").order_by("number"))
        points = _points(sweep, trials)
        _sync(sweep, trials, points)
        _prune(sweep, trials, points, only_run_id=run_id)


def is_trial_run(run: Run) -> int | None:
    """The id of the sweep `run` is a trial of (None: not a trial)."""
    return Trial.objects.filter(run_id=run.pk).values_list("sweep_id", flat=True).first()

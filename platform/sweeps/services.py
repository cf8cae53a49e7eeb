"""What users do to sweeps: create one from an experiment (every field checked, the space's
extremes validated against the experiment's config before any trial starts) and cancel one. The
API, the web form and the CLI (through the API) all come here."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from experiments import configs
from experiments.models import Experiment, RunStatus
from experiments.refusals import Refused
from experiments.run_labels import TAG_NAME
from experiments.whole_numbers import NotAWholeNumber, whole_number
from runner import services as run_services
from runner.limits import limits_for
from sweeps import scheduler
from sweeps import space as spaces
from sweeps.models import Direction, Pruner, Sampler, Sweep, SweepStatus, TrialStatus
from trainers.config.metric_names import is_metric_name
from trainers.config.schema import MAX_STEPS

MAX_TRIALS = 1000
MAX_CONCURRENT_TRIALS = 50
MAX_SEED = 2**31 - 1
MAX_PRUNER_STEPS = 1_000_000
FIELDS = (
    "name",
    "space",
    "sampler",
    "pruner",
    "metric",
    "direction",
    "max_trials",
    "max_concurrent_trials",
    "seed",
    "pruner_startup_trials",
    "pruner_warmup_steps",
    "max_steps",
)


class SweepRefused(Refused):
    """A sweep may not start: 429 when its owner already runs PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER."""


def active_sweeps_refusal(running: int, limit: int) -> str | None:
    """Why one more sweep is refused for an owner with `running` sweeps running, or None."""
    if running < limit:
        return None
    return (
        f"you have {running} running sweep{'s' if running != 1 else ''}, the limit is {limit} "
        "(PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER); cancel one or wait for one to finish"
    )


class SweepInputError(ValueError):
    """Input a sweep cannot be made from: `errors` maps each field (`space.<config field>` for the
    space) to what is wrong and the fix."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def _whole(data: dict, name: str, default: int | None, low: int, high: int, errors: dict) -> int | None:
    try:
        value = whole_number(data.get(name), low, high, default=default)
    except NotAWholeNumber:
        value = None
    if value is None:
        errors[name] = f"must be a whole number from {low} to {high}"
    return value


def _choice(data: dict, name: str, choices, default: str, errors: dict) -> str:
    value = data.get(name) or default
    if value not in choices.values:
        errors[name] = f"must be one of {', '.join(choices.values)}"
    return value


def with_max_steps(config: dict[str, Any], steps: int | None) -> dict[str, Any]:
    """The experiment's config with train.max_steps set to `steps` (unchanged for None)."""
    if steps is None or not isinstance(config, dict):
        return config
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    return {**config, "train": {**train, "max_steps": steps}}


def check_input(data: Any, experiment: Experiment) -> dict[str, Any]:
    """The model fields of a new sweep of `experiment` from request data, or SweepInputError naming
    every bad field. The space's fields must exist in the config schema, and each extreme (each
    choice, low and high) must pass config validation when set on the experiment's config."""
    if not isinstance(data, dict):
        raise SweepInputError({"(input)": "must be a JSON object"})
    errors: dict[str, str] = {}
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        errors["(input)"] = f"unknown field(s) {', '.join(map(str, unknown))}; allowed: {', '.join(FIELDS)}"
    name = data.get("name")
    if not isinstance(name, str) or not TAG_NAME.fullmatch(name):
        errors["name"] = "1-64 letters, digits or . _ : / - (it also tags the trial runs)"
    metric = data.get("metric")
    if not isinstance(metric, str) or not is_metric_name(metric):
        errors["metric"] = "a metric the trainer reports, e.g. reward/mean, accuracy, eval/accuracy"
    fields = {
        "name": name,
        "metric": metric,
        "sampler": _choice(data, "sampler", Sampler, Sampler.TPE, errors),
        "pruner": _choice(data, "pruner", Pruner, Pruner.NONE, errors),
        "direction": _choice(data, "direction", Direction, Direction.MAXIMIZE, errors),
        "max_trials": _whole(data, "max_trials", None, 1, MAX_TRIALS, errors),
        "max_concurrent_trials": _whole(data, "max_concurrent_trials", 2, 1, MAX_CONCURRENT_TRIALS, errors),
        "seed": _whole(data, "seed", 0, 0, MAX_SEED, errors),
        "pruner_startup_trials": _whole(data, "pruner_startup_trials", 2, 0, MAX_TRIALS, errors),
        "pruner_warmup_steps": _whole(data, "pruner_warmup_steps", 1, 0, MAX_PRUNER_STEPS, errors),
    }
    # steps per trial: train.max_steps of the base config (absent or null: the experiment's own)
    steps = None if data.get("max_steps") in (None, "") else _whole(data, "max_steps", None, 1, MAX_STEPS, errors)
    try:
        space = spaces.check_shape(data.get("space"))
        if fields["sampler"] == Sampler.GRID and fields["max_trials"] is not None:
            spaces.check_grid(space, fields["max_trials"])
        base = configs.validated(with_max_steps(experiment.config, steps), experiment.owner)
        spaces.check_extremes(space, base, lambda raw: configs.parse(raw, experiment.owner))
        fields.update(space=space, base_config=base)
    except spaces.SpaceError as exc:
        errors.update(exc.errors)
    except configs.ConfigError as exc:
        errors.update(
            {f"config.{k}": f"{v} (the experiment's config; fix it before sweeping)" for k, v in exc.as_dict().items()}
        )
    if errors:
        raise SweepInputError(errors)
    return fields


def create_sweep(experiment: Experiment, data: Any) -> Sweep:
    """A running sweep of `experiment` (SweepInputError for bad input, SweepRefused (429) when its
    owner runs PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER sweeps already: nothing is created). Its
    first trials start on the scheduler's next tick (sweeps.scheduler), or at once here."""
    fields = check_input(data, experiment)
    owner = experiment.owner
    with transaction.atomic():  # the owner's row is locked: two creates at once take turns
        get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
        running = Sweep.objects.filter(experiment__owner_id=owner.pk, status=SweepStatus.RUNNING).count()
        refusal = active_sweeps_refusal(running, limits_for(owner).max_active_sweeps)
        if refusal:
            raise SweepRefused(429, refusal)
        sweep = Sweep.objects.create(experiment=experiment, **fields)
    scheduler.advance_quietly(sweep.pk)
    return sweep


def cancel_sweep(sweep: Sweep) -> bool:
    """Stop a running sweep: no new trials; its queued and running trial runs are cancelled,
    waiting trials too. False when it was not running."""
    with transaction.atomic():
        won = (
            Sweep.objects.filter(pk=sweep.pk, status=SweepStatus.RUNNING).update(
                status=SweepStatus.CANCELLED, finished_at=timezone.now(), note="cancelled by a user"
            )
            == 1
        )
        if not won:
            return False
        for trial in sweep.trials.select_related("run__experiment"):
            if trial.run is not None and trial.run.status not in (
                RunStatus.SUCCEEDED,
                RunStatus.FAILED,
                RunStatus.CANCELLED,
                RunStatus.PRUNED,
            ):
                run_services.request_cancel(trial.run)
                trial.run.refresh_from_db(fields=["status"])
                trial.status = trial.run.status
                trial.save(update_fields=["status"])
            elif trial.status == TrialStatus.WAITING:
                trial.status = RunStatus.CANCELLED
                trial.save(update_fields=["status"])
    sweep.refresh_from_db()
    return True

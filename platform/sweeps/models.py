"""A Sweep searches config fields of one experiment; each Trial is one point of the space, trained
as a Run of that experiment. The database is the record: Optuna's study is rebuilt from these rows
whenever a decision is needed (sweeps.driver), and sweeps.scheduler advances running sweeps."""

from __future__ import annotations

from django.db import models

from experiments.models import Experiment, Run, RunStatus, VisibleToQuerySet
from sweeps.driver import PRUNERS, SAMPLERS

# The choices of a sweep's sampler and pruner: the names registered in sweeps.driver (Sampler.GRID is
# "grid", Pruner.SUCCESSIVE_HALVING "successive_halving", ...), so a new one is one decorated function.
Sampler = models.TextChoices("Sampler", [(name.upper(), name) for name in SAMPLERS.names()])
Pruner = models.TextChoices("Pruner", [(name.upper(), name) for name in PRUNERS.names()])


class Direction(models.TextChoices):
    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


class SweepStatus(models.TextChoices):
    RUNNING = "running"  # trials are being launched or are training
    FINISHED = "finished"  # every trial ended
    CANCELLED = "cancelled"  # stopped by a user: its active trials were cancelled
    FAILED = "failed"  # could not go on (the experiment's config became invalid)


class SweepQuerySet(VisibleToQuerySet):
    """Who sees and steers a sweep: the experiment's rule (experiments.models.VisibleToQuerySet)."""

    owner_field = "experiment__owner"


class Sweep(models.Model):
    Status = SweepStatus

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="sweeps")
    name = models.CharField(max_length=64, help_text="Also the tag of its trial runs.")
    space = models.JSONField(help_text='{"dotted.field": {"type": "float"|"int"|"categorical", ...}} (sweeps.space)')
    base_config = models.JSONField(
        help_text="The experiment's config when the sweep was made; trials set params on it."
    )
    sampler = models.CharField(max_length=16, choices=Sampler.choices, default=Sampler.TPE)
    pruner = models.CharField(max_length=24, choices=Pruner.choices, default=Pruner.NONE)
    pruner_startup_trials = models.PositiveIntegerField(
        default=2, help_text="median: trials that must complete before any is pruned."
    )
    pruner_warmup_steps = models.PositiveIntegerField(
        default=1, help_text="median: steps before a trial may be pruned; halving/hyperband: the first rung's steps."
    )
    metric = models.CharField(max_length=64, help_text="The metric to optimise (a name the trainer reports).")
    direction = models.CharField(max_length=8, choices=Direction.choices, default=Direction.MAXIMIZE)
    max_trials = models.PositiveIntegerField()
    max_concurrent_trials = models.PositiveIntegerField(default=2)
    seed = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=SweepStatus.choices, default=SweepStatus.RUNNING, db_index=True)
    note = models.TextField(blank=True, help_text="Why the sweep waits or failed (a refused launch, ...).")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = SweepQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def owner(self):
        return self.experiment.owner


class TrialStatus(models.TextChoices):
    """A trial's own states; once it has a run, its status is the run's (RunStatus values)."""

    WAITING = "waiting"  # params chosen, no run yet (a launch was refused: retried on the next tick)


TRIAL_STATUSES = [(TrialStatus.WAITING.value, "waiting")] + list(RunStatus.choices)
TRIAL_ENDED = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.PRUNED}


class Trial(models.Model):
    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField(help_text="0, 1, ... in the order trials were asked for.")
    params = models.JSONField(help_text="{dotted.field: value} set on the sweep's base config.")
    run = models.OneToOneField(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="trial")
    status = models.CharField(max_length=16, choices=TRIAL_STATUSES, default=TrialStatus.WAITING)
    value = models.FloatField(null=True, blank=True, help_text="The best value of the sweep's metric so far.")
    value_step = models.IntegerField(null=True, blank=True, help_text="The step of `value`.")
    error = models.TextField(blank=True, help_text="Why the trial failed or waits.")
    optuna_attrs = models.JSONField(
        default=dict,
        blank=True,
        help_text="Optuna's system attributes (a halving pruner's rungs), kept between rebuilds.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="unique_trial_number")]

    def __str__(self) -> str:
        return f"{self.sweep.name} #{self.number}"

    @property
    def ended(self) -> bool:
        return self.status in TRIAL_ENDED

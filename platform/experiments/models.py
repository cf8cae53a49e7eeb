"""Experiments, their config versions, runs and everything a run reports.

An Experiment holds a config validated by the trainer's one schema (`Experiment.clean`, through
experiments.configs, which every entry point uses); each save of a changed config adds a
ConfigVersion. A Run snapshots the config at launch and moves through the status state machine
below; every status change is a compare-and-set in the database (`Run.transition`), so two
processes never both win the same change. What users do to runs (launch, cancel, pause, resume,
retry) is runner.services: models know nothing of Celery.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from experiments import configs
from experiments.dataset_models import Dataset  # noqa: F401 - uploaded datasets, a model of this app
from experiments.sample_models import RolloutSample, SampleKind  # noqa: F401 - rollout samples, a model of this app
from experiments.signals import run_status_changed


class VisibleToQuerySet(models.QuerySet):
    """Who may see and steer which rows, the one rule of the web pages, the API and the admin:
    a user sees and steers their own rows; someone else's only with the model's permission
    (`experiments.view_<model>` to see, `experiments.change_<model>` to see and steer or edit).
    Superusers have every permission; being staff alone grants nothing."""

    owner_field = "owner"

    def _perm(self, action: str) -> str:
        return f"{self.model._meta.app_label}.{action}_{self.model._meta.model_name}"

    def _own(self, user):
        if not user or not user.is_authenticated or not user.is_active:
            return None
        return self.filter(**{self.owner_field: user})

    def visible_to(self, user):
        """The rows `user` may see: their own, or all with the view (or change) permission."""
        own = self._own(user)
        if own is None:
            return self.none()
        return self if user.has_perm(self._perm("view")) or user.has_perm(self._perm("change")) else own

    def steerable_by(self, user):
        """The rows `user` may change (edit an experiment, launch it; cancel, pause, resume or
        retry a run): their own, or all with the change permission."""
        own = self._own(user)
        if own is None:
            return self.none()
        return self if user.has_perm(self._perm("change")) else own


def text_problem(text: Any) -> str:
    """Why `text` cannot be stored as text ('' when it can): a lone surrogate ("\\ud800" in JSON)
    is not Unicode that UTF-8, hence PostgreSQL or SQLite, can hold."""
    if not isinstance(text, str):
        return ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains characters that are not valid Unicode text (a lone surrogate); remove them"
    return ""


class Experiment(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    config = models.JSONField(help_text="The current config, as validated by trainers.parse_config (plain data).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = VisibleToQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self) -> ConfigVersion | None:
        return self.versions.order_by("-number").first()

    def clean(self) -> None:
        """Name and description must be text a database can store; the config must pass the
        trainer's schema with the platform's dataset roots and the owner's datasets, and is stored
        normalised (every default filled in, data paths resolved)."""
        super().clean()
        errors: dict[str, Any] = {}
        for field in ("name", "description"):
            message = text_problem(getattr(self, field))
            if message:
                errors[field] = message
        try:
            self.config = configs.validated(self.config, owner=self.owner if self.owner_id else None)
        except configs.ConfigError as exc:
            errors["config"] = [f"{key}: {message}" for key, message in exc.as_dict().items()]
        if errors:
            raise ValidationError(errors)

    def set_config(self, config: dict[str, Any], user=None, note: str = "") -> ConfigVersion | None:
        """Validate the experiment with `config` (`full_clean`: ValidationError if it does not
        pass), store it, and add a version when the config differs from the newest one."""
        self.config = config
        self.full_clean()
        config = self.config
        with transaction.atomic():
            latest = self.versions.select_for_update().order_by("-number").first() if self.pk else None
            self.config = config
            self.save()
            if latest is not None and latest.config == config:
                return None
            return ConfigVersion.objects.create(
                experiment=self,
                number=(latest.number + 1) if latest else 1,
                config=config,
                created_by=user,
                note=note,
            )


class ConfigVersion(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    config = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["experiment", "-number"]
        constraints = [models.UniqueConstraint(fields=["experiment", "number"], name="unique_version_number")]

    def __str__(self) -> str:
        return f"{self.experiment.name} v{self.number}"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PRUNED = "pruned"  # stopped early by its sweep's pruner; keeps its checkpoints and metrics


S = RunStatus
# to-status -> the statuses anyone (a user's request, a worker) may move a run from. Anything else
# is refused. Each request narrows it further with `only_from` (resume: paused only; retry: failed
# or cancelled only), so a caller's stale copy of the run never decides what happens.
TRANSITIONS: dict[str, set[str]] = {
    S.QUEUED: {S.PAUSED, S.FAILED, S.CANCELLED},  # resume, retry
    S.RUNNING: set(),  # only a worker's claim (below)
    S.PAUSING: {S.RUNNING},
    S.PAUSED: {S.PAUSING, S.RUNNING},
    S.CANCELLING: {S.RUNNING, S.PAUSING},
    S.CANCELLED: {S.QUEUED, S.PAUSED, S.CANCELLING},
    S.SUCCEEDED: {S.RUNNING, S.PAUSING, S.CANCELLING},
    S.FAILED: {S.RUNNING, S.PAUSING, S.CANCELLING},
    S.PRUNED: {S.QUEUED, S.PAUSED, S.CANCELLING},  # a pruned trial (stop_as="pruned")
}
# Moves only the attempt that holds the run makes, so the compare-and-set must name that attempt:
# a worker claims its message's attempt (queued -> running); a lost worker's run (the reaper) or a
# stopping worker's run goes back on the queue as a new attempt (running -> queued).
ATTEMPT_TRANSITIONS: dict[str, set[str]] = {
    S.RUNNING: {S.QUEUED},
    S.QUEUED: {S.RUNNING},
}
ACTIVE_STATUSES = {S.RUNNING, S.PAUSING, S.CANCELLING}  # a worker holds the run
TERMINAL_STATUSES = {S.CANCELLED, S.SUCCEEDED, S.FAILED, S.PRUNED}
SETTLED_STATUSES = frozenset(TERMINAL_STATUSES | {S.PAUSED})  # nothing writes to the run's rows or files


def allowed_sources(to: str, *, by_attempt: bool, only_from=None) -> set[str]:
    """The statuses a compare-and-set to `to` may start from: TRANSITIONS[to], plus
    ATTEMPT_TRANSITIONS[to] when the change names the attempt (`by_attempt`), narrowed to `only_from`."""
    allowed = set(TRANSITIONS[to]) | (ATTEMPT_TRANSITIONS.get(to, set()) if by_attempt else set())
    return allowed if only_from is None else allowed & set(only_from)


class RunQuerySet(VisibleToQuerySet):
    owner_field = "experiment__owner"


class Tag(models.Model):
    """A label runs carry (a sweep's name, "baseline", "bad-seed"): shared by every user, so a
    filter by tag means the same word for everyone."""

    name = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ForkOptimizer(models.TextChoices):
    FRESH = "fresh"  # the checkpoint's weights, a new optimizer state, step 0
    CONTINUED = "continued"  # weights, optimizer state and data position: the parent's run goes on


class Run(models.Model):
    Status = RunStatus

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    config_version = models.ForeignKey(
        ConfigVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    config = models.JSONField(help_text="The config snapshot this run trains under.")
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    # attempt: bumped every time the run is put on the queue; a task message carries it, so a
    # stale or redelivered message cannot start the run a second time.
    attempt = models.PositiveIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0, help_text="Automatic requeues after a lost worker.")
    max_restarts = models.PositiveIntegerField(default=3)
    queue = models.CharField(max_length=64, default="runs")
    worker_host = models.CharField(max_length=255, blank=True)
    worker_pid = models.IntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    step = models.IntegerField(default=0, help_text="Last step reported.")
    max_steps = models.IntegerField(default=0)
    latest_reward = models.FloatField(null=True, blank=True)
    params_digest = models.CharField(max_length=80, blank=True)
    error = models.TextField(blank=True)
    run_dir = models.CharField(max_length=500, blank=True, help_text="Relative to the artifacts root.")
    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="First start of the first attempt.")
    finished_at = models.DateTimeField(null=True, blank=True)
    running_s = models.FloatField(default=0.0, help_text="Seconds spent running, summed over attempts.")
    tags = models.ManyToManyField(Tag, blank=True, related_name="runs")
    notes = models.TextField(blank=True)
    # lineage: a fork starts from one checkpoint of another run
    forked_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    forked_from_step = models.IntegerField(null=True, blank=True, help_text="The parent's checkpoint step.")
    fork_optimizer = models.CharField(max_length=16, choices=ForkOptimizer.choices, blank=True)
    name = models.CharField(max_length=120, blank=True, help_text="A short name; pages show #id where empty.")
    # What a stop request ends as: "" = cancelled; "pruned" = a sweep's pruner stopped it (the
    # worker moves cancelling -> pruned instead of cancelled).
    stop_as = models.CharField(max_length=16, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.experiment.name}, {self.status})"

    @property
    def owner(self):
        return self.experiment.owner

    @property
    def label(self) -> str:
        """What pages call the run: its name, or #id."""
        return self.name or f"#{self.pk}"

    @property
    def stopped_status(self) -> str:
        """The status a stop request (cancelling) ends in: cancelled, or pruned for a pruned trial."""
        return RunStatus.PRUNED if self.stop_as == RunStatus.PRUNED else RunStatus.CANCELLED

    @property
    def progress(self) -> float:
        return min(1.0, self.step / self.max_steps) if self.max_steps else 0.0

    @property
    def duration_s(self) -> float | None:
        if not self.started_at:
            return None
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()

    def transition(
        self,
        to: str,
        *,
        attempt: int | None = None,
        only_from: set[str] | None = None,
        new_attempt: bool = False,
        where: Q | None = None,
        note: str = "",
        note_level: str = "info",
        **fields: Any,
    ) -> bool:
        """Compare-and-set in the database: move to `to` only from an allowed status (see
        `allowed_sources`: narrowed by `only_from`; moves reserved to an attempt need `attempt`),
        and, if given, only while `attempt` still matches and `where` holds. Updates `fields` too,
        and with `new_attempt` bumps the attempt in the same update (a run put on the queue: no
        message of the old attempt can claim it in between). The status event, and `note` (why,
        at `note_level`, under the attempt that made the move) are written in the same transaction
        as the change: whoever sees the new status also sees its events. The instance's own status
        is never consulted. Returns whether this call won; on success the instance is refreshed."""
        allowed = allowed_sources(to, by_attempt=attempt is not None, only_from=only_from)
        if not allowed:
            return False
        q = Q(pk=self.pk, status__in=sorted(allowed))
        if attempt is not None:
            q &= Q(attempt=attempt)
        if where is not None:
            q &= where
        if new_attempt:
            fields.update(attempt=models.F("attempt") + 1, queued_at=timezone.now())
        moved_by = self.attempt if attempt is None else attempt
        with transaction.atomic():
            won = Run.objects.filter(q).update(status=to, **fields) == 1
            if won:
                self.refresh_from_db()
                RunEvent.objects.create(
                    run=self, attempt=self.attempt, level="info", message=f"status -> {to}", kind="status"
                )
                if note:
                    RunEvent.objects.create(run=self, attempt=moved_by, level=note_level, message=note, kind="system")
        if won:
            run_status_changed.send(sender=Run, run=self, status=to)
        return won

    def add_event(self, message: str, level: str = "info", kind: str = "log") -> RunEvent:
        return RunEvent.objects.create(run=self, attempt=self.attempt, level=level, message=message, kind=kind)


class MetricPoint(models.Model):
    """One metric value at one step. (run, name, step) is unique: a step is never stored twice.

    `value` holds +inf and -inf as themselves; NULL is NaN (SQLite cannot store NaN: it turns it
    into NULL; PostgreSQL is written the same way, so both back ends read alike and SQL aggregates
    skip it). Readers turn NULL back into NaN (`metric_series.stored_value`)."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_points", db_index=False)
    step = models.IntegerField()
    name = models.CharField(max_length=64)
    value = models.FloatField(null=True, help_text="The value; +inf and -inf as themselves, empty (NULL) for NaN.")
    wall_time = models.FloatField(default=time.time, help_text="Unix seconds when the step was reported.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name", "step"], name="unique_metric_point")]
        # (run, id): the chart cache reads only the rows added since its last read
        # (experiments.metric_series); (run, name, step) above serves everything else.
        indexes = [models.Index(fields=["run", "id"], name="metricpoint_run_id")]

    def __str__(self) -> str:
        return f"{self.name}@{self.step}={self.value}"


class SeriesSnapshot(models.Model):
    """A run's series downsampled and encoded for the compare page (experiments.run_compare's
    `Fragment`), kept in the database so that a process that has not encoded the run yet (a
    restarted server, another web worker) reads one row instead of every point. Valid while the
    run's rows are as they were (`version`: the run's largest MetricPoint id then; `last_steps`:
    each series' newest step), checked by the compare request's one query. Written for runs no
    worker holds (an ended or paused run's series no longer change)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="series_snapshots")
    max_points = models.PositiveIntegerField()
    version = models.BigIntegerField()
    last_steps = models.JSONField(help_text="[[metric, its newest step], ...] by name")
    series_json = models.TextField()
    created_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "max_points"], name="series_snapshot_run_points")]

    def __str__(self) -> str:
        return f"series of run {self.run_id} at {self.max_points} points"


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.CharField(max_length=500, help_text="Relative to the artifacts root.")
    size_bytes = models.BigIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="unique_checkpoint_step")]


class RunEvent(models.Model):
    """A log line or a status change of a run."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    level = models.CharField(max_length=16, default="info")
    kind = models.CharField(max_length=16, default="log")  # log | status | system
    message = models.TextField()

    class Meta:
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "id"])]

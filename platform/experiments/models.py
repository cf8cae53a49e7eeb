"""Experiments, their config versions, runs and everything a run reports.

An Experiment holds a config validated by the trainer's one schema (`trainers.parse_config`); each
save of a changed config adds a ConfigVersion. A Run snapshots the config at launch and moves
through the status state machine below; every status change is a compare-and-set in the database
(`Run.transition`), so two processes never both win the same change.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone


class VisibleToQuerySet(models.QuerySet):
    owner_field = "owner"

    def visible_to(self, user):
        """What `user` may see and steer: their own rows, or everything for staff."""
        if not user or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(**{self.owner_field: user})


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
    def latest_version(self) -> "ConfigVersion | None":
        return self.versions.order_by("-number").first()

    def set_config(self, config: dict[str, Any], user=None, note: str = "") -> "ConfigVersion | None":
        """Store `config` (already validated) and add a version when it differs from the newest one."""
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


S = RunStatus
# to-status -> the statuses it may be reached from. Anything else is refused.
TRANSITIONS: dict[str, set[str]] = {
    S.QUEUED: {S.PAUSED, S.FAILED, S.CANCELLED, S.RUNNING, S.PAUSING},  # resume, retry, requeue after a lost worker
    S.RUNNING: {S.QUEUED},                                             # a worker took it (compare-and-set)
    S.PAUSING: {S.RUNNING},
    S.PAUSED: {S.PAUSING, S.RUNNING},
    S.CANCELLING: {S.RUNNING, S.PAUSING},
    S.CANCELLED: {S.QUEUED, S.PAUSED, S.CANCELLING},
    S.SUCCEEDED: {S.RUNNING, S.PAUSING, S.CANCELLING},
    S.FAILED: {S.QUEUED, S.RUNNING, S.PAUSING, S.CANCELLING},
}
ACTIVE_STATUSES = {S.RUNNING, S.PAUSING, S.CANCELLING}     # a worker holds the run
TERMINAL_STATUSES = {S.CANCELLED, S.SUCCEEDED, S.FAILED}


class RunQuerySet(VisibleToQuerySet):
    owner_field = "experiment__owner"


class Run(models.Model):
    Status = RunStatus

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    config_version = models.ForeignKey(ConfigVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
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
    def progress(self) -> float:
        return min(1.0, self.step / self.max_steps) if self.max_steps else 0.0

    @property
    def duration_s(self) -> float | None:
        if not self.started_at:
            return None
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()

    def transition(self, to: str, *, attempt: int | None = None, only_from: set[str] | None = None, **fields: Any) -> bool:
        """Compare-and-set: move to `to` only from an allowed status (narrowed further by
        `only_from`, and, if given, only while `attempt` still matches). Updates `fields` too.
        Returns whether this call won; on success the instance is refreshed."""
        allowed = TRANSITIONS[to] if only_from is None else TRANSITIONS[to] & set(only_from)
        q = Q(pk=self.pk, status__in=list(allowed))
        if attempt is not None:
            q &= Q(attempt=attempt)
        won = Run.objects.filter(q).update(status=to, **fields) == 1
        if won:
            self.refresh_from_db()
            RunEvent.objects.create(run=self, attempt=self.attempt, level="info", message=f"status -> {to}", kind="status")
        return won

    def add_event(self, message: str, level: str = "info", kind: str = "log") -> "RunEvent":
        return RunEvent.objects.create(run=self, attempt=self.attempt, level=level, message=message, kind=kind)


class MetricPoint(models.Model):
    """One metric value at one step. (run, name, step) is unique: a step is never stored twice."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_points", db_index=False)
    step = models.IntegerField()
    name = models.CharField(max_length=64)
    value = models.FloatField()
    wall_time = models.FloatField(default=time.time, help_text="Unix seconds when the step was reported.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name", "step"], name="unique_metric_point")]
        # (run, id): the chart cache reads only the rows added since its last read
        # (experiments.metric_series); (run, name, step) above serves everything else.
        indexes = [models.Index(fields=["run", "id"], name="metricpoint_run_id")]

    def __str__(self) -> str:
        return f"{self.name}@{self.step}={self.value}"


class RolloutSample(models.Model):
    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="samples")
    step = models.IntegerField()
    index = models.IntegerField(default=0)
    prompt = models.TextField()
    completion = models.TextField()
    answer = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True)
    advantage = models.FloatField(null=True, blank=True)
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "step", "index"]
        indexes = [models.Index(fields=["run", "step"])]


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


class Worker(models.Model):
    """A live Celery worker process, as it reports itself (no broker remote control needed)."""

    hostname = models.CharField(max_length=255, unique=True)
    pid = models.IntegerField(null=True, blank=True)
    queues = models.CharField(max_length=255, blank=True)
    concurrency = models.IntegerField(default=1)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def is_alive(self) -> bool:
        return (timezone.now() - self.heartbeat_at).total_seconds() < settings.PLATFORM_STALE_AFTER_S

    @property
    def current_runs(self):
        return Run.objects.filter(worker_host=self.hostname, status__in=list(ACTIVE_STATUSES))


# --- what users do to runs (web, API and admin all call these) --------------------------------


def launch_run(experiment: Experiment, max_restarts: int | None = None, queue: str | None = None) -> Run:
    """Create a queued Run from the experiment's current config and put it on `queue` (default
    settings.CELERY_TASK_DEFAULT_QUEUE; workers take the queues named by `worker --queues`)."""
    version = experiment.latest_version
    run = Run.objects.create(
        experiment=experiment,
        config_version=version,
        config=experiment.config,
        status=RunStatus.QUEUED,
        max_steps=int(experiment.config.get("train", {}).get("max_steps", 0)),
        max_restarts=settings.PLATFORM_DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts,
        queue=queue or settings.CELERY_TASK_DEFAULT_QUEUE,
    )
    # The suffix keeps a recreated database's run 1 from resuming an older run 1's checkpoints.
    run.run_dir = f"run-{run.pk}-{uuid.uuid4().hex[:8]}"
    run.save(update_fields=["run_dir"])
    run.add_event(f"launched from {experiment.name} v{version.number if version else '?'}", kind="status")
    enqueue_run(run)
    return run


def enqueue_run(run: Run) -> None:
    """Bump the attempt and send a task message for it. The caller has set status to queued."""
    from runner.tasks import send_run_message  # the runner app owns the Celery side

    with transaction.atomic():
        Run.objects.filter(pk=run.pk).update(attempt=models.F("attempt") + 1, queued_at=timezone.now())
        run.refresh_from_db()
        attempt = run.attempt
        transaction.on_commit(lambda: send_run_message(run.pk, attempt, run.queue))


def request_cancel(run: Run) -> bool:
    """queued/paused: cancelled at once. running/pausing: cancelling, the worker stops it."""
    if run.transition(RunStatus.CANCELLED, only_from={RunStatus.QUEUED, RunStatus.PAUSED}, finished_at=timezone.now()):
        return True  # nothing was running it
    # Only the worker holding the run moves cancelling -> cancelled, once its trainer has stopped.
    return run.transition(RunStatus.CANCELLING)  # it was running or pausing (or a worker just took it)


def request_pause(run: Run) -> bool:
    """running: pausing; the worker checkpoints and lets go. queued: nothing to pause (False)."""
    return run.transition(RunStatus.PAUSING)


def resume_run(run: Run) -> bool:
    """paused: back on the queue; the run resumes from its newest checkpoint."""
    if run.status != RunStatus.PAUSED or not run.transition(RunStatus.QUEUED, finished_at=None):
        return False
    enqueue_run(run)
    return True


def retry_run(run: Run) -> bool:
    """failed or cancelled: back on the queue, resuming from the newest checkpoint if any."""
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        return False
    if not run.transition(RunStatus.QUEUED, finished_at=None, error=""):
        return False
    enqueue_run(run)
    return True

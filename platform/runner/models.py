"""Who may queue what: per-user overrides of the run limits, and the queues users may launch to;
the workers that run them (Worker) and the Ray hosts of multi-host runs (RayHost).

The rules that read these live in runner.limits and runner.queues; the admin edits them
(runner.admin). Models never import Celery tasks.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import RegexValidator
from django.db import models, transaction
from django.utils import timezone

from experiments.models import ACTIVE_STATUSES, Run


class UserLimits(models.Model):
    """One user's own limits; an empty field means the server's default (PLATFORM_MAX_ACTIVE_RUNS_PER_USER,
    PLATFORM_MAX_QUEUED_RUNS_PER_USER, PLATFORM_MAX_SEQUENCES_PER_STEP, PLATFORM_MAX_TOKENS_PER_STEP,
    PLATFORM_STORAGE_QUOTA_BYTES)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="run_limits")
    max_active_runs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Runs a worker holds at once (running, pausing, cancelling); empty = the server's default.",
    )
    max_queued_runs = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs waiting on the queue at once; empty = the server's default."
    )
    max_sequences_per_step = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Sequences one step of a run may hold (prompts per step x G); empty = the server's default.",
    )
    max_tokens_per_step = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Tokens one step of a run may hold (sequences x (prompt + completion "
        "tokens)); empty = the server's default.",
    )
    storage_quota_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Disk the user's datasets, exports and checkpoints may take together, "
        "in bytes; empty = the server's default.",
    )

    class Meta:
        verbose_name = "user limits"
        verbose_name_plural = "user limits"

    def __str__(self) -> str:
        return f"limits of {self.user}"


QUEUE_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"


class RunQueue(models.Model):
    """A Celery queue users may send runs to (workers read the queues named by `worker --queues`).
    A queue is open to everyone, or only to the listed users and members of the listed groups."""

    name = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(QUEUE_NAME_PATTERN)],
        help_text="The Celery queue name workers read "
        "(`manage.py worker --queues NAME`): letters, digits, '.', '_' or '-'.",
    )
    description = models.CharField(max_length=200, blank=True)
    is_default = models.BooleanField(
        default=False,
        help_text="Where a launch that names no queue goes (one queue at most; setting it here unsets it elsewhere).",
    )
    open_to_everyone = models.BooleanField(default=False)
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="run_queues")
    groups = models.ManyToManyField(Group, blank=True, related_name="run_queues")

    class Meta:
        ordering = ["-is_default", "name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        with transaction.atomic():
            if self.is_default:
                RunQueue.objects.exclude(pk=self.pk).filter(is_default=True).update(is_default=False)
            super().save(*args, **kwargs)


class RayHost(models.Model):
    """A node of a Ray cluster that multi-host runs use, as the gang's driver last saw it
    (runner.ray_gang: written when a gang starts and every few seconds while it runs). The workers
    page lists them. A local Ray (no PLATFORM_RAY_ADDRESS) exists only while its run does: its
    rows go when the gang ends."""

    cluster = models.CharField(max_length=255, help_text="PLATFORM_RAY_ADDRESS, or 'local Ray of run N'.")
    node_id = models.CharField(max_length=128, unique=True)
    hostname = models.CharField(max_length=255, blank=True)
    address = models.CharField(max_length=255, blank=True)
    alive = models.BooleanField(default=True)
    cpus = models.FloatField(default=0)
    gpus = models.FloatField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    processes = models.JSONField(
        default=list,
        blank=True,
        help_text="The gang processes on this node: "
        "[{run, process, devices}] (devices: cluster.devices_per_host, null = all).",
    )
    seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "hostname", "node_id"]

    def __str__(self) -> str:
        return f"{self.hostname or self.address} ({self.cluster})"

    @classmethod
    def record(cls, cluster: str, nodes: list[dict], run_id: int, processes: dict[str, list[dict]]) -> None:
        """Upsert `nodes` (as `ray.nodes()` lists them) of `cluster`, with run `run_id`'s gang
        processes by node id (other runs' entries stay); rows of `cluster` whose node is no longer
        listed are deleted."""
        seen = []
        earlier = dict(cls.objects.filter(cluster=cluster).values_list("node_id", "processes"))
        for node in nodes:
            node_id = str(node.get("NodeID", ""))
            if not node_id:
                continue
            seen.append(node_id)
            resources = node.get("Resources") or {}
            others = [p for p in earlier.get(node_id) or [] if p.get("run") != run_id]
            cls.objects.update_or_create(
                node_id=node_id,
                defaults={
                    "cluster": cluster,
                    "hostname": str(node.get("NodeManagerHostname", ""))[:255],
                    "address": str(node.get("NodeManagerAddress", ""))[:255],
                    "alive": bool(node.get("Alive")),
                    "cpus": float(resources.get("CPU", 0)),
                    "gpus": float(resources.get("GPU", 0)),
                    "memory_bytes": int(resources.get("memory", 0)),
                    "processes": others + processes.get(node_id, []),
                },
            )
        cls.objects.filter(cluster=cluster).exclude(node_id__in=seen).delete()

    @classmethod
    def forget_run(cls, cluster: str, run_id: int, drop_cluster: bool) -> None:
        """A gang of run `run_id` ended: drop its local cluster's rows, or its processes from the nodes."""
        if drop_cluster:
            cls.objects.filter(cluster=cluster).delete()
            return
        for host in cls.objects.filter(cluster=cluster):
            kept = [p for p in host.processes if p.get("run") != run_id]
            if kept != host.processes:
                host.processes = kept
                host.save(update_fields=["processes", "seen_at"])


class Worker(models.Model):
    """A live Celery worker process, as it reports itself (no broker remote control needed;
    runner.workers keeps the row)."""

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

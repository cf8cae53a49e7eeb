"""Who may queue what: per-user overrides of the run limits, and the queues users may launch to.

The rules that read these live in runner.limits and runner.queues; the admin edits them
(runner.admin). Models never import Celery tasks.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import RegexValidator
from django.db import models, transaction


class UserLimits(models.Model):
    """One user's own limits; an empty field means the server's default (PLATFORM_MAX_ACTIVE_RUNS_PER_USER,
    PLATFORM_MAX_QUEUED_RUNS_PER_USER, PLATFORM_MAX_SEQUENCES_PER_STEP, PLATFORM_MAX_TOKENS_PER_STEP,
    PLATFORM_STORAGE_QUOTA_BYTES)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="run_limits")
    max_active_runs = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs a worker holds at once (running, pausing, cancelling); "
        "empty = the server's default.")
    max_queued_runs = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs waiting on the queue at once; empty = the server's default.")
    max_sequences_per_step = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Sequences one step of a run may hold (prompts per step x G); "
        "empty = the server's default.")
    max_tokens_per_step = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens one step of a run may hold (sequences x (prompt + completion "
        "tokens)); empty = the server's default.")
    storage_quota_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Disk the user's datasets, exports and checkpoints may take together, "
        "in bytes; empty = the server's default.")

    class Meta:
        verbose_name = "user limits"
        verbose_name_plural = "user limits"

    def __str__(self) -> str:
        return f"limits of {self.user}"


QUEUE_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"


class RunQueue(models.Model):
    """A Celery queue users may send runs to (workers read the queues named by `worker --queues`).
    A queue is open to everyone, or only to the listed users and members of the listed groups."""

    name = models.CharField(max_length=64, unique=True, validators=[RegexValidator(QUEUE_NAME_PATTERN)], help_text="The Celery queue name workers read "
                            "(`manage.py worker --queues NAME`): letters, digits, '.', '_' or '-'.")
    description = models.CharField(max_length=200, blank=True)
    is_default = models.BooleanField(default=False, help_text="Where a launch that names no queue goes "
                                     "(one queue at most; setting it here unsets it elsewhere).")
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

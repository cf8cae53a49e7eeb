"""Jobs whose worker was lost: a running job whose heartbeat is older than PLATFORM_STALE_AFTER_S
goes back on the queue (its next claim starts it again from the first prompt), or, after
MAX_ATTEMPTS claims, ends failed saying so. The scheduler runs `requeue_lost_jobs` every
PLATFORM_EVALUATION_REAP_S (settings.PLATFORM_PERIODIC_JOBS["evaluations"])."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from evaluations.models import EvaluationJob, JobStatus
from evaluations.services import send_when_committed

MAX_ATTEMPTS = 3


def requeue_lost_jobs() -> list[int]:
    """Requeue (or fail) the lost running jobs; returns the ids requeued."""
    stale_before = timezone.now() - dt.timedelta(seconds=settings.PLATFORM_STALE_AFTER_S)
    requeued = []
    for job in EvaluationJob.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=stale_before):
        lost = EvaluationJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING, heartbeat_at=job.heartbeat_at)
        if job.attempts >= MAX_ATTEMPTS:
            lost.update(
                status=JobStatus.FAILED,
                finished_at=timezone.now(),
                error=f"its worker was lost {job.attempts} times; giving up",
            )
            continue
        with transaction.atomic():
            if lost.update(status=JobStatus.QUEUED, progress_done=0, heartbeat_at=None):
                send_when_committed(job)
                requeued.append(job.pk)
    return requeued

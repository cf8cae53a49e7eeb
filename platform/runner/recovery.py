"""The reaper: find runs whose worker died (no heartbeat for PLATFORM_STALE_AFTER_S) and recover them.

  running  + stale  -> queued with restarts+1 and a new attempt (resumes from the newest checkpoint
                       on any worker), while restarts < max_restarts; else failed
  pausing  + stale  -> paused (the user asked for a pause; the newest checkpoint is where it resumes)
  cancelling + stale -> cancelled

Only a lost worker is retried here: an exception in user code fails the run at once. Every change
is a compare-and-set that also re-checks the heartbeat, so two schedulers (or a supervisor whose
heartbeat was merely late) cannot both act on the same run. Worker rows silent for more than
10 x PLATFORM_STALE_AFTER_S are deleted.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from experiments.models import Run, RunStatus
from runner.models import Worker
from runner.services import send_when_committed

log = logging.getLogger(__name__)
STALE_STATUSES = (RunStatus.RUNNING, RunStatus.PAUSING, RunStatus.CANCELLING)
WORKER_FORGET_FACTOR = 10


def restart_or_fail(run: Run, lost: str, where: Q, now: dt.datetime, what: str = "worker lost") -> str:
    """A running attempt was lost (`lost` says how): queue a new attempt (restarts + 1; it resumes
    from the newest checkpoint on any worker) while restarts < max_restarts, else fail the run.
    Compare-and-set on this attempt and `where`. Returns 'requeued', 'failed' or '' (lost the race).
    The reaper uses it for a silent worker; runner.ray_gang for a lost process of a multi-host run."""
    if run.restarts < run.max_restarts:
        # a new attempt in the same update: the lost attempt's redelivered message cannot claim it.
        # restarts moves only with the attempt, which the compare-and-set pins, so it becomes restarts + 1.
        note = f"{lost}; requeued, restart {run.restarts + 1} of {run.max_restarts}"
        if run.transition(
            RunStatus.QUEUED,
            attempt=run.attempt,
            where=where,
            new_attempt=True,
            note=note,
            note_level="warning",
            restarts=F("restarts") + 1,
        ):
            send_when_committed(run)
            return "requeued"
        return ""
    error = f"{what}; max_restarts reached ({run.max_restarts})"
    if run.transition(
        RunStatus.FAILED,
        attempt=run.attempt,
        where=where,
        note=f"{lost}; {error}",
        note_level="error",
        error=error,
        finished_at=now,
    ):
        return "failed"
    return ""


def reap_stale_runs(now: dt.datetime | None = None) -> list[tuple[int, str]]:
    """Recover runs whose heartbeat is older than PLATFORM_STALE_AFTER_S. Returns (run_id, action)
    for each run acted on; action is 'requeued', 'failed', 'paused' or 'cancelled'."""
    now = now or timezone.now()
    cutoff = now - dt.timedelta(seconds=settings.PLATFORM_STALE_AFTER_S)
    stale = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    done: list[tuple[int, str]] = []
    for run in Run.objects.filter(Q(status__in=STALE_STATUSES) & stale).order_by("pk"):
        age = f"{(now - run.heartbeat_at).total_seconds():.0f} s old" if run.heartbeat_at else "none"
        lost = f"worker {run.worker_host or '?'} lost (heartbeat {age})"
        if run.status == RunStatus.CANCELLING:
            stopped = run.stopped_status
            if run.transition(
                stopped,
                attempt=run.attempt,
                where=stale,
                note=f"{lost}; {stopped}",
                note_level="warning",
                finished_at=now,
            ):
                done.append((run.pk, stopped))
        elif run.status == RunStatus.PAUSING:
            if run.transition(
                RunStatus.PAUSED,
                attempt=run.attempt,
                where=stale,
                note_level="warning",
                note=f"{lost}; paused (resumes from the newest checkpoint)",
                finished_at=now,
            ):
                done.append((run.pk, "paused"))
        else:
            action = restart_or_fail(run, lost, stale, now)
            if action:
                done.append((run.pk, action))
    for run_id, action in done:
        log.warning("reaper: run %s %s", run_id, action)
    forget_before = now - dt.timedelta(seconds=WORKER_FORGET_FACTOR * settings.PLATFORM_STALE_AFTER_S)
    Worker.objects.filter(heartbeat_at__lt=forget_before).delete()
    return done

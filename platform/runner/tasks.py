"""Celery tasks: run one attempt of a run (supervised), and the reaper.

`runner.services.send_run_message` sends `execute_run`'s messages (by task name) once a queued
Run is committed.
Cancel and pause never go through Celery (no revoke, no remote control): they are statuses in the
database that the trainer polls, enforced by the supervisor's signals.
"""

from __future__ import annotations

import logging

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="runner.execute_run", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def execute_run(run_id: int, attempt: int) -> str:
    """Supervise attempt `attempt` of run `run_id` (see runner.supervisor); a stale or redelivered
    message returns at once. Returns the run's status afterwards ('' if this message did nothing)."""
    from experiments.models import Run
    from runner.services import send_run_message
    from runner.supervisor import Supervisor
    from runner.workers import shutting_down

    if shutting_down():  # received while this worker stops: leave it for another worker
        queue = Run.objects.filter(pk=run_id).values_list("queue", flat=True).first()
        if queue:
            send_run_message(run_id, attempt, queue)
            log.info("run %s attempt %s: worker stopping; message put back on %s", run_id, attempt, queue)
        return ""
    if waits_for_active_room(int(run_id), int(attempt)):
        return ""
    hostname = getattr(execute_run.request, "hostname", None) or ""
    supervisor = Supervisor(int(run_id), int(attempt), hostname)
    status = supervisor.run()
    if supervisor.waiting:  # another of the owner's runs was claimed in the same instant
        waits_for_active_room(int(run_id), int(attempt), supervisor.waiting)
    return status


def waits_for_active_room(run_id: int, attempt: int, waiting: str | None = None) -> bool:
    """True when attempt `attempt` of run `run_id` is queued but its owner already has as many
    active runs as runner.limits allows (or `waiting` says so: the claim found it at the cap): the
    run stays queued (one event says why) and its message is sent again PLATFORM_ACTIVE_CAP_RETRY_S
    later. This early check spares a worker the claim's locks; the claim checks again, atomically."""
    from django.conf import settings

    from experiments.models import Run, RunStatus
    from runner.limits import active_cap_wait

    run = (
        Run.objects.select_related("experiment__owner")
        .filter(pk=run_id, attempt=attempt, status=RunStatus.QUEUED)
        .first()
    )
    if run is not None and waiting is None:
        waiting = active_cap_wait(run)
    if run is None or not waiting:
        return False
    if not run.events.filter(attempt=attempt, message=waiting).exists():
        run.add_event(waiting, kind="system")
    execute_run.apply_async(args=[run_id, attempt], queue=run.queue, countdown=settings.PLATFORM_ACTIVE_CAP_RETRY_S)
    log.info("run %s attempt %s: %s", run_id, attempt, waiting)
    return True


@shared_task(name="runner.reap_stale_runs", ignore_result=True)
def reap_stale_runs_task() -> list:
    """Recover runs whose worker was lost (see runner.recovery). Beat normally runs this in-process."""
    from runner.recovery import reap_stale_runs

    return reap_stale_runs()


@shared_task(name="runner.periodic_job", ignore_result=True)
def periodic_job_task(name: str) -> None:
    """One of settings.PLATFORM_PERIODIC_JOBS (see runner.beat). Beat normally runs it in-process."""
    from runner.beat import run_job

    run_job(name)

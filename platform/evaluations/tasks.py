"""Celery task: run one evaluation job (evaluations.jobs). `evaluations.services.send_when_committed`
sends its messages by name, to the default queue, once the job's row is committed."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="evaluations.run_job", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_job(job_id: int) -> str:
    """Run queued job `job_id`; a redelivered or stale message does nothing. Returns its status."""
    from evaluations.jobs import run_job as run

    return run(int(job_id))

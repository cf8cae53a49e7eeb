"""The periodic scheduler (Celery beat) and its schedule.

The reaper must run even when every worker slot is busy training (a concurrency-1 worker with a
long run takes no other message), so beat runs the reaper's entry in its own process instead of
sending it to a queue. Any other entry is sent as usual. With a stock scheduler the entry still
works: it is a real task (`runner.reap_stale_runs`), run by the next free worker.
"""

from __future__ import annotations

import logging

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)

REAP_TASK = "runner.reap_stale_runs"
SCHEDULER = "runner.beat:InProcessScheduler"


def beat_schedule() -> dict:
    every_s = settings.PLATFORM_REAP_EVERY_S
    return {
        "reap-stale-runs": {
            "task": REAP_TASK,
            "schedule": every_s,
            # if sent to a queue (stock scheduler), a late copy is worthless: let it expire
            "options": {"expires": max(every_s * 2, 10.0)},
        },
    }


def configure(app) -> None:
    """Install the schedule and this scheduler on the Celery app (called from RunnerConfig.ready)."""
    app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **beat_schedule()}
    app.conf.beat_scheduler = SCHEDULER
    app.conf.beat_max_loop_interval = min(5.0, settings.PLATFORM_REAP_EVERY_S)


class InProcessScheduler(PersistentScheduler):
    """PersistentScheduler that runs the reaper itself (see the module docstring)."""

    def apply_entry(self, entry, producer=None):
        if entry.task != REAP_TASK:
            return super().apply_entry(entry, producer)
        from runner.recovery import reap_stale_runs

        close_old_connections()
        try:
            reap_stale_runs()
        except Exception:  # noqa: BLE001 - beat must keep going; the next tick retries
            log.exception("reaper failed")
            close_old_connections()

"""The periodic scheduler (Celery beat) and its schedule.

Periodic housekeeping must run even when every worker slot is busy training (a concurrency-1 worker
with a long run takes no other message), so beat runs these entries in its own process instead of
sending them to a queue: the reaper, and what settings.PLATFORM_PERIODIC_JOBS names (sweeps
launching and pruning trials, alerts being delivered). Each job is a plain function, named by its
dotted path, so this module never imports the apps above it. Any other entry is sent as usual.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)

REAP_TASK = "runner.reap_stale_runs"
SCHEDULER = "runner.beat:InProcessScheduler"
JOB_TASK = "runner.periodic_job"


def periodic_jobs() -> dict[str, tuple[str, float]]:
    """name -> (dotted path of a no-argument function, period in seconds): the reaper and
    settings.PLATFORM_PERIODIC_JOBS."""
    jobs = {"reap-stale-runs": ("runner.recovery.reap_stale_runs", settings.PLATFORM_REAP_EVERY_S)}
    jobs.update(getattr(settings, "PLATFORM_PERIODIC_JOBS", {}))
    return jobs


def beat_schedule() -> dict:
    schedule = {}
    for name, (_path, every_s) in periodic_jobs().items():
        reaper = name == "reap-stale-runs"
        # if sent to a queue (stock scheduler), a late copy is worthless: let it expire
        schedule[name] = {"task": REAP_TASK if reaper else JOB_TASK, "args": () if reaper else (name,),
                          "schedule": every_s, "options": {"expires": max(every_s * 2, 10.0)}}
    return schedule


def configure(app) -> None:
    """Install the schedule and this scheduler on the Celery app (called from RunnerConfig.ready)."""
    app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **beat_schedule()}
    app.conf.beat_scheduler = SCHEDULER
    app.conf.beat_max_loop_interval = min([5.0] + [every for _p, every in periodic_jobs().values()])


def job_function(entry_name: str) -> Callable[[], object] | None:
    """The function of a periodic job, imported by its dotted path (None if not one of ours)."""
    spec = periodic_jobs().get(entry_name)
    if spec is None:
        return None
    module, _, attr = spec[0].rpartition(".")
    return getattr(importlib.import_module(module), attr)


def run_job(entry_name: str) -> None:
    """Run one periodic job here and now; a failure is logged, and the next tick retries."""
    close_old_connections()
    try:
        function = job_function(entry_name)
        if function is not None:
            function()
    except Exception:  # noqa: BLE001 - beat must keep going; the next tick retries
        log.exception("periodic job %s failed", entry_name)
    finally:
        close_old_connections()


class InProcessScheduler(PersistentScheduler):
    """PersistentScheduler that runs the periodic jobs itself (see the module docstring)."""

    def apply_entry(self, entry, producer=None):
        if entry.task not in (REAP_TASK, JOB_TASK):
            return super().apply_entry(entry, producer)
        run_job(entry.name)

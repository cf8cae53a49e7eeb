"""The periodic scheduler (Celery beat) and its schedule.

Periodic housekeeping must run even when every worker slot is busy training (a concurrency-1 worker
with a long run takes no other message), so beat runs these entries in its own process instead of
sending them to a queue: the reaper, and what settings.PLATFORM_PERIODIC_JOBS names (sweeps
launching and pruning trials, alerts being delivered). Each job is a plain function, named by its
dotted path, so this module never imports the apps above it. Any other entry is sent as usual.

One slow job must never delay the reaper (a webhook receiver answering a byte every few seconds
once held the alerts job, and with it the reaper, for 150 s): the reaper runs in the scheduler's own
thread, on time; every other job runs in a thread of its own (`start_job`), at most one run of each
job at a time (a tick that finds the previous run still going skips it).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import close_old_connections, connections

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
        schedule[name] = {
            "task": REAP_TASK if reaper else JOB_TASK,
            "args": () if reaper else (name,),
            "schedule": every_s,
            "options": {"expires": max(every_s * 2, 10.0)},
        }
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


_running: dict[str, threading.Thread] = {}  # job name -> the thread running it
_running_lock = threading.Lock()


def _run_in_thread(entry_name: str) -> None:
    try:
        run_job(entry_name)
    finally:
        connections.close_all()  # this thread's own connections


def start_job(entry_name: str) -> threading.Thread | None:
    """Run a periodic job in a thread of its own, so it never delays the reaper; None (nothing
    started) while the job's previous run is still going: at most one run per job at a time."""
    with _running_lock:
        previous = _running.get(entry_name)
        if previous is not None and previous.is_alive():
            log.warning("periodic job %s: the previous run is still going; this tick skips it", entry_name)
            return None
        thread = threading.Thread(target=_run_in_thread, args=(entry_name,), name=f"periodic-{entry_name}", daemon=True)
        _running[entry_name] = thread
        thread.start()
        return thread


class InProcessScheduler(PersistentScheduler):
    """PersistentScheduler that runs the periodic jobs itself (see the module docstring): the
    reaper in this thread, every other job in its own thread (`start_job`)."""

    def apply_entry(self, entry, producer=None):
        if entry.task not in (REAP_TASK, JOB_TASK):
            return super().apply_entry(entry, producer)
        if entry.task == REAP_TASK:
            run_job(entry.name)
        else:
            start_job(entry.name)

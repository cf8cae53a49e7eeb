"""The supervisor: what the Celery task does for one attempt of a run.

1. Compare-and-set queued -> running for exactly this attempt. Losing means the message is stale
   or redelivered, or the run was cancelled meanwhile: return without running anything, so a Run
   never runs twice.
2. Start the trainer as a child process (`manage.py execute_run RUN ATTEMPT`): JAX stays out of
   the Celery worker and the accelerator's memory is freed when the child exits. Its output goes
   to <run dir>/logs/attempt-N.log.
3. Every PLATFORM_HEARTBEAT_S while it runs: write heartbeat_at and running_s (only while this
   attempt owns the active run) and read the status. After a cancel or pause request (or when the
   run stopped being this attempt's), the child stops by itself within a step; if it has not exited
   PLATFORM_STOP_GRACE_S after the request was seen, SIGTERM (it checkpoints and pauses), then
   SIGKILL after PLATFORM_KILL_GRACE_S.
4. When the child exits without having written a final status: cancelling -> cancelled,
   pausing -> paused, running -> failed with the tail of its output.

If the worker is stopping (this process gets SIGTERM, or runner.workers.shutting_down()), the
child gets SIGTERM: it checkpoints and the run goes back on the queue (see runner.attempt).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from runner.procs import tail_text
from runner.workers import shutting_down

log = logging.getLogger(__name__)
MANAGE_PY = Path(settings.REPO_ROOT) / "manage.py"
SUPERVISOR_PID_ENV = "PLATFORM_SUPERVISOR_PID"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Supervisor:
    def __init__(self, run_id: int, attempt: int, worker_host: str = ""):
        self.run_id = run_id
        self.attempt = attempt
        self.worker_host = worker_host or os.uname().nodename
        self.heartbeat_s = settings.PLATFORM_HEARTBEAT_S
        self.stop_grace_s = settings.PLATFORM_STOP_GRACE_S
        self.kill_grace_s = settings.PLATFORM_KILL_GRACE_S
        self.proc: subprocess.Popen | None = None
        self.terminated_by: int | None = None   # a signal this process got (worker shutdown)
        self.stop_seen_at: float | None = None  # monotonic time a stop/pause request was first seen
        self.term_sent_at: float | None = None
        self.killed = False
        self._accounted_at = time.monotonic()   # running_s is accounted up to here

    # -- 1. claim -------------------------------------------------------------------------------

    def claim(self) -> Run | None:
        """The compare-and-set that lets exactly one message start this attempt."""
        run = Run.objects.filter(pk=self.run_id).first()
        if run is None:
            log.warning("run %s: no such run; message dropped", self.run_id)
            return None
        now = timezone.now()
        won = run.transition(
            RunStatus.RUNNING, attempt=self.attempt, worker_host=self.worker_host, worker_pid=os.getpid(),
            heartbeat_at=now, started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
            finished_at=None,
        )
        if not won:
            log.warning("run %s attempt %s: not started (run is %s, attempt %s): stale or redelivered message",
                        self.run_id, self.attempt, run.status, run.attempt)
            return None
        self._accounted_at = time.monotonic()
        run.add_event(f"attempt {self.attempt} started on {self.worker_host} (pid {os.getpid()})", kind="system")
        return run

    # -- 2. the child ---------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The trainer child's argv."""
        return [sys.executable, str(MANAGE_PY), "execute_run", str(self.run_id), str(self.attempt)]

    def spawn(self, run: Run) -> subprocess.Popen:
        log_dir = Path(settings.ARTIFACTS_DIR) / (run.run_dir or f"run-{run.pk}") / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"attempt-{self.attempt}.log"
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
        cmd = self.command()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, cwd=str(settings.REPO_ROOT))
        log.info("run %s attempt %s: trainer pid %s, output in %s", self.run_id, self.attempt, self.proc.pid,
                 self.log_path)
        return self.proc

    def _on_signal(self, signum, frame) -> None:
        self.terminated_by = signum

    # -- 3. watch -------------------------------------------------------------------------------

    def heartbeat(self) -> str | None:
        """Write heartbeat_at and running_s while this attempt owns the active run; return the
        status if it does, None if it no longer does."""
        now_m = time.monotonic()
        n = Run.objects.filter(pk=self.run_id, attempt=self.attempt, status__in=list(ACTIVE_STATUSES)).update(
            heartbeat_at=timezone.now(), running_s=F("running_s") + (now_m - self._accounted_at))
        self._accounted_at = now_m
        if n == 0:
            return None
        return Run.objects.filter(pk=self.run_id).values_list("status", flat=True).first()

    def _signal_child(self, sig: int, why: str) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        log.warning("run %s attempt %s: %s; sending %s to trainer pid %s", self.run_id, self.attempt, why,
                    signal.Signals(sig).name, self.proc.pid)
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            return
        try:
            Run(pk=self.run_id, attempt=self.attempt).add_event(
                f"{why}: {signal.Signals(sig).name} sent to the trainer", level="warning", kind="system")
        except DatabaseError:
            pass

    def watch_step(self) -> None:
        """One supervision tick: heartbeat, then escalate a stop that is taking too long."""
        now_m = time.monotonic()
        try:
            status = self.heartbeat()
        except DatabaseError as exc:
            log.warning("run %s: heartbeat failed (%s)", self.run_id, exc)
            close_old_connections()
            status = RunStatus.RUNNING  # unknown: change nothing this tick
        if self.terminated_by is None and shutting_down():
            self.terminated_by = signal.SIGTERM
        if self.terminated_by is not None and self.term_sent_at is None:
            self._signal_child(signal.SIGTERM, "worker stopping")
            self.term_sent_at = now_m
        if status in (RunStatus.CANCELLING, RunStatus.PAUSING) or status is None:
            if self.stop_seen_at is None:
                self.stop_seen_at = now_m
        if (self.stop_seen_at is not None and self.term_sent_at is None
                and now_m - self.stop_seen_at >= self.stop_grace_s):
            what = "cancel/pause request" if status else "run taken over by another attempt"
            self._signal_child(signal.SIGTERM, f"trainer still running {self.stop_grace_s:g} s after the {what}")
            self.term_sent_at = now_m
        if self.term_sent_at is not None and not self.killed and now_m - self.term_sent_at >= self.kill_grace_s:
            self._signal_child(signal.SIGKILL, f"trainer still running {self.kill_grace_s:g} s after SIGTERM")
            self.killed = True

    def wait(self) -> int:
        assert self.proc is not None
        while True:
            try:
                return self.proc.wait(timeout=self.heartbeat_s)
            except subprocess.TimeoutExpired:
                self.watch_step()

    # -- 4. make sure the run ends in a final status ----------------------------------------------

    def finalize(self, returncode: int) -> str:
        Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(
            running_s=F("running_s") + (time.monotonic() - self._accounted_at))
        run = Run.objects.filter(pk=self.run_id).first()
        if run is None or run.attempt != self.attempt or run.status not in ACTIVE_STATUSES:
            return run.status if run else "missing"  # the child wrote the final status (or lost the run)
        if self.terminated_by is not None:
            # The worker is going away and the trainer did not finish in time: leave the run
            # active; its heartbeat stops and the reaper requeues it.
            log.warning("run %s: worker stopping before the trainer ended; the reaper will requeue it", run.pk)
            return run.status
        now = timezone.now()
        how = f"exit code {returncode}" if returncode >= 0 else f"killed by {_signal_name(-returncode)}"
        if run.status == RunStatus.CANCELLING and run.transition(RunStatus.CANCELLED, attempt=self.attempt,
                                                                  finished_at=now):
            run.add_event(f"trainer stopped ({how}); cancelled", kind="system")
        elif run.status == RunStatus.PAUSING and run.transition(RunStatus.PAUSED, attempt=self.attempt,
                                                                 finished_at=now):
            run.add_event(f"trainer stopped ({how}); paused (resumes from the newest checkpoint)", kind="system")
        else:
            tail = tail_text(self.log_path, 30)
            error = f"trainer exited ({how}) without reporting a result. Last output:\n{tail}".rstrip()
            if run.transition(RunStatus.FAILED, attempt=self.attempt, error=error, finished_at=now):
                run.add_event(error, level="error", kind="system")
        run.refresh_from_db()
        return run.status

    def run(self) -> str:
        """Claim, spawn, watch, finalize. Returns the run's status afterwards ('' if not claimed)."""
        run = self.claim()
        if run is None:
            return ""
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, self._on_signal) if in_main else None
        try:
            try:
                self.spawn(run)
            except OSError as exc:
                error = f"cannot start the trainer: {exc}"
                if run.transition(RunStatus.FAILED, attempt=self.attempt, error=error, finished_at=timezone.now()):
                    run.add_event(error, level="error", kind="system")
                return RunStatus.FAILED
            returncode = self.wait()
            return self.finalize(returncode)
        finally:
            if self.proc is not None and self.proc.poll() is None:  # never leave a trainer behind
                self.proc.kill()
                self.proc.wait()
            if in_main:
                signal.signal(signal.SIGTERM, previous)


def supervise(run_id: int, attempt: int, worker_host: str = "") -> str:
    return Supervisor(run_id, attempt, worker_host).run()

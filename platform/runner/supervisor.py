"""The supervisor: what the Celery task does for one attempt of a run.

1. Compare-and-set queued -> running for exactly this attempt. Losing means the message is stale
   or redelivered, or the run was cancelled meanwhile: return without running anything, so a Run
   never runs twice.
2. Start the trainer as a child process (`manage.py execute_run RUN ATTEMPT`) leading a process
   group of its own: JAX stays out of the Celery worker and the accelerator's memory is freed when
   the child exits. Its output goes to <run dir>/logs/attempt-N.log, where the supervisor also
   notes the trainer's pid and any signal it sends.
3. While it runs: read the run's status every PLATFORM_STATUS_POLL_S (one indexed read) and write
   heartbeat_at and running_s every PLATFORM_HEARTBEAT_S (only while this attempt owns the active
   run). The trainer stops by itself at its next step or micro-batch boundary; but it cannot look
   while it compiles or is inside a step, so:
   - cancel: needs no checkpoint. A trainer still running PLATFORM_CANCEL_GRACE_S after the
     request was seen is SIGKILLed with its process group; the steps it reported and its
     checkpoints so far stay. A trainer that has written its final status by then is not killed:
     it is finishing up (the compare snapshot) and gets the pause's grace below.
   - pause: needs a checkpoint. A trainer still running PLATFORM_STOP_GRACE_S after the request
     gets SIGTERM (it checkpoints and pauses at its next boundary), then SIGKILL after
     PLATFORM_KILL_GRACE_S (the run is paused at its newest earlier checkpoint). The same holds
     once the run stopped being this attempt's (the trainer wrote its final status and is
     exiting, or another attempt took the run over).
4. When the child exits without having written a final status: cancelling -> cancelled,
   pausing -> paused, running -> failed with the tail of its output. The event says how the
   trainer ended and how long after the request.

If the worker is stopping (this process gets SIGTERM, or runner.workers.shutting_down()), the
child gets SIGTERM: it checkpoints and the run goes back on the queue (see runner.attempt).
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, close_old_connections, transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from runner.limits import active_cap_wait
from runner.procs import SUPERVISOR_PID_ENV, signal_group, tail_text
from runner.storage import run_directory
from runner.workers import shutting_down

log = logging.getLogger(__name__)
MANAGE_PY = Path(settings.REPO_ROOT) / "manage.py"
FINALIZE_TRIES = 3  # a database that fails longer than this leaves the run to the reaper


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
        self.poll_s = settings.PLATFORM_STATUS_POLL_S
        self.cancel_grace_s = settings.PLATFORM_CANCEL_GRACE_S
        self.stop_grace_s = settings.PLATFORM_STOP_GRACE_S
        self.kill_grace_s = settings.PLATFORM_KILL_GRACE_S
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.terminated_by: int | None = None  # a signal this process got (worker shutdown)
        self.stop_seen_at: float | None = None  # monotonic time a cancel/pause request was first seen
        self.waiting: str | None = None  # why the claim must wait for the owner's active-run cap
        self.cancel_seen_at: float | None = None  # ... a cancel request was first seen
        self.term_sent_at: float | None = None
        self.killed = False
        self.multi_host = False  # cluster.hosts > 1: the child drives a Ray gang
        self._heartbeat_at = float("-inf")  # monotonic time of the last heartbeat write
        self._accounted_at = time.monotonic()  # running_s is accounted up to here

    # -- 1. claim -------------------------------------------------------------------------------

    def claim(self) -> Run | None:
        """The compare-and-set that lets exactly one message start this attempt, and only while
        its owner has room for one more active run (runner.limits.active_cap_wait). The check and
        the claim are one transaction holding the run's row and then its owner's (the order
        every path onto the queue takes them in), so two workers claiming two runs of one user
        at the same instant take turns: the second sees the first's run active. At the cap,
        `self.waiting` says why and nothing is claimed (the task sends the message again later)."""
        run = Run.objects.select_related("experiment__owner").filter(pk=self.run_id).first()
        if run is None:
            log.warning("run %s: no such run; message dropped", self.run_id)
            return None
        now = timezone.now()
        with transaction.atomic():
            Run.objects.select_for_update().filter(pk=run.pk).first()
            get_user_model().objects.select_for_update().filter(pk=run.experiment.owner_id).first()
            run.refresh_from_db(fields=["status", "attempt"])
            if run.status == RunStatus.QUEUED and run.attempt == self.attempt:
                self.waiting = active_cap_wait(run)
            won = self.waiting is None and run.transition(
                RunStatus.RUNNING,
                attempt=self.attempt,
                worker_host=self.worker_host,
                worker_pid=os.getpid(),
                heartbeat_at=now,
                started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
                finished_at=None,
            )
        if self.waiting is not None:
            return None
        if not won:
            log.warning(
                "run %s attempt %s: not started (run is %s, attempt %s): stale or redelivered message",
                self.run_id,
                self.attempt,
                run.status,
                run.attempt,
            )
            return None
        self._accounted_at = time.monotonic()
        run.add_event(f"attempt {self.attempt} started on {self.worker_host} (pid {os.getpid()})", kind="system")
        return run

    # -- 2. the child ---------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The trainer child's argv: the trainer itself, or for a multi-host run (cluster.hosts > 1)
        the driver of its gang of Ray actors (runner.ray_gang), which this supervisor watches,
        signals and finalizes the same way."""
        entry = "execute_gang" if self.multi_host else "execute_run"
        return [sys.executable, str(MANAGE_PY), entry, str(self.run_id), str(self.attempt)]

    def spawn(self, run: Run) -> subprocess.Popen:
        log_dir = Path(run_directory(run)) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"attempt-{self.attempt}.log"
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
        from runner.ray_gang import is_multi_host  # (Ray itself is imported only by the gang's driver)

        self.multi_host = is_multi_host(run)
        cmd = self.command()
        with open(self.log_path, "ab") as out:
            # process_group=0: the trainer leads a group of its own, so a kill reaches anything it
            # started too (and a terminal's Ctrl-C reaches only the worker, which stops it in order)
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(settings.REPO_ROOT),
                process_group=0,
            )
        log.info(
            "run %s attempt %s: trainer pid %s, output in %s", self.run_id, self.attempt, self.proc.pid, self.log_path
        )
        self.note(f"trainer pid {self.proc.pid} started by supervisor pid {os.getpid()}")
        return self.proc

    def note(self, message: str) -> None:
        """Add a line to the attempt's log file, between the trainer's own lines."""
        if self.log_path is None:
            return
        try:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(f"[supervisor {datetime.datetime.now().isoformat(' ', 'milliseconds')}] {message}\n")
        except OSError as exc:
            log.warning("run %s: cannot write to %s (%s)", self.run_id, self.log_path, exc)

    def _on_signal(self, signum, frame) -> None:
        self.terminated_by = signum

    # -- 3. watch -------------------------------------------------------------------------------

    def heartbeat(self) -> None:
        """Write heartbeat_at and running_s while this attempt owns the active run."""
        now_m = time.monotonic()
        Run.objects.filter(pk=self.run_id, attempt=self.attempt, status__in=list(ACTIVE_STATUSES)).update(
            heartbeat_at=timezone.now(), running_s=F("running_s") + (now_m - self._accounted_at)
        )
        self._accounted_at = now_m
        self._heartbeat_at = now_m

    def read_status(self) -> str | None:
        """The run's status while this attempt owns the active run; None if it no longer does."""
        row = Run.objects.filter(pk=self.run_id).values_list("status", "attempt").first()
        if row is None or row[1] != self.attempt or row[0] not in ACTIVE_STATUSES:
            return None
        return row[0]

    def _signal_child(self, sig: int, why: str, group: bool = False) -> None:
        """Send `sig` to the trainer (`group`: to its whole process group); log and record why."""
        if self.proc is None or self.proc.poll() is not None:
            return
        to = f"the trainer's process group (pid {self.proc.pid})" if group else f"trainer pid {self.proc.pid}"
        log.warning(
            "run %s attempt %s: %s; sending %s to %s", self.run_id, self.attempt, why, signal.Signals(sig).name, to
        )
        self.note(f"{why}: sending {signal.Signals(sig).name} to {to}")
        try:
            if group:
                signal_group(self.proc, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            return
        try:
            Run(pk=self.run_id, attempt=self.attempt).add_event(
                f"{why}: {signal.Signals(sig).name} sent to the trainer", level="warning", kind="system"
            )
        except DatabaseError:
            pass

    def watch_step(self) -> None:
        """One supervision tick: read the status (heartbeat when due), then end a stop that is
        taking too long: a cancel by SIGKILL after the short grace, a pause by SIGTERM, then SIGKILL."""
        now_m = time.monotonic()
        try:
            if now_m - self._heartbeat_at >= self.heartbeat_s:
                self.heartbeat()
            status = self.read_status()
        except DatabaseError as exc:
            log.warning("run %s: heartbeat or status read failed (%s)", self.run_id, exc)
            close_old_connections()
            status = RunStatus.RUNNING  # unknown: change nothing this tick
        if self.terminated_by is None and shutting_down():
            self.terminated_by = signal.SIGTERM
        if self.terminated_by is not None and self.term_sent_at is None:
            self._signal_child(signal.SIGTERM, "worker stopping")
            self.term_sent_at = now_m
        if status in (RunStatus.CANCELLING, RunStatus.PAUSING, None) and self.stop_seen_at is None:
            self.stop_seen_at = now_m
        if status == RunStatus.CANCELLING and self.cancel_seen_at is None:
            self.cancel_seen_at = now_m
        if status is None and self.cancel_seen_at is not None and not self.killed:
            # the trainer wrote its final status (cancelled, pruned) and is finishing up (the compare
            # snapshot), or another attempt took the run over: no cancel kill; the stop's grace, from now
            self.cancel_seen_at = None
            self.stop_seen_at = now_m
        if self.cancel_seen_at is not None and not self.killed and now_m - self.cancel_seen_at >= self.cancel_grace_s:
            self._signal_child(
                signal.SIGKILL, f"trainer still running {self.cancel_grace_s:g} s after the cancel request", group=True
            )
            self.killed = True
        if (
            self.stop_seen_at is not None
            and self.term_sent_at is None
            and now_m - self.stop_seen_at >= self.stop_grace_s
        ):
            what = "pause request" if status else "run stopped being this attempt's"
            self._signal_child(signal.SIGTERM, f"trainer still running {self.stop_grace_s:g} s after the {what}")
            self.term_sent_at = now_m
        if self.term_sent_at is not None and not self.killed and now_m - self.term_sent_at >= self.kill_grace_s:
            self._signal_child(
                signal.SIGKILL, f"trainer still running {self.kill_grace_s:g} s after SIGTERM", group=True
            )
            self.killed = True

    def next_tick_s(self) -> float:
        """Seconds to the next tick: PLATFORM_STATUS_POLL_S, or less when a cancel's kill is due sooner."""
        if self.cancel_seen_at is None or self.killed:
            return self.poll_s
        due_s = self.cancel_seen_at + self.cancel_grace_s - time.monotonic()
        return min(self.poll_s, max(due_s, 0.01))

    def wait(self) -> int:
        assert self.proc is not None
        while True:
            try:
                return self.proc.wait(timeout=self.next_tick_s())
            except subprocess.TimeoutExpired:
                self.watch_step()

    # -- 4. make sure the run ends in a final status ----------------------------------------------

    def finalize(self, returncode: int) -> str:
        now_m = time.monotonic()
        Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(
            running_s=F("running_s") + (now_m - self._accounted_at)
        )
        self._accounted_at = now_m
        run = Run.objects.filter(pk=self.run_id).first()
        if run is None or run.attempt != self.attempt or run.status not in ACTIVE_STATUSES:
            return run.status if run else "missing"  # the child wrote the final status (or lost the run)
        if self.terminated_by is not None and run.status == RunStatus.RUNNING:
            # The worker is going away and the trainer did not finish in time: leave the run
            # active; its heartbeat stops and the reaper requeues it.
            log.warning("run %s: worker stopping before the trainer ended; the reaper will requeue it", run.pk)
            return run.status
        now = timezone.now()
        how = f"exit code {returncode}" if returncode >= 0 else f"killed by {_signal_name(-returncode)}"
        if self.stop_seen_at is not None:
            how += f", {time.monotonic() - self.stop_seen_at:.1f} s after the request was seen"
        stopped = run.stopped_status
        if run.status == RunStatus.CANCELLING and run.transition(
            stopped, attempt=self.attempt, finished_at=now, note=f"{stopped}; the trainer was stopped ({how})"
        ):
            self.note(f"trainer stopped ({how}); run {run.status}")
        elif run.status == RunStatus.PAUSING and run.transition(
            RunStatus.PAUSED,
            attempt=self.attempt,
            finished_at=now,
            note=f"paused; the trainer was stopped ({how}); resumes from the newest checkpoint",
        ):
            self.note(f"trainer stopped ({how}); run paused")
        else:
            tail = tail_text(self.log_path, 30)
            error = f"trainer exited ({how}) without reporting a result. Last output:\n{tail}".rstrip()
            self.note(f"trainer exited ({how}) without reporting a result; run failed")
            run.transition(
                RunStatus.FAILED, attempt=self.attempt, error=error, finished_at=now, note=error, note_level="error"
            )
        run.refresh_from_db()
        return run.status

    def finalize_retrying(self, returncode: int, tries: int = FINALIZE_TRIES) -> str:
        """`finalize`, tried again (PLATFORM_HEARTBEAT_S apart) when the database fails: a passing
        hiccup must not leave the run cancelling or pausing until the reaper notices (its
        compare-and-sets make a second try safe)."""
        for _ in range(tries - 1):
            try:
                return self.finalize(returncode)
            except DatabaseError as exc:
                log.warning("run %s: cannot write the final status (%s); trying again", self.run_id, exc)
                close_old_connections()
                time.sleep(self.heartbeat_s)
        return self.finalize(returncode)

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
                run.transition(
                    RunStatus.FAILED,
                    attempt=self.attempt,
                    error=error,
                    finished_at=timezone.now(),
                    note=error,
                    note_level="error",
                )
                return RunStatus.FAILED
            returncode = self.wait()
            return self.finalize_retrying(returncode)
        finally:
            if self.proc is not None and self.proc.poll() is None:  # never leave a trainer behind
                signal_group(self.proc, signal.SIGKILL)  # nor anything it started
                self.proc.wait()
            if in_main:
                signal.signal(signal.SIGTERM, previous)


def supervise(run_id: int, attempt: int, worker_host: str = "") -> str:
    return Supervisor(run_id, attempt, worker_host).run()

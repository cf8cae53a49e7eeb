"""The supervisor: what the Celery task does for one attempt of a run.

1. Compare-and-set queued -> running for exactly this attempt. Losing means the message is stale
   or redelivered, or the run was cancelled meanwhile: return without running anything, so a Run
   never runs twice.
2. Start the trainer as a child process (`manage.py execute_run RUN ATTEMPT`) leading a process
   group of its own: JAX stays out of the Celery worker and the accelerator's memory is freed when
   the child exits. Its output goes to <run dir>/logs/attempt-N.log, where the supervisor also
   notes the trainer's pid and any signal it sends.
3. While it runs: a thread of this process writes heartbeat_at and running_s every
   PLATFORM_HEARTBEAT_S (only while this attempt owns the active run) for as long as the trainer
   process is alive, whatever the trainer does: a compilation of many minutes reports no step, yet
   the worker is alive and must not be reaped. The watch loop reads the run's status and step every
   PLATFORM_STATUS_POLL_S (one indexed read). The trainer stops by itself at its next step or
   micro-batch boundary; but it cannot look while it compiles or is inside a step, so:
   - cancel: needs no checkpoint. A trainer still running PLATFORM_CANCEL_GRACE_S after the
     request was seen is SIGKILLed with its process group; the steps it reported and its
     checkpoints so far stay. While the trainer is writing a checkpoint (its phase marker says
     "checkpoint": runner.stalls) the kill waits for it to finish, up to PLATFORM_STOP_GRACE_S, so a
     cancelled run keeps the newest checkpoint it was writing too. A trainer that has written its
     final status by then is not killed: it is finishing up (the compare snapshot) and gets the
     pause's grace below.
   - pause: needs a checkpoint. A trainer still running PLATFORM_STOP_GRACE_S after the request
     gets SIGTERM (it checkpoints and pauses at its next boundary), then SIGKILL after
     PLATFORM_KILL_GRACE_S (the run is paused at its newest earlier checkpoint). The same holds
     once the run stopped being this attempt's (the trainer wrote its final status and is
     exiting, or the run was requeued and another attempt owns it: the notes say "requeued").
   - a stall: a running trainer that reports nothing (no step, no phase change) for several times
     its usual step time has its threads' Python stacks and phases recorded into the attempt's
     log, the run's events and a `stalled` alert (runner.stalls).
4. When the child exits without having written a final status: cancelling -> cancelled,
   pausing -> paused, running -> failed with the tail of its output. The event says how the
   trainer ended and how long after the request.

If the worker is stopping (this process gets SIGTERM, or runner.workers.shutting_down()), the
child gets SIGTERM: it checkpoints and the run goes back on the queue (see runner.attempt).
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from experiments.models import ACTIVE_STATUSES, MetricPoint, Run, RunStatus
from experiments.signals import run_stalled
from runner import stalls
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
        self._accounted_at = time.monotonic()  # running_s is accounted up to here
        self._accounting = threading.Lock()  # the heartbeat thread and finalize both account running_s
        self._beating = threading.Event()  # set: the heartbeat thread stops
        self._beat_thread: threading.Thread | None = None
        self.run_dir = ""
        self.step: int | None = None  # the run's step, as last read
        self.owner_attempt: int | None = None  # the attempt that owns the run, as last read
        self.stall_watch: stalls.StallWatch | None = None
        self._stall_checked_at = float("-inf")
        self.checkpoint_wait = False  # a cancel's kill is waiting for the trainer's checkpoint
        self.checkpoint_wait_noted = False

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
        self.run_dir = run_directory(run)
        log_dir = Path(self.run_dir) / "logs"
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
        self.stall_watch = stalls.StallWatch(
            settings.PLATFORM_STALL_FACTOR,
            settings.PLATFORM_STALL_MIN_S,
            settings.PLATFORM_STALL_FIRST_STEP_S,
            self._prior_step_s(run),
            time.monotonic(),
        )
        self.start_heartbeat()
        return self.proc

    def _prior_step_s(self, run: Run) -> float | None:
        """The usual step time before this attempt measures one: the median `timing/step_s` of the
        run's newest reported steps (a resumed run's earlier attempts), else None."""
        try:
            values = list(
                MetricPoint.objects.filter(run_id=run.pk, name=stalls.STEP_METRIC, value__isnull=False)
                .order_by("-step")
                .values_list("value", flat=True)[: stalls.STEP_WINDOW]
            )
        except DatabaseError:
            return None
        finite = [v for v in values if math.isfinite(v) and v > 0]
        return statistics.median(finite) if finite else None

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
        with self._accounting:
            now_m = time.monotonic()
            Run.objects.filter(pk=self.run_id, attempt=self.attempt, status__in=list(ACTIVE_STATUSES)).update(
                heartbeat_at=timezone.now(), running_s=F("running_s") + (now_m - self._accounted_at)
            )
            self._accounted_at = now_m

    def start_heartbeat(self) -> threading.Thread:
        """The heartbeat thread: a beat every PLATFORM_HEARTBEAT_S while the trainer process is alive,
        whatever the watch loop and the trainer are doing, until `stop_heartbeat`."""
        self._beating.clear()
        self._beat_thread = threading.Thread(
            target=self._beat_loop, name=f"heartbeat-run-{self.run_id}-attempt-{self.attempt}", daemon=True
        )
        self._beat_thread.start()
        return self._beat_thread

    def _beat_loop(self) -> None:
        try:
            while not self._beating.wait(self.heartbeat_s):
                if self.proc is not None and self.proc.poll() is not None:
                    return  # the trainer has exited: finalize accounts the rest
                try:
                    self.heartbeat()
                except DatabaseError as exc:
                    log.warning("run %s: cannot write the heartbeat (%s)", self.run_id, exc)
                    close_old_connections()
        finally:
            connection.close()  # this thread's own connection

    def stop_heartbeat(self) -> None:
        self._beating.set()
        if self._beat_thread is not None:
            self._beat_thread.join(timeout=max(10.0, 2 * self.heartbeat_s))
            self._beat_thread = None

    def read_status(self) -> str | None:
        """The run's status while this attempt owns the active run; None if it no longer does.
        Notes the run's step and owning attempt too (the stall watch; the notes of a requeue)."""
        row = Run.objects.filter(pk=self.run_id).values_list("status", "attempt", "step").first()
        if row is None:
            return None
        status, self.owner_attempt, step = row
        if self.owner_attempt != self.attempt or status not in ACTIVE_STATUSES:
            return None
        self.step = step
        return status

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
            status = self.read_status()
        except DatabaseError as exc:
            log.warning("run %s: status read failed (%s)", self.run_id, exc)
            close_old_connections()
            status = RunStatus.RUNNING  # unknown: change nothing this tick
        else:
            if status == RunStatus.RUNNING:
                self.watch_for_stall(now_m)
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
        if (
            self.cancel_seen_at is not None
            and not self.killed
            and now_m - self.cancel_seen_at >= self.cancel_grace_s
            and not self.waits_for_checkpoint(now_m)
        ):
            self._signal_child(
                signal.SIGKILL, f"trainer still running {self.cancel_grace_s:g} s after the cancel request", group=True
            )
            self.killed = True
        if (
            self.stop_seen_at is not None
            and self.term_sent_at is None
            and now_m - self.stop_seen_at >= self.stop_grace_s
        ):
            what = "pause request" if status else self.lost_run_text()
            self._signal_child(signal.SIGTERM, f"trainer still running {self.stop_grace_s:g} s after the {what}")
            self.term_sent_at = now_m
        if self.term_sent_at is not None and not self.killed and now_m - self.term_sent_at >= self.kill_grace_s:
            self._signal_child(
                signal.SIGKILL, f"trainer still running {self.kill_grace_s:g} s after SIGTERM", group=True
            )
            self.killed = True

    def lost_run_text(self) -> str:
        """Why the run is no longer this attempt's: requeued (another attempt owns it) or ended."""
        if self.owner_attempt is not None and self.owner_attempt > self.attempt:
            return f"run was requeued (attempt {self.owner_attempt} owns it)"
        return "run stopped being this attempt's"

    def waits_for_checkpoint(self, now_m: float) -> bool:
        """A cancel's kill waits while the trainer writes a checkpoint (its phase marker says so), up
        to PLATFORM_STOP_GRACE_S after the cancel was seen: the run keeps that checkpoint."""
        self.checkpoint_wait = (
            self.cancel_seen_at is not None
            and now_m - self.cancel_seen_at < self.stop_grace_s
            and bool(self.run_dir)
            and stalls.checkpointing(self.run_dir, self.attempt)
        )
        if self.checkpoint_wait and not self.checkpoint_wait_noted:
            self.checkpoint_wait_noted = True
            why = f"cancel: the trainer is writing a checkpoint; SIGKILL waits for it (at most {self.stop_grace_s:g} s)"
            log.info("run %s attempt %s: %s", self.run_id, self.attempt, why)
            self.note(why)
            try:
                Run(pk=self.run_id, attempt=self.attempt).add_event(why, kind="system")
            except DatabaseError:
                pass
        return self.checkpoint_wait

    # -- stalls ---------------------------------------------------------------------------------

    def watch_for_stall(self, now_m: float) -> None:
        """Feed the stall watch the step just read, and every PLATFORM_HEARTBEAT_S the phase
        markers; report a stall once it is due (runner.stalls). Never raises."""
        watch = self.stall_watch
        if watch is None or self.proc is None:
            return
        try:
            watch.saw_step(self.step, now_m)
            if now_m - self._stall_checked_at < self.heartbeat_s:
                return
            self._stall_checked_at = now_m
            watch.saw_stamp(stalls.progress_stamp(self.run_dir, self.attempt), now_m)
            if watch.due(now_m) and self.proc.poll() is None:
                self.report_stall(now_m)
        except Exception:  # noqa: BLE001 - a report is a diagnosis; supervision goes on
            log.exception("run %s: stall report failed", self.run_id)

    def report_stall(self, now_m: float) -> stalls.StallReport:
        """Take the trainer's stacks and phases; write them into the attempt's log and the run's
        events; send run_stalled (the alerts app's `stalled` notification)."""
        watch = self.stall_watch
        assert watch is not None and self.proc is not None
        watch.reported = True
        watch.stalls += 1
        quiet_s = watch.quiet_s(now_m)
        report = stalls.collect_report(self.proc.pid, self.run_dir, self.attempt, quiet_s, self.step, watch)
        text = report.text()
        log.warning("run %s attempt %s stalled: %s", self.run_id, self.attempt, report.headline)
        self.note(text)
        Run(pk=self.run_id, attempt=self.attempt).add_event(
            text[: stalls.MAX_EVENT_CHARS], level="warning", kind="system"
        )
        run_stalled.send(
            sender=Run,
            run_id=self.run_id,
            attempt=self.attempt,
            key=f"stalled:{self.attempt}:step-{self.step or 0}:{watch.stalls}",
            report=report,
        )
        return report

    def next_tick_s(self) -> float:
        """Seconds to the next tick: PLATFORM_STATUS_POLL_S, or less when a cancel's kill is due sooner."""
        if self.cancel_seen_at is None or self.killed or self.checkpoint_wait:
            return self.poll_s
        due_s = self.cancel_seen_at + self.cancel_grace_s - time.monotonic()
        return min(self.poll_s, max(due_s, 0.01))

    def wait(self) -> int:
        assert self.proc is not None
        try:
            while True:
                try:
                    return self.proc.wait(timeout=self.next_tick_s())
                except subprocess.TimeoutExpired:
                    self.watch_step()
        finally:
            self.stop_heartbeat()  # before finalize accounts the last of running_s

    # -- 4. make sure the run ends in a final status ----------------------------------------------

    def finalize(self, returncode: int) -> str:
        with self._accounting:
            now_m = time.monotonic()
            Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(
                running_s=F("running_s") + (now_m - self._accounted_at)
            )
            self._accounted_at = now_m
        run = Run.objects.filter(pk=self.run_id).first()
        if run is None or run.attempt != self.attempt or run.status not in ACTIVE_STATUSES:
            if run is not None and run.attempt > self.attempt:
                self.note(f"trainer exited (code {returncode}); the run was requeued: attempt {run.attempt} owns it")
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
            self.stop_heartbeat()
            if in_main:
                signal.signal(signal.SIGTERM, previous)


def supervise(run_id: int, attempt: int, worker_host: str = "") -> str:
    return Supervisor(run_id, attempt, worker_host).run()

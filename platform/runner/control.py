"""`DatabaseControl`: the trainer asks it between steps (and between optimizer updates) whether to
go on; it answers from the Run row's status and attempt, read at most every `poll_interval_s`
(default PLATFORM_STATUS_POLL_S, 0.5 s). It is not asked while the trainer compiles or is inside a
step: there the supervisor enforces a cancel by SIGKILL (runner.supervisor).

  running, this attempt                      -> CONTINUE
  pausing                                    -> PAUSE (checkpoint, then return "paused")
  cancelling                                 -> STOP
  another attempt owns the run, or the run
  is no longer active (or gone)              -> STOP (write nothing more)
  SIGTERM / SIGINT received by this process  -> PAUSE, like the CLI's Ctrl-C (worker shutdown)

`stopped_as()` tells the trainer what its STOP is: "requeued" when another attempt owns the run (the
reaper put it back on the queue: a newer attempt resumes it from the newest checkpoint), else
"cancelled" (a sweep's pruned trial is named pruned by runner.run_files). So a superseded trainer
logs "run requeued at step N", never "run cancelled".
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from trainers.step.hooks import Action, Control

log = logging.getLogger(__name__)


class DatabaseControl(Control):
    def __init__(
        self,
        run_id: int,
        attempt: int,
        poll_interval_s: float | None = None,
        install_signal_handlers: bool = True,
        parent_pid: int | None = None,
    ):
        self.run_id = run_id
        self.attempt = attempt
        self.poll_interval_s = settings.PLATFORM_STATUS_POLL_S if poll_interval_s is None else poll_interval_s
        self.parent_pid = parent_pid  # stop if this process is orphaned (its supervisor died)
        self.signalled: int | None = None  # the signal that asked for a pause, if any
        self._checked_at = float("-inf")
        self._action = Action.CONTINUE
        self.status: str | None = None  # as last read
        self.owner_attempt: int | None = None  # the attempt that owns the run, as last read
        self.orphaned = False
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        if self.signalled is None:
            log.warning(
                "run %s: %s received: pausing after this step (checkpoint)", self.run_id, signal.Signals(signum).name
            )
        self.signalled = signum

    def read(self) -> Action:
        """The action the database asks for now (no caching)."""
        try:
            row = Run.objects.filter(pk=self.run_id).values_list("status", "attempt").first()
        except DatabaseError as exc:  # a passing database hiccup: keep the previous answer
            log.warning("run %s: cannot read status (%s); keeping %s", self.run_id, exc, self._action.value)
            close_old_connections()
            return self._action
        if row is None:
            self.status = None
            return Action.STOP
        self.status, attempt = row
        if attempt > self.attempt and self.owner_attempt != attempt:
            log.warning("run %s: attempt %s was requeued as attempt %s; stopping", self.run_id, self.attempt, attempt)
        self.owner_attempt = attempt
        if attempt != self.attempt or self.status not in ACTIVE_STATUSES:
            return Action.STOP
        if self.status == RunStatus.CANCELLING:
            return Action.STOP
        if self.status == RunStatus.PAUSING:
            return Action.PAUSE
        return Action.CONTINUE

    def stopped_as(self) -> str:
        """ "requeued" once a newer attempt owns the run, else "cancelled" (see the module docstring)."""
        if self.owner_attempt is not None and self.owner_attempt > self.attempt:
            return "requeued"
        return "cancelled"

    def poll(self) -> Action:
        now = time.monotonic()
        if now - self._checked_at >= self.poll_interval_s:
            self._checked_at = now
            self._action = self.read()
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                log.error("run %s: supervisor %s is gone; stopping", self.run_id, self.parent_pid)
                self.parent_pid = None
                self.orphaned = True
            if self.orphaned:
                self._action = Action.STOP
        if self._action is Action.CONTINUE and self.signalled is not None:
            return Action.PAUSE
        return self._action

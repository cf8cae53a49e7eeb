"""The supervisor's heartbeat thread, its requeue wording, a cancel that waits for a checkpoint being
written, and the stall watch: a quiet trainer gets every thread's Python stack and phase recorded
into the run's log, its events and a `stalled` alert (runner.stalls). The trainers here are small
stand-in processes that mark their phases with trainers.step.phases, as the real one does."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone
from runner_testlib import (
    alive,
    fresh_artifacts,  # noqa: F401 (fixture)
    make_run_with_dir,
    wait_for,
)

from alerts.models import AlertDelivery, AlertRule
from experiments.models import Run, RunEvent
from runner import stalls
from runner import supervisor as supervisor_mod
from runner.attempt import finish_run
from runner.control import DatabaseControl
from runner.recovery import reap_stale_runs, restart_or_fail
from runner.services import request_cancel
from trainers.step.hooks import Action, TrainResult

ROOT = str(django_settings.REPO_ROOT)


@pytest.fixture(autouse=True)
def fresh_artifacts():
    import shutil

    shutil.rmtree(django_settings.ARTIFACTS_DIR, ignore_errors=True)
    django_settings.ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)


pytestmark = pytest.mark.usefixtures("fresh_artifacts")


def make_run(user, status="queued", attempt=1, **fields) -> Run:
    return make_run_with_dir(user, status, attempt, **fields)


def run_dir(run: Run) -> str:
    return str(django_settings.ARTIFACTS_DIR / run.run_dir)


def stand_in(monkeypatch, body: str, **values) -> None:
    """The supervisor's trainer child becomes `body` (Python; `phases` imported, the run's marker
    installed at runner.stalls' paths as runner.attempt installs it); `values` are formatted in."""

    def command(sup):
        script = textwrap.dedent("""
            import os, signal, sys, threading, time
            sys.path.insert(0, {root!r})
            from trainers.step import phases
            phases.install({marker!r}, {stacks!r})
        """).format(
            root=ROOT,
            marker=stalls.phase_path(sup.run_dir, sup.attempt),
            stacks=stalls.stacks_path(sup.run_dir, sup.attempt),
        ) + textwrap.dedent(body).format(**values)
        return [sys.executable, "-c", script]

    monkeypatch.setattr(supervisor_mod.Supervisor, "command", command)


class Supervising:
    """supervise(run, attempt) in a thread of this process."""

    def __init__(self, run: Run, attempt: int = 1):
        self.run, self.result = run, {}
        self.thread = threading.Thread(target=self._go, args=(attempt,), name="test-supervisor")
        self.thread.start()

    def _go(self, attempt: int) -> None:
        try:
            self.result["status"] = supervisor_mod.supervise(self.run.pk, attempt, "test-host")
        finally:
            connection.close()  # this thread's own connection

    def join(self, timeout_s: float = 60) -> str:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the supervisor did not end"
        return self.result["status"]


def events(run: Run) -> list[str]:
    return list(RunEvent.objects.filter(run=run).order_by("pk").values_list("message", flat=True))


def attempt_log(run: Run, attempt: int = 1) -> str:
    path = django_settings.ARTIFACTS_DIR / run.run_dir / "logs" / f"attempt-{attempt}.log"
    return path.read_text(errors="replace") if path.exists() else ""


# -- 1. the heartbeat --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_goes_on_while_the_watch_loop_is_held_up_and_the_trainer_reports_nothing(
    django_user_model, monkeypatch, settings
):
    """A trainer that reports no step (as while it compiles) and a watch loop held up for longer
    than the reaper's staleness (here: one slow status read) do not stop the heartbeat: its own thread
    beats while the trainer process lives, so the reaper never requeues the run."""
    settings.PLATFORM_HEARTBEAT_S = 0.2
    settings.PLATFORM_STATUS_POLL_S = 0.1
    settings.PLATFORM_STALE_AFTER_S = 1.5
    settings.PLATFORM_STALL_FIRST_STEP_S = 3600
    started = threading.Event()
    stand_in(monkeypatch, "time.sleep(4)")
    read_status = supervisor_mod.Supervisor.read_status
    held = []

    def slow_first_read(sup):
        if not held:
            held.append(time.monotonic())
            started.set()
            time.sleep(3)  # twice PLATFORM_STALE_AFTER_S: before, no heartbeat was written meanwhile
        return read_status(sup)

    monkeypatch.setattr(supervisor_mod.Supervisor, "read_status", slow_first_read)
    run = make_run(django_user_model.objects.create_user("carol"))
    supervising = Supervising(run)
    beats, reaped = set(), []
    try:
        assert started.wait(60)
        while supervising.thread.is_alive():
            beats.add(Run.objects.filter(pk=run.pk).values_list("heartbeat_at", flat=True).first())
            reaped += reap_stale_runs()
            time.sleep(0.1)
        status = supervising.join()
    finally:
        connection.close()
    assert reaped == [] and len(beats) >= 5, (reaped, beats)
    run.refresh_from_db()
    assert (status, run.status, run.attempt, run.restarts) == ("failed", "failed", 1, 0)  # exited without a result
    assert "exit code 0" in run.error and run.running_s >= 3


# -- 1b. a requeue is called a requeue ---------------------------------------------------------


def test_a_superseded_trainer_stops_as_requeued_and_writes_nothing(alice, sent_messages):
    """The reaper requeued the run (attempt 2 owns it): the old attempt's control stops it as
    "requeued" (the trainer logs "run requeued at step N"), and its end changes nothing."""
    run = make_run(alice, status="running", attempt=1, heartbeat_at=timezone.now() - dt.timedelta(seconds=60))
    control = DatabaseControl(run.pk, attempt=1, poll_interval_s=0, install_signal_handlers=False)
    assert control.poll() is Action.CONTINUE and control.stopped_as() == "cancelled"
    assert restart_or_fail(run, "worker w lost (heartbeat 60 s old)", Q(), timezone.now()) == "requeued"
    assert control.poll() is Action.STOP and control.stopped_as() == "requeued"
    result = TrainResult("requeued", 3, "digest", {}, run_dir(run))
    assert finish_run(Run.objects.get(pk=run.pk), 1, result, control) == ""
    run.refresh_from_db()
    assert (run.status, run.attempt, run.finished_at) == ("queued", 2, None)
    cancelling = make_run(alice, status="cancelling", attempt=1)
    other = DatabaseControl(cancelling.pk, attempt=1, poll_interval_s=0, install_signal_handlers=False)
    assert other.poll() is Action.STOP and other.stopped_as() == "cancelled"


def test_the_supervisor_of_a_requeued_attempt_says_requeued(alice, settings, tmp_path):
    """The supervisor of a superseded attempt names the requeue in its signal's event and in the
    attempt's log, and leaves the run as the newer attempt has it."""
    settings.PLATFORM_STOP_GRACE_S = 0
    run = make_run(alice, status="queued", attempt=3)  # requeued: attempt 3 owns it, not attempt 2
    sup = supervisor_mod.Supervisor(run.pk, 2)
    sup.log_path = tmp_path / "attempt-2.log"
    sup.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        sup.watch_step()
        assert sup.term_sent_at is not None
    finally:
        sup.proc.kill()
        sup.proc.wait()
    assert events(run) == [
        "trainer still running 0 s after the run was requeued (attempt 3 owns it): SIGTERM sent to the trainer"
    ]
    assert sup.finalize(-9) == "queued"
    log = sup.log_path.read_text()
    assert "the run was requeued (attempt 3 owns it): sending SIGTERM" in log
    assert "trainer exited (code -9); the run was requeued: attempt 3 owns it" in log
    assert "cancel" not in log


# -- 2. a cancel keeps the checkpoint being written ----------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("phase, kept", [("checkpoint", True), ("generation", False)])
def test_a_cancel_waits_for_a_checkpoint_being_written_and_no_longer(
    django_user_model, monkeypatch, settings, tmp_path, phase, kept
):
    """Cancelled while its trainer writes a checkpoint (phase "checkpoint", longer than the cancel's
    grace), the trainer is SIGKILLed only once the checkpoint is done: the run keeps it. In any other
    phase the kill comes after the grace, as before."""
    settings.PLATFORM_HEARTBEAT_S = 0.2
    settings.PLATFORM_STATUS_POLL_S = 0.1
    settings.PLATFORM_CANCEL_GRACE_S = 0.3
    settings.PLATFORM_STOP_GRACE_S = 60
    settings.PLATFORM_STALL_FIRST_STEP_S = 3600
    inside, written = tmp_path / "inside", tmp_path / "written"
    stand_in(
        monkeypatch,
        """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with phases.phase({phase!r}, "step 2"):
            open({inside!r}, "w").close()
            time.sleep(2.5)
            open({written!r}, "w").close()
        with phases.phase("step", "3"):
            time.sleep(600)  # never asks the control: the kill ends it
        """,
        phase=phase,
        inside=str(inside),
        written=str(written),
    )
    run = make_run(django_user_model.objects.create_user("carol"))
    supervising = Supervising(run)
    wait_for(inside.exists, 60, "the stand-in to enter its phase")
    assert request_cancel(Run.objects.get(pk=run.pk))
    assert supervising.join() == "cancelled"
    assert written.exists() is kept
    messages = events(run)
    assert any("after the cancel request: SIGKILL sent" in m for m in messages), messages
    waited = "cancel: the trainer is writing a checkpoint; SIGKILL waits for it (at most 60 s)"
    assert (waited in messages) is kept, messages


# -- 3. a stall says where it is stuck -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_quiet_trainer_gets_its_stacks_and_phase_recorded_once(django_user_model, monkeypatch, settings, tmp_path):
    """A stand-in trainer that sleeps inside "step 1 > generation" reports nothing for longer than the
    stall threshold: the supervisor takes every thread's stack (SIGUSR1) and phase, and writes them
    into the attempt's log, a warning event and a `stalled` alert of each rule watching stalls. Once
    per stall: the trainer stays quiet, and nothing more is reported. Its heartbeat goes on.

    The one-second threshold is set once the supervisor has seen the stand-in's last phase change:
    a loaded host can take longer than that to start Python, which is a stall of its own."""
    settings.PLATFORM_HEARTBEAT_S = 0.2
    settings.PLATFORM_STATUS_POLL_S = 0.1
    settings.PLATFORM_CANCEL_GRACE_S = 0.3
    settings.PLATFORM_STALL_FIRST_STEP_S = 3600
    settings.PLATFORM_STALL_MIN_S = 1
    watches: list[stalls.StallWatch] = []

    class RecordedWatch(stalls.StallWatch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            watches.append(self)

    monkeypatch.setattr(stalls, "StallWatch", RecordedWatch)
    quiet = tmp_path / "quiet"
    stand_in(
        monkeypatch,
        """
        collector_in_phase = threading.Event()

        def collecting():
            with phases.phase("generation", "prompts 0-7 (step 2)"):
                collector_in_phase.set()
                time.sleep(600)

        def sleeping_in_generation():
            with phases.phase("step", "1"), phases.phase("generation"):
                open({quiet!r}, "w").close()
                time.sleep(600)

        threading.Thread(target=collecting, name="rollout-collector", daemon=True).start()
        collector_in_phase.wait()  # every phase change comes before the quiet stretch begins
        sleeping_in_generation()
        """,
        quiet=str(quiet),
    )
    carol = django_user_model.objects.create_user("carol")
    run = make_run(carol)
    watching = AlertRule.objects.create(owner=carol, events=["stalled"], channel="email", target="c@example.com")
    AlertRule.objects.create(owner=carol, events=["failed"], channel="email", target="c@example.com")
    supervising = Supervising(run)
    try:
        wait_for(quiet.exists, 60, "the stand-in to enter its last phase")
        wait_for(lambda: watches and watches[0].stamp == stalls.progress_stamp(run_dir(run), 1), 60, "the phase seen")
        watches[0].first_step_s = 1
        reports = lambda: [m for m in events(run) if m.startswith("stalled: ")]  # noqa: E731
        wait_for(reports, 60, "a stall report")
        time.sleep(2.5)  # more than the threshold again: still one report (the trainer stayed quiet)
        assert len(reports()) == 1
        assert reap_stale_runs() == []  # the worker beats on: the run is not lost
    finally:
        request_cancel(Run.objects.get(pk=run.pk))
        supervising.join()
        connection.close()
    (report,) = reports()
    lines = report.splitlines()
    assert lines[0].startswith("stalled: the trainer reported nothing for ")
    assert "before its first step (no usual step time yet; 1.0 s of quiet counts as a stall" in lines[0]
    assert lines[1].startswith("MainThread: in step 1 > generation (for ") and lines[1].endswith(
        "waiting on generation"
    )
    assert lines[2].startswith("rollout-collector: in generation prompts 0-7 (step 2) (for ")
    assert "Python stacks of the trainer's threads (most recent call first):" in report
    assert 'in sleeping_in_generation' in report and "in collecting" in report
    assert "  [thread MainThread; in step 1 > generation (for " in report
    assert report in attempt_log(run)
    (alert,) = AlertDelivery.objects.filter(run=run)
    assert (alert.rule_id, alert.event, alert.key, alert.status) == (
        watching.pk,
        "stalled",
        "stalled:1:step-0:1",
        "pending",
    )
    assert alert.message.startswith(f'Run #{run.pk} of "e" has stalled: the trainer reported nothing for ')
    assert f"http://localhost:8000/runs/{run.pk}/\nWhere it is: MainThread: in step 1 > generation" in alert.message
    assert "in sleeping_in_generation" in alert.message


def test_the_stall_threshold_follows_the_usual_step_time():
    watch = stalls.StallWatch(factor=5, min_s=60, first_step_s=1800, prior_step_s=None, now=0.0)
    watch.saw_step(0, 0.0)
    assert watch.threshold_s() == 1800 and not watch.due(1799) and watch.due(1800)  # the first step compiles
    watch.saw_step(1, 400.0)  # step 1 done after its compile
    assert watch.stepped and watch.usual_step_s() is None and watch.threshold_s() == 60
    for step in range(2, 8):
        watch.saw_step(step, 400.0 + 30 * (step - 1))  # 30 s a step
    assert watch.usual_step_s() == 30 and watch.threshold_s() == 150
    assert not watch.due(580 + 149) and watch.due(580 + 150)
    watch.reported = True
    assert not watch.due(10_000)  # once per stall
    watch.saw_stamp((("m", 1),), 10_000.0)  # a phase boundary is news
    assert not watch.reported and not watch.due(10_149) and watch.due(10_150)
    resumed = stalls.StallWatch(factor=5, min_s=60, first_step_s=1800, prior_step_s=100.0, now=0.0)
    assert resumed.threshold_s() == 1800 and resumed.usual_step_s() == 100
    resumed.saw_step(30, 0.0)
    resumed.saw_step(31, 900.0)
    assert resumed.threshold_s() == 500  # 5 x the earlier attempts' step time until this one has its own


def test_a_trainer_that_marked_no_phase_is_reported_without_signalling_it(tmp_path):
    """No marker (the trainer is still importing, or a gang's driver): no SIGUSR1, whose default
    action would end the process; the report says so."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch = stalls.StallWatch(5, 1, 1, None, 0.0)
        report = stalls.collect_report(proc.pid, str(tmp_path), 1, 5.0, None, watch)
        time.sleep(0.2)
        assert proc.poll() is None and alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert report.where == "the trainer has marked no phase (it is still starting: importing its libraries)"
    assert report.stacks == ""
    assert os.listdir(tmp_path) == []

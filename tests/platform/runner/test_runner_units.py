"""The runner's parts without a Celery worker: database hooks, database control, the supervisor's
compare-and-set and stop escalation (with a stand-in trainer process), the reaper, PDEATHSIG."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone
from runner_testlib import (
    alive,
    fresh_artifacts,  # noqa: F401 (fixture)
    make_run_with_dir,
    wait_for,
)

from experiments.models import (
    Checkpoint,
    Experiment,
    MetricPoint,
    RolloutSample,
    Run,
    RunEvent,
)
from runner import db_hooks as db_hooks_mod
from runner import services, tasks
from runner import supervisor as supervisor_mod
from runner.control import DatabaseControl
from runner.db_hooks import DatabaseHooks
from runner.models import Worker
from runner.recovery import reap_stale_runs
from runner.services import request_cancel
from trainers.step.hooks import Action, RunInfo, TrainResult

pytestmark = pytest.mark.usefixtures("fresh_artifacts")


def make_run(user, status="running", attempt=1, **fields) -> Run:
    return make_run_with_dir(user, status, attempt, **fields)


def metrics(step: int) -> dict[str, float]:
    return {"reward/mean": 0.1 * step, "loss/policy": -step, "timing/step_s": 0.5}


def points(run) -> list[tuple[str, int, float]]:
    return sorted(MetricPoint.objects.filter(run=run).values_list("name", "step", "value"))


# -- DatabaseHooks -----------------------------------------------------------------------------


def test_hooks_batch_flushes_by_interval_and_on_log(alice):
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_step(1, metrics(1))  # the first step flushes at once
    assert MetricPoint.objects.filter(run=run).count() == 3
    hooks.on_samples(
        2, [{"prompt": "1+1=", "completion": "2", "answer": "2", "reward": 1.0, "advantage": 0.5, "correct": True}]
    )
    hooks.on_step(2, metrics(2))
    hooks.on_step(3, metrics(3))
    assert MetricPoint.objects.filter(run=run).count() == 3  # buffered: the interval has not passed
    assert RolloutSample.objects.filter(run=run).count() == 0
    hooks.on_log("hello")
    assert MetricPoint.objects.filter(run=run).count() == 9
    assert hooks.flushes == 2
    run.refresh_from_db()
    assert run.step == 3 and run.latest_reward == pytest.approx(0.3)
    sample = RolloutSample.objects.get(run=run)
    assert (sample.step, sample.completion, sample.reward, sample.extra) == (2, "2", 1.0, {"correct": True})
    assert RunEvent.objects.filter(run=run, message="hello").exists()


def test_hooks_flush_after_interval(alice, monkeypatch):
    # the hooks' clock is a fake one that moves only when told: on a loaded machine more than the
    # interval could pass between two real calls, and step 2 would be written at once
    now_s = [100.0]
    monkeypatch.setattr(
        db_hooks_mod, "time", types.SimpleNamespace(monotonic=lambda: now_s[0], time=time.time, sleep=time.sleep)
    )
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=0.05, background_flush=False)
    hooks.on_step(1, metrics(1))
    now_s[0] += 0.04
    hooks.on_step(2, metrics(2))
    assert MetricPoint.objects.filter(run=run, step=2).count() == 0
    now_s[0] += 0.02
    hooks.on_step(3, metrics(3))
    assert MetricPoint.objects.filter(run=run).count() == 9


@pytest.mark.django_db(transaction=True)
def test_hooks_background_flush_writes_a_waiting_step(django_user_model):
    """A step followed by a long pause (an evaluation, a slow step) still reaches the database."""
    run = make_run(django_user_model.objects.create_user("dave"))
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=0.2)
    hooks.on_step(1, metrics(1))
    hooks.on_step(2, metrics(2))  # buffered: less than 0.2 s since the last flush
    t0 = time.monotonic()
    while not MetricPoint.objects.filter(run=run, step=2).exists():
        assert time.monotonic() - t0 < 15, "step 2 never written (no background flush)"
        time.sleep(0.02)
    assert Run.objects.get(pk=run.pk).step == 2
    hooks.on_end(TrainResult("succeeded", 2, "d", {}, ""))
    assert not hooks._flusher.is_alive()
    assert MetricPoint.objects.filter(run=run).count() == 6


def test_hooks_upsert_and_resume_store_each_step_once(alice):
    run = make_run(alice)
    ckpt_dir = os.path.join(django_settings.ARTIFACTS_DIR, run.run_dir, "checkpoints", "2")
    os.makedirs(ckpt_dir, exist_ok=True)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=0, background_flush=False)
    for step in (1, 2):
        hooks.on_samples(step, [{"prompt": "p", "completion": f"c{step}", "reward": 0.0, "advantage": 0.0}])
        hooks.on_step(step, metrics(step))
    hooks.on_checkpoint(2, ckpt_dir, 1234, {"reward/mean": 0.2, "loss/policy": float("nan")})
    for step in (3, 4):  # the attempt dies after step 4; its checkpoint at 4 never completed
        hooks.on_samples(step, [{"prompt": "p", "completion": f"c{step}", "reward": 0.0, "advantage": 0.0}])
        hooks.on_step(step, metrics(step))
    Checkpoint.objects.create(run=run, step=4, path=f"{run.run_dir}/checkpoints/4")

    resumed = DatabaseHooks(run.pk, attempt=2, flush_interval_s=0, background_flush=False)
    Run.objects.filter(pk=run.pk).update(attempt=2)
    resumed.on_resume(2)
    assert MetricPoint.objects.filter(run=run, step__gt=2).count() == 0
    assert list(RolloutSample.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]
    ckpt = Checkpoint.objects.get(run=run)
    assert (ckpt.step, ckpt.path, ckpt.size_bytes) == (2, f"{run.run_dir}/checkpoints/2", 1234)
    assert ckpt.metrics == {"reward/mean": 0.2, "loss/policy": "NaN"}
    resumed.on_start(RunInfo(config={}, plan_text="plan", start_step=2, max_steps=4, run_dir="", param_count=10))
    for step in (3, 4):
        resumed.on_samples(step, [{"prompt": "p", "completion": f"again{step}", "reward": 0.0, "advantage": 0.0}])
        resumed.on_step(step, {**metrics(step), "reward/mean": 1.0 * step})
    resumed.on_step(4, {**metrics(4), "reward/mean": 9.0})  # the same step again: replaced, not doubled
    resumed.on_end(TrainResult("succeeded", 4, "digest", {}, ""))
    got = points(run)
    assert len(got) == len({(name, step) for name, step, _ in got}) == 12
    assert ("reward/mean", 3, 3.0) in got and ("reward/mean", 4, 9.0) in got
    assert list(RolloutSample.objects.filter(run=run).values_list("step", "completion")) == [
        (1, "c1"),
        (2, "c2"),
        (3, "again3"),
        (4, "again4"),
    ]
    run.refresh_from_db()
    assert run.step == 4 and run.max_steps == 4 and run.latest_reward == 9.0


def test_hooks_store_non_finite_and_stale_attempt_does_not_move_the_run(alice):
    run = make_run(alice, attempt=3, step=7)
    hooks = DatabaseHooks(run.pk, attempt=2, flush_interval_s=0, background_flush=False)  # superseded by attempt 3
    hooks.on_step(8, {"reward/mean": 0.5, "loss/policy": float("inf")})
    assert points(run) == [("loss/policy", 8, float("inf")), ("reward/mean", 8, 0.5)]
    assert RunEvent.objects.filter(run=run, level="warning", message__contains="loss/policy").count() == 1
    run.refresh_from_db()
    assert run.step == 7


def test_checkpoint_rows_follow_the_trainers_retention(alice):
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, background_flush=False)
    base = os.path.join(django_settings.ARTIFACTS_DIR, run.run_dir, "checkpoints")
    for step in (2, 4):
        os.makedirs(os.path.join(base, str(step)), exist_ok=True)
        hooks.on_checkpoint(step, os.path.join(base, str(step)), 10, {})
    os.rmdir(os.path.join(base, "2"))  # keep_last removed it
    os.makedirs(os.path.join(base, "6"))
    hooks.on_checkpoint(6, os.path.join(base, "6"), 10, {})
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [4, 6]


# -- DatabaseControl ---------------------------------------------------------------------------


def test_control_follows_status_and_attempt(alice, restore_signals):
    run = make_run(alice, attempt=2)
    control = DatabaseControl(run.pk, attempt=2, poll_interval_s=0)
    assert control.poll() is Action.CONTINUE
    Run.objects.filter(pk=run.pk).update(status="pausing")
    assert control.poll() is Action.PAUSE
    Run.objects.filter(pk=run.pk).update(status="cancelling")
    assert control.poll() is Action.STOP
    Run.objects.filter(pk=run.pk).update(status="running", attempt=3)  # a newer attempt owns it
    assert control.poll() is Action.STOP
    Run.objects.filter(pk=run.pk).update(status="failed", attempt=2)
    assert control.poll() is Action.STOP
    Run.objects.filter(pk=run.pk).delete()
    assert control.poll() is Action.STOP


def test_control_caches_between_polls(alice, restore_signals):
    run = make_run(alice)
    control = DatabaseControl(run.pk, attempt=1, poll_interval_s=3600)
    assert control.poll() is Action.CONTINUE
    Run.objects.filter(pk=run.pk).update(status="cancelling")
    assert control.poll() is Action.CONTINUE  # cached
    control._checked_at = float("-inf")
    assert control.poll() is Action.STOP


def test_control_sigterm_pauses(alice, restore_signals):
    run = make_run(alice)
    control = DatabaseControl(run.pk, attempt=1, poll_interval_s=0)
    os.kill(os.getpid(), signal.SIGTERM)
    assert control.signalled == signal.SIGTERM
    assert control.poll() is Action.PAUSE
    Run.objects.filter(pk=run.pk).update(status="cancelling")
    assert control.poll() is Action.STOP  # a cancel still wins


# -- the supervisor, with a stand-in trainer ---------------------------------------------------


@pytest.fixture
def fake_trainer(monkeypatch):
    """Replace the trainer child by a small Python script; records each start."""
    starts = []

    def use(script: str):
        def command(self):
            starts.append((self.run_id, self.attempt))
            return [sys.executable, "-c", textwrap.dedent(script)]

        monkeypatch.setattr(supervisor_mod.Supervisor, "command", command)
        return starts

    return use


def test_task_body_twice_for_the_same_attempt_runs_once(alice, fake_trainer, settings):
    settings.PLATFORM_HEARTBEAT_S = 0.1
    starts = fake_trainer("print('trainer crashed: out of cheese')")
    run = make_run(alice, status="queued", attempt=1)
    assert tasks.execute_run.run(run.pk, 1) == "failed"  # exited without a final status
    assert tasks.execute_run.run(run.pk, 1) == ""  # redelivered: the CAS refuses
    assert tasks.execute_run.run(run.pk, 0) == ""  # a stale attempt's message
    assert starts == [(run.pk, 1)]
    run.refresh_from_db()
    assert run.status == "failed" and "out of cheese" in run.error and "exit code 0" in run.error
    assert run.started_at is not None and run.finished_at is not None and run.heartbeat_at is not None
    assert run.worker_pid == os.getpid()


@pytest.mark.django_db(transaction=True)
def test_supervisor_escalates_a_pause_the_trainer_ignores(django_user_model, fake_trainer, settings):
    """A pause needs a checkpoint: SIGTERM after the stop grace (the trainer would checkpoint),
    SIGKILL after the kill grace; the run ends paused."""
    settings.PLATFORM_HEARTBEAT_S = 0.1
    settings.PLATFORM_STATUS_POLL_S = 0.1
    settings.PLATFORM_STOP_GRACE_S = 0.3
    settings.PLATFORM_KILL_GRACE_S = 0.3
    fake_trainer("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
    """)
    user = django_user_model.objects.create_user("carol")
    run = make_run(user, status="queued", attempt=1)

    def pause():
        services.request_pause(Run.objects.get(pk=run.pk))
        connection.close()

    timer = threading.Timer(0.5, pause)
    timer.start()
    t0 = time.monotonic()
    try:
        status = supervisor_mod.supervise(run.pk, 1, "test-host")
    finally:
        timer.cancel()
    assert status == "paused"
    assert time.monotonic() - t0 < 30  # escalated: the fake trainer would otherwise sleep 60 s
    run.refresh_from_db()
    assert run.worker_host == "test-host" and run.running_s > 0.5
    messages = list(RunEvent.objects.filter(run=run).values_list("message", flat=True))
    assert any("SIGTERM sent" in m for m in messages) and any("SIGKILL sent" in m for m in messages)
    assert any(m.startswith("paused; the trainer was stopped (killed by SIGKILL") for m in messages), messages


@pytest.mark.django_db(transaction=True)
def test_supervisor_kills_a_cancelled_trainer_and_its_children_after_the_cancel_grace(
    django_user_model, fake_trainer, settings, tmp_path
):
    """A cancel needs no checkpoint: a trainer that does not stop by itself (here it ignores
    SIGTERM and sleeps, as one compiling cannot look) is SIGKILLed with its process group after
    PLATFORM_CANCEL_GRACE_S, long before the pause's grace, and never gets SIGTERM. The run ends
    cancelled; the event and the attempt's log say what happened."""
    settings.PLATFORM_HEARTBEAT_S = 5
    settings.PLATFORM_STATUS_POLL_S = 0.1
    settings.PLATFORM_CANCEL_GRACE_S = 0.3
    settings.PLATFORM_STOP_GRACE_S = 3600  # the pause path's grace: never reached here
    settings.PLATFORM_KILL_GRACE_S = 3600
    pids = tmp_path / "pids"
    fake_trainer(f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        open({str(pids)!r} + ".tmp", "w").write(f"{{os.getpid()}} {{helper.pid}}")
        os.rename({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(3600)
    """)
    user = django_user_model.objects.create_user("carol")
    run = make_run(user, status="queued", attempt=1)
    result = {}

    def supervise():
        try:
            result["status"] = supervisor_mod.supervise(run.pk, 1, "h")
        finally:
            connection.close()  # this thread's own connection

    supervising = threading.Thread(target=supervise)
    supervising.start()
    try:
        deadline = time.monotonic() + 30
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        trainer_pid, helper_pid = map(int, pids.read_text().split())
        assert request_cancel(Run.objects.get(pk=run.pk))
        supervising.join(timeout=60)  # the old code waited STOP_GRACE_S (an hour here) before any signal
        assert not supervising.is_alive(), "the supervisor did not end the cancelled trainer"
        assert result["status"] == "cancelled"
        assert not alive(trainer_pid)
        wait_for(lambda: not alive(helper_pid), 10, "the trainer's own child to die with it")
    finally:
        for pid in (locals().get("trainer_pid"), locals().get("helper_pid")):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        supervising.join(timeout=10)
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
    messages = list(RunEvent.objects.filter(run=run).values_list("message", flat=True))
    assert not any("SIGTERM" in m for m in messages), messages
    assert any("after the cancel request: SIGKILL sent" in m for m in messages), messages
    assert any(m.startswith("cancelled; the trainer was stopped (killed by SIGKILL,") for m in messages), messages
    attempt_log = (django_settings.ARTIFACTS_DIR / run.run_dir / "logs" / "attempt-1.log").read_text()
    assert f"trainer pid {trainer_pid} started" in attempt_log
    assert "sending SIGKILL to the trainer's process group" in attempt_log
    assert "run cancelled" in attempt_log


def test_supervisor_reads_the_status_every_poll_and_leaves_the_heartbeat_to_its_thread(alice, settings):
    """The status is read at every tick (a cancel is seen within PLATFORM_STATUS_POLL_S); the
    heartbeat is not the watch loop's: its own thread writes it (test_stalls_and_heartbeat.py)."""
    settings.PLATFORM_HEARTBEAT_S = 3600
    settings.PLATFORM_CANCEL_GRACE_S = 3600
    run = make_run(alice, attempt=2)
    sup = supervisor_mod.Supervisor(run.pk, 2)
    sup.watch_step()
    first_heartbeat = Run.objects.get(pk=run.pk).heartbeat_at
    assert first_heartbeat is None and sup.cancel_seen_at is None and sup.stop_seen_at is None
    Run.objects.filter(pk=run.pk).update(status="pausing")
    sup.watch_step()
    assert sup.stop_seen_at is not None and sup.cancel_seen_at is None
    Run.objects.filter(pk=run.pk).update(status="cancelling")
    sup.watch_step()
    assert sup.cancel_seen_at is not None and not sup.killed  # the grace has not passed
    assert sup.next_tick_s() == settings.PLATFORM_STATUS_POLL_S
    sup.cancel_seen_at -= 3600 - 0.2  # the kill is due in 0.2 s: the next tick comes then
    assert 0 < sup.next_tick_s() <= 0.2 < settings.PLATFORM_STATUS_POLL_S
    assert Run.objects.get(pk=run.pk).heartbeat_at == first_heartbeat
    sup.cancel_grace_s = 0
    sup.watch_step()
    assert sup.killed  # no trainer here to signal
    # a run that stopped being this attempt's (the trainer wrote its final status and is exiting,
    # or another attempt took it over) gets the pause's long grace, not the cancel's
    for status, attempt in (("paused", 2), ("running", 3)):
        sup = supervisor_mod.Supervisor(run.pk, 2)
        Run.objects.filter(pk=run.pk).update(status=status, attempt=attempt)
        sup.watch_step()
        assert sup.stop_seen_at is not None and sup.cancel_seen_at is None and not sup.killed


@pytest.mark.parametrize("status, final", [("cancelling", "cancelled"), ("pausing", "paused"), ("running", "running")])
def test_supervisor_finalizes_a_stopped_run_even_while_the_worker_stops(alice, status, final):
    """Worker shutdown: a trainer killed before it wrote its result leaves a running run to the
    reaper (requeued), but a cancelling or pausing one ends at once, never left cancelling."""
    run = make_run(alice, status=status, attempt=1)
    sup = supervisor_mod.Supervisor(run.pk, 1)
    sup.terminated_by = signal.SIGTERM
    assert sup.finalize(-signal.SIGKILL) == final
    assert Run.objects.get(pk=run.pk).status == final


@pytest.mark.django_db(transaction=True)  # the retry closes the failed connection
def test_supervisor_tries_the_final_status_again_when_the_database_fails(django_user_model, settings, monkeypatch):
    """A database hiccup while the supervisor writes the final status does not leave the run
    cancelling (for the reaper, 25 s later): it tries again."""
    from django.db import OperationalError

    settings.PLATFORM_HEARTBEAT_S = 0.01
    run = make_run(django_user_model.objects.create_user("carol"), status="cancelling", attempt=1)
    sup = supervisor_mod.Supervisor(run.pk, 1)
    finalize, calls = sup.finalize, []

    def flaky(returncode):
        calls.append(returncode)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return finalize(returncode)

    monkeypatch.setattr(sup, "finalize", flaky)
    assert sup.finalize_retrying(-signal.SIGKILL) == "cancelled"
    assert calls == [-signal.SIGKILL] * 2
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def test_control_polls_at_the_configured_interval(alice, settings, restore_signals):
    settings.PLATFORM_STATUS_POLL_S = 0.25
    assert DatabaseControl(make_run(alice).pk, attempt=1).poll_interval_s == 0.25


def test_child_dies_with_its_parent(tmp_path):
    """PR_SET_PDEATHSIG: a trainer whose supervisor is SIGKILLed does not live on."""
    pid_file = tmp_path / "child.pid"
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {os.path.join(django_settings.REPO_ROOT, "platform")!r})
        from runner.procs import die_with_parent
        assert die_with_parent(signal.SIGKILL)
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
    """)
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(child)!r}]); time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child_pid = int(pid_file.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(child_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child_pid, signal.SIGKILL)
            pytest.fail("the child outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


# -- the reaper --------------------------------------------------------------------------------


@pytest.fixture
def sent(monkeypatch):
    """Task messages sent instead of going to a broker."""
    messages = []
    monkeypatch.setattr(services, "send_run_message", lambda run_id, attempt, queue: messages.append((run_id, attempt)))
    return messages


def test_reaper_requeues_fails_and_leaves_fresh_runs(alice, sent, settings, django_capture_on_commit_callbacks):
    settings.PLATFORM_STALE_AFTER_S = 20
    now = timezone.now()
    old = now - dt.timedelta(seconds=60)
    lost = make_run(alice, attempt=1, heartbeat_at=old, worker_host="w1@h", max_restarts=3)
    spent = make_run(alice, attempt=4, heartbeat_at=old, restarts=3, max_restarts=3)
    fresh = make_run(alice, attempt=1, heartbeat_at=now - dt.timedelta(seconds=5))
    cancelling = make_run(alice, status="cancelling", heartbeat_at=old)
    pausing = make_run(alice, status="pausing", heartbeat_at=old)
    done_run = make_run(alice, status="succeeded", heartbeat_at=old)
    with django_capture_on_commit_callbacks(execute=True):
        result = reap_stale_runs(now=now)
    assert sorted(result) == sorted(
        [(lost.pk, "requeued"), (spent.pk, "failed"), (cancelling.pk, "cancelled"), (pausing.pk, "paused")]
    )
    lost.refresh_from_db()
    assert (lost.status, lost.restarts, lost.attempt) == ("queued", 1, 2)
    assert sent == [(lost.pk, 2)]
    assert RunEvent.objects.filter(
        run=lost, message__contains="worker w1@h lost (heartbeat 60 s old); requeued, restart 1 of 3"
    ).exists()
    spent.refresh_from_db()
    assert spent.status == "failed" and "max_restarts" in spent.error
    for run, status in ((fresh, "running"), (cancelling, "cancelled"), (pausing, "paused"), (done_run, "succeeded")):
        run.refresh_from_db()
        assert run.status == status
    with django_capture_on_commit_callbacks(execute=True):
        assert reap_stale_runs(now=now) == []  # nothing left to do: acting twice is impossible
    assert sent == [(lost.pk, 2)]


def test_reaper_cas_skips_a_run_whose_heartbeat_just_came(alice, sent, settings, monkeypatch):
    settings.PLATFORM_STALE_AFTER_S = 20
    now = timezone.now()
    run = make_run(alice, heartbeat_at=now - dt.timedelta(seconds=60))
    real_transition = Run.transition

    def heartbeat_first(run_, to, **kwargs):  # the supervisor writes just before the CAS
        Run.objects.filter(pk=run_.pk).update(heartbeat_at=timezone.now())
        return real_transition(run_, to, **kwargs)

    monkeypatch.setattr(Run, "transition", heartbeat_first)
    assert reap_stale_runs(now=now) == []
    run.refresh_from_db()
    assert (run.status, run.attempt, run.restarts) == ("running", 1, 0)


def test_reaper_forgets_long_dead_workers(db, settings):
    settings.PLATFORM_STALE_AFTER_S = 20
    now = timezone.now()
    Worker.objects.create(hostname="gone@h", heartbeat_at=now - dt.timedelta(seconds=201))
    Worker.objects.create(hostname="quiet@h", heartbeat_at=now - dt.timedelta(seconds=100))
    reap_stale_runs(now=now)
    assert list(Worker.objects.values_list("hostname", flat=True)) == ["quiet@h"]


# -- the trainer child's own bookkeeping, and the demo account -----------------------------------


def test_invalid_config_fails_the_run_with_the_problems(alice, restore_signals):
    from runner.attempt import run_attempt

    run = make_run(alice, attempt=1)
    Run.objects.filter(pk=run.pk).update(config={**run.config, "batch": {"prompts_per_step": -3}})
    assert run_attempt(run.pk, 1) == 1
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert run.error.startswith("invalid config") and "batch.prompts_per_step" in run.error
    assert RunEvent.objects.filter(run=run, level="error", message=run.error).exists()


@pytest.mark.parametrize("path", ["/etc/passwd", "../../etc/passwd", "../secret_key"])
def test_worker_refuses_a_data_path_outside_the_dataset_roots(alice, restore_signals, path):
    """A run's stored config is checked again by the worker before it trains (a row written before
    the roots existed, or a file swapped for a symlink since): nothing is read from outside."""
    from runner.attempt import run_attempt

    run = make_run(alice, attempt=1)
    config = {
        **run.config,
        "data": {**run.config["data"], "task": None, "train_path": path},
        "rewards": [{"name": "exact_match", "weight": 1.0}],
    }
    Run.objects.filter(pk=run.pk).update(config=config)
    assert run_attempt(run.pk, 1) == 1
    run.refresh_from_db()
    assert run.status == "failed" and run.step == 0
    assert (
        f"data.train_path: missing or not allowed: {path}; put the file under the platform's dataset directory"
    ) in run.error


def test_child_does_nothing_for_an_attempt_it_does_not_own(alice, restore_signals):
    from runner.attempt import run_attempt

    run = make_run(alice, attempt=2)
    assert run_attempt(run.pk, 1) == 0
    run.refresh_from_db()
    assert (run.status, run.error) == ("running", "")


def test_demo_account_is_created_once(db):
    from runner.demo import DEMO_EXPERIMENT, ensure_demo

    (django_settings.DATA_DIR / "demo_password").unlink(missing_ok=True)
    username, password = ensure_demo()
    assert ensure_demo() == (username, password)  # the same password at every start
    assert (django_settings.DATA_DIR / "demo_password").read_text().strip() == password
    user = get_user_model().objects.get(username="demo")
    assert user.check_password(password)
    experiment = Experiment.objects.get(owner=user)
    assert experiment.name == DEMO_EXPERIMENT and experiment.versions.count() == 1
    from trainers.config import load_config

    expected = load_config(django_settings.REPO_ROOT / "configs" / "demo.yaml").model_dump(mode="json", by_alias=True)
    assert experiment.config == expected


def test_a_status_change_and_its_reason_are_written_together(alice, sent, settings, monkeypatch):
    """The requeue and its reason are one transaction: if the reason cannot be written, the run
    stays where it was (a reader that sees `queued` always finds why; before, the status was
    committed first and a poller could see it with no event yet)."""
    from django.db import DatabaseError

    settings.PLATFORM_STALE_AFTER_S = 20
    now = timezone.now()
    run = make_run(alice, heartbeat_at=now - dt.timedelta(seconds=60), worker_host="w1@h")
    real_create = RunEvent.objects.create

    def no_reasons(**fields):
        if fields.get("kind") == "system":
            raise DatabaseError("disk full")
        return real_create(**fields)

    monkeypatch.setattr(RunEvent.objects, "create", no_reasons)
    with pytest.raises(DatabaseError):
        reap_stale_runs(now=now)
    run.refresh_from_db()
    assert (run.status, run.attempt, run.restarts) == ("running", 1, 0)
    assert not RunEvent.objects.filter(run=run).exists()
    monkeypatch.undo()
    assert reap_stale_runs(now=now) == [(run.pk, "requeued")]
    assert [(e.attempt, e.kind, e.message) for e in RunEvent.objects.filter(run=run).order_by("pk")] == [
        (2, "status", "status -> queued"),
        (1, "system", "worker w1@h lost (heartbeat 60 s old); requeued, restart 1 of 3"),
    ]


def test_supervisor_does_not_kill_a_cancelled_trainer_that_already_wrote_its_final_status(alice, settings):
    """A pruned trial's trainer wrote `pruned` and is storing its compare snapshot when
    the cancel's grace runs out: it is not SIGKILLed; the pause's long grace applies from then."""
    settings.PLATFORM_HEARTBEAT_S = 3600
    settings.PLATFORM_STOP_GRACE_S = 3600
    run = make_run(alice, status="cancelling", attempt=1, stop_as="pruned")
    sup = supervisor_mod.Supervisor(run.pk, 1)
    sup.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        sup.watch_step()
        assert sup.cancel_seen_at is not None
        Run.objects.filter(pk=run.pk).update(status="pruned")  # the trainer's finish_run
        sup.cancel_grace_s = 0  # the cancel's grace is over
        sup.watch_step()
        assert not sup.killed and sup.term_sent_at is None and sup.proc.poll() is None
        assert sup.cancel_seen_at is None and sup.next_tick_s() == settings.PLATFORM_STATUS_POLL_S
        assert not RunEvent.objects.filter(run=run, message__contains="SIGKILL").exists()
    finally:
        sup.proc.kill()
        sup.proc.wait()


@pytest.mark.django_db(transaction=True)  # the hooks' flusher writes from its own thread
@pytest.mark.parametrize("stop_as, final", [("pruned", "pruned"), ("", "cancelled")])
def test_a_pruned_runs_summary_json_says_pruned(django_user_model, monkeypatch, stop_as, final):
    """The trainer returns "cancelled" for any stop; the run files' summary.json names
    the status the platform gives the run: pruned for a sweep's pruned trial (stop_as), else cancelled."""
    import json

    import trainers
    from runner.attempt import run_attempt

    run = make_run(django_user_model.objects.create_user("carol"), status="running", attempt=1)

    def fake_train(config, run_dir, hooks, control, init_checkpoint=None):
        Run.objects.filter(pk=run.pk).update(status="cancelling", stop_as=stop_as)  # the pruner / a user
        result = TrainResult("cancelled", 2, "digest", {"reward/mean": 0.2}, run_dir)
        hooks.on_end(result)
        return result

    monkeypatch.setattr(trainers, "train", fake_train)
    assert run_attempt(run.pk, 1) == 0
    run.refresh_from_db()
    assert run.status == final
    summary = json.loads((django_settings.ARTIFACTS_DIR / run.run_dir / "summary.json").read_text())
    assert summary["status"] == final and summary["final_step"] == 2

"""Probe: a cancel takes effect within seconds even while the trainer cannot look.

The trainer asks for a cancel only between steps and micro-batches; while it compiles or is inside
a long step it does not. The supervisor then SIGKILLs it PLATFORM_CANCEL_GRACE_S after it saw the
request (a cancel needs no checkpoint), so the run ends `cancelled` with its metrics and checkpoints
so far; a checkpoint being written when the grace runs out is finished first. A pause still
checkpoints.

The trainer here is the real one (`manage.py execute_run` in a child process of a real supervisor),
started through a test-only wrapper (BLOCKING_TRAINER) that makes step N block the way a long XLA
compilation does: the main thread sleeps and never asks the control. The last test has no wrapper:
a real worker, and a cancel through the API while the first step compiles.

No test asserts a duration: each waits generously for the end state and prints the latency it
measured (request -> trainer process gone); `pytest -s` shows them.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time

import pytest
from api_testlib import token_client
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from platform_testlib import tiny_config
from runner_testlib import (
    MANAGE_PY,
    Procs,
    alive,
    fresh_artifacts,  # noqa: F401 (fixture)
    purge_broker,
    subprocess_env,
    wait_for,
)

from experiments.models import Checkpoint, Experiment, MetricPoint, Run, RunEvent
from runner import supervisor as supervisor_mod

pytestmark = pytest.mark.django_db(transaction=True)

TRAINER_START_S = 300  # importing JAX and compiling on a busy 2-core machine: generous
GONE_S = 60  # the deadline for the trainer to be gone after the request: generous too

# Test-only: run `manage.py execute_run RUN ATTEMPT`, with GRPOTrainer.step blocking once the
# trainer has finished PROBE_BLOCK_AT_STEP steps (0: its first step) -- busy as in a compilation,
# never asking the control. It writes its pid to PROBE_MARKER when it starts blocking. With
# PROBE_SLOW_CHECKPOINT_AT=N the checkpoint of step N is written PROBE_SLOW_CHECKPOINT_S late (a big
# model's), inside the trainer's "checkpoint" phase; the marker is written when that wait starts.
BLOCKING_TRAINER = textwrap.dedent("""
    import os, runpy, sys, time
    sys.path.insert(0, {root!r})
    from trainers.loop import trainer

    block_at = int(os.environ["PROBE_BLOCK_AT_STEP"])
    slow_checkpoint_at = int(os.environ.get("PROBE_SLOW_CHECKPOINT_AT", "-1"))
    marker = os.environ["PROBE_MARKER"]
    original_step = trainer.GRPOTrainer.step
    original_save = trainer.GRPOTrainer._save_checkpoint

    def mark():
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(marker + ".tmp", marker)

    def step(self):
        if self.state.step == block_at:
            mark()
            while True:
                time.sleep(3600)  # a SIGTERM handler runs, then the sleep goes on: like a compilation
        return original_step(self)

    def save(self):
        if self.state.step == slow_checkpoint_at:
            mark()
            time.sleep(float(os.environ["PROBE_SLOW_CHECKPOINT_S"]))
        return original_save(self)

    trainer.GRPOTrainer.step = step
    trainer.GRPOTrainer._save_checkpoint = save
    sys.argv = [{manage!r}, *sys.argv[1:]]
    runpy.run_path({manage!r}, run_name="__main__")
""")


class SupervisedRun:
    """A run supervised in a thread of this process; its trainer is BLOCKING_TRAINER, in a child
    process that uses the test database."""

    def __init__(self, monkeypatch, tmp_path, block_at_step: int, **config):
        user, _ = get_user_model().objects.get_or_create(username="probe-cancel")
        self.client = token_client(user)
        experiment = Experiment(owner=user, name=f"probe cancel {time.time_ns()}", config={})
        experiment.set_config(tiny_config(**config), user=user)
        self.run = Run.objects.create(
            experiment=experiment,
            config=experiment.config,
            status="queued",
            attempt=1,
            max_steps=experiment.config["train"]["max_steps"],
        )
        self.run.run_dir = f"run-{self.run.pk}"
        self.run.save(update_fields=["run_dir"])
        self.marker = tmp_path / "blocking.pid"
        script = tmp_path / "blocking_trainer.py"
        script.write_text(BLOCKING_TRAINER.format(root=str(settings.REPO_ROOT), manage=str(MANAGE_PY)))
        child_env = subprocess_env()
        for key in ("DATABASE_URL", "PLATFORM_SQLITE_PATH"):
            if key not in child_env:
                monkeypatch.delenv(key, raising=False)
        for key, value in child_env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("PROBE_BLOCK_AT_STEP", str(block_at_step))
        monkeypatch.setenv("PROBE_MARKER", str(self.marker))
        monkeypatch.setattr(
            supervisor_mod.Supervisor,
            "command",
            lambda sup: [sys.executable, str(script), "execute_run", str(sup.run_id), str(sup.attempt)],
        )
        self.result: dict[str, str] = {}
        self.thread = threading.Thread(target=self._supervise, name="probe-supervisor")
        self.thread.start()

    def _supervise(self) -> None:
        try:
            self.result["status"] = supervisor_mod.supervise(self.run.pk, 1, "probe-host")
        finally:
            connection.close()  # this thread's own connection

    def attempt_log(self) -> str:
        path = settings.ARTIFACTS_DIR / self.run.run_dir / "logs" / "attempt-1.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_until_blocked(self) -> int:
        """The trainer's pid, once it blocks inside its step."""
        wait_for(
            lambda: self.marker.exists() or not self.thread.is_alive(),
            TRAINER_START_S,
            "the trainer to block inside its step",
        )
        assert self.marker.exists(), f"the supervisor ended first: {self.result}\n{self.attempt_log()[-3000:]}"
        return int(self.marker.read_text())

    def post(self, action: str) -> float:
        """POST /api/runs/<id>/<action> as the owner; returns the monotonic time of the request."""
        requested_at = time.monotonic()
        response = self.client.post(f"/api/runs/{self.run.pk}/{action}")
        assert response.status_code == 202, response.content
        print(f"\n{action} request answered in {time.monotonic() - requested_at:.2f} s")
        return requested_at

    def finish(self, timeout_s: float = GONE_S) -> str:
        self.thread.join(timeout=timeout_s)
        assert not self.thread.is_alive(), f"the supervisor is still waiting\n{self.attempt_log()[-3000:]}"
        self.run.refresh_from_db()
        return self.run.status

    def events(self) -> list[str]:
        return list(RunEvent.objects.filter(run=self.run).order_by("pk").values_list("message", flat=True))

    def kill_leftovers(self, pid: int | None) -> None:
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.thread.join(timeout=30)

    def stop_while_blocked(self, action: str) -> tuple[int, float]:
        """POST `action` once the trainer blocks inside its step, then wait for the supervisor to
        end (the run's status is then in self.run). Returns the trainer's pid and the seconds from
        the request until its process was gone."""
        pid = None
        try:
            pid = self.wait_until_blocked()
            requested_at = self.post(action)
            latency_s = wait_gone(pid, requested_at)
            self.finish()
        finally:
            self.kill_leftovers(pid)
        return pid, latency_s


def wait_gone(pid: int, since: float) -> float:
    """Seconds from `since` until process `pid` is gone (at most GONE_S, else the test fails)."""
    wait_for(lambda: not alive(pid), GONE_S, f"trainer pid {pid} to be gone", interval_s=0.02)
    return time.monotonic() - since


@pytest.mark.parametrize("block_at_step", [0, 2], ids=["first-step", "third-step"])
def test_cancel_kills_a_trainer_busy_inside_a_step(monkeypatch, tmp_path, fresh_artifacts, block_at_step):
    """Blocked in its first step (as while compiling) or in step 3 after a checkpoint at step 2:
    POST cancel -> the trainer process is gone and the run `cancelled`, with the metrics and the
    checkpoint of the steps done before. The event and the attempt's log say how it ended."""
    probe = SupervisedRun(monkeypatch, tmp_path, block_at_step, train__max_steps=50, checkpoint__every_steps=2)
    pid, latency_s = probe.stop_while_blocked("cancel")
    print(
        f"cancel latency, trainer blocked after {block_at_step} steps: request -> trainer gone "
        f"{latency_s:.2f} s (PLATFORM_CANCEL_GRACE_S={settings.PLATFORM_CANCEL_GRACE_S:g}, "
        f"PLATFORM_STATUS_POLL_S={settings.PLATFORM_STATUS_POLL_S:g})"
    )
    print("\n".join(line for line in probe.attempt_log().splitlines() if line.startswith("[supervisor")))
    assert probe.run.status == "cancelled", probe.events()
    assert probe.result["status"] == "cancelled" and probe.run.finished_at is not None
    events = probe.events()
    assert any("after the cancel request: SIGKILL sent" in m for m in events), events
    assert any(m.startswith("cancelled; the trainer was stopped (killed by SIGKILL,") for m in events), events
    assert not any("SIGTERM" in m for m in events), events  # a cancel does not wait for a checkpoint
    log = probe.attempt_log()
    assert f"trainer pid {pid} started" in log and "sending SIGKILL to the trainer's process group" in log
    assert "run cancelled" in log
    steps = set(MetricPoint.objects.filter(run=probe.run, name="reward/mean").values_list("step", flat=True))
    assert steps == set(range(1, block_at_step + 1))
    checkpoints = list(Checkpoint.objects.filter(run=probe.run).values_list("step", "path"))
    assert [step for step, _ in checkpoints] == ([2] if block_at_step == 2 else [])
    for _, path in checkpoints:
        assert (settings.ARTIFACTS_DIR / path).is_dir()


def test_a_cancel_while_the_trainer_writes_a_checkpoint_keeps_that_checkpoint(
    monkeypatch, tmp_path, fresh_artifacts, settings
):
    """Cancelled while it writes its step-2 checkpoint (slowed here to outlast the cancel's grace
    several times), the trainer is not killed mid-write: the supervisor's SIGKILL waits for the
    trainer's "checkpoint" phase to end, and the cancelled run keeps that checkpoint, listed and on
    disk. (Without the wait, the kill came 0.5 s into the write and the run kept no checkpoint.)"""
    settings.PLATFORM_CANCEL_GRACE_S = 0.5
    monkeypatch.setenv("PROBE_SLOW_CHECKPOINT_AT", "2")
    monkeypatch.setenv("PROBE_SLOW_CHECKPOINT_S", "4")
    probe = SupervisedRun(monkeypatch, tmp_path, -1, train__max_steps=50, checkpoint__every_steps=2)
    _, latency_s = probe.stop_while_blocked("cancel")
    print(f"cancel latency while the trainer writes a checkpoint (4 s late): {latency_s:.2f} s")
    assert probe.run.status == "cancelled", probe.events()
    events = probe.events()
    assert any(m.startswith("cancel: the trainer is writing a checkpoint; SIGKILL waits for it") for m in events)
    checkpoints = list(Checkpoint.objects.filter(run=probe.run).values_list("step", "path"))
    assert [step for step, _ in checkpoints] == [2], events
    assert (settings.ARTIFACTS_DIR / checkpoints[0][1] / "params").is_dir()
    assert os.listdir(settings.ARTIFACTS_DIR / probe.run.run_dir / "checkpoints") == ["2"]


def test_pause_of_a_busy_trainer_ends_paused_at_the_newest_checkpoint(monkeypatch, tmp_path, fresh_artifacts, settings):
    """A pause needs a checkpoint, so it keeps the long grace: SIGTERM after PLATFORM_STOP_GRACE_S
    (a trainer inside a step would checkpoint at its next boundary), then SIGKILL after
    PLATFORM_KILL_GRACE_S. A trainer that stays busy (blocked in step 3) is killed and the run
    ends `paused`: it resumes from its newest checkpoint (step 2). Never stuck in `pausing`."""
    settings.PLATFORM_STOP_GRACE_S = 1
    settings.PLATFORM_KILL_GRACE_S = 1
    probe = SupervisedRun(monkeypatch, tmp_path, 2, train__max_steps=50, checkpoint__every_steps=2)
    _, latency_s = probe.stop_while_blocked("pause")
    print(f"pause latency, trainer blocked in step 3 (STOP_GRACE_S=1, KILL_GRACE_S=1): {latency_s:.2f} s")
    assert probe.run.status == "paused", probe.events()
    events = probe.events()
    assert any("after the pause request: SIGTERM sent" in m for m in events), events
    assert any("after SIGTERM: SIGKILL sent" in m for m in events), events
    assert any(m.startswith("paused; the trainer was stopped (killed by SIGKILL,") for m in events), events
    assert list(Checkpoint.objects.filter(run=probe.run).values_list("step", flat=True)) == [2]


def test_pause_still_checkpoints(monkeypatch, tmp_path, fresh_artifacts):
    """A trainer that reaches its step boundaries pauses by itself: it checkpoints the step it
    paused at and exits; the supervisor sends no signal."""
    probe = SupervisedRun(monkeypatch, tmp_path, -1, train__max_steps=5000, checkpoint__every_steps=1000)
    try:
        wait_for(lambda: Run.objects.get(pk=probe.run.pk).step >= 3, TRAINER_START_S, "step 3")
        probe.post("pause")
        assert probe.finish(timeout_s=120) == "paused", probe.events()
    finally:
        probe.kill_leftovers(None)
    paused_at = probe.run.step
    assert paused_at >= 3
    assert list(Checkpoint.objects.filter(run=probe.run).values_list("step", flat=True)) == [paused_at]
    assert not any("sent to the trainer" in m for m in probe.events())
    assert MetricPoint.objects.filter(run=probe.run, step__gt=paused_at).count() == 0


def test_cancel_through_the_api_while_a_real_worker_compiles_the_first_step(tmp_path, fresh_artifacts):
    """No wrapper: a real worker (`manage.py worker`) and trainer, without the compilation cache,
    cancelled through the API right after the trainer starts (its first step is compiling).
    Whether the trainer stops by itself or is killed, it is gone and the run `cancelled`."""
    purge_broker()
    procs = Procs(tmp_path)
    try:
        procs.start("worker", "--loglevel", "INFO", env={"JAX_COMPILATION_CACHE_DIR": None})
        user, _ = get_user_model().objects.get_or_create(username="probe-cancel")
        client = token_client(user)
        experiment = Experiment(owner=user, name="probe cancel while compiling", config={})
        experiment.set_config(tiny_config(train__max_steps=50), user=user)
        response = client.post(f"/api/experiments/{experiment.pk}/runs")
        assert response.status_code == 201, response.content
        run = Run.objects.get(pk=response.json()["id"])
        # the trainer reports its start (on_start) just before it compiles and runs step 1
        wait_for(
            lambda: RunEvent.objects.filter(run=run, message__startswith="starting of").exists(),
            TRAINER_START_S,
            "the trainer to start",
            procs,
        )
        requested_at = time.monotonic()
        assert client.post(f"/api/runs/{run.pk}/cancel").status_code == 202
        log_path = settings.ARTIFACTS_DIR / Run.objects.get(pk=run.pk).run_dir / "logs" / "attempt-1.log"
        line = next(x for x in log_path.read_text().splitlines() if "] trainer pid " in x)
        pid = int(line.split("] trainer pid ", 1)[1].split()[0])
        latency_s = wait_gone(pid, requested_at)
        step = Run.objects.get(pk=run.pk).step
        print(
            f"\ncancel latency, real worker, first step compiling: request -> trainer gone {latency_s:.2f} s "
            f"(run at step {step})"
        )
        wait_for(lambda: Run.objects.get(pk=run.pk).status == "cancelled", GONE_S, "cancelled", procs)
    finally:
        procs.close()
        purge_broker()

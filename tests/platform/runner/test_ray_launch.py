"""Multi-host runs through Ray (runner.ray_gang): a run with cluster.hosts = 2 is launched through
the API to a real Celery worker, which starts a local Ray, one actor per host and one trainer child
per actor (two jax.distributed processes of 2 CPU devices each, one 4-device mesh). The run ends as
one run with every step's metrics once; SIGKILLing one host's trainer mid-run fails that attempt,
the gang restarts from the newest checkpoint as attempt 2 and completes. Bad input: a Ray address
that does not answer, and a cluster with too few hosts, fail the run with a message naming the
setting or cluster.hosts. Plus the pure parts: the cluster section's checks, the child's environment,
how a gang's ending is judged."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from api_testlib import token_client
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import reverse
from platform_testlib import tiny_config
from runner_testlib import platform_procs, running, wait_for
from web_testlib import form_data

from experiments.models import Checkpoint, Experiment, MetricPoint, Run, RunEvent
from runner.ray_gang import Ending, child_env, cluster_of, with_device_count
from trainers.config import ConfigError, parse_config

GANG = dict(cluster__hosts=2, cluster__devices_per_host=2, mesh__fsdp=-1)


def gang_config(**overrides) -> dict:
    return tiny_config(**{**GANG, **overrides})


# -- pure parts ---------------------------------------------------------------------------------


def _problems(**overrides) -> dict[str, str]:
    raw = tiny_config()
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        raw.setdefault(section, {})[key] = value
    try:
        parse_config(raw)
    except ConfigError as exc:
        return {p.field: p.message for p in exc.problems}
    return {}


def test_cluster_section_checks():
    assert _problems(cluster__hosts=2, cluster__devices_per_host=2, mesh__fsdp=-1) == {}
    assert _problems(cluster__hosts=2, cluster__devices_per_host=1, mesh__data=2) == {}
    assert _problems(cluster__hosts=2, cluster__devices_per_host=2, mesh__fsdp=2) == {
        "cluster.devices_per_host": "cluster.hosts=2 x cluster.devices_per_host=2 = 4 devices, but the mesh has "
        "mesh.data 1 x mesh.fsdp 2 x mesh.tensor 1 = 2 device(s); make them equal (e.g. mesh.fsdp=-1: the mesh "
        "takes every device)"
    }
    assert _problems(cluster__hosts=3, mesh__fsdp=2) == {
        "cluster.hosts": "cluster.hosts=3 hosts cannot split a mesh of mesh.data 1 x mesh.fsdp 2 x mesh.tensor 1 = "
        "2 device(s) evenly; use a mesh that spans every host's devices (e.g. mesh.fsdp=-1)"
    }
    assert (
        "asynchronous GRPO runs in one process"
        in _problems(cluster__hosts=2, mesh__fsdp=-1, async__enabled=True)["cluster.hosts"]
    )
    assert "cluster.hosts" in _problems(cluster__hosts=0)
    assert "cluster.devices_per_host" in _problems(cluster__devices_per_host=0)
    assert cluster_of({}) == (1, None) and cluster_of(gang_config()) == (2, 2)


def test_child_env_carries_the_contract():
    environ = {
        "PLATFORM_DATA_DIR": "/d",
        "DATABASE_URL": "postgres://x",
        "HOME": "/root",
        "PLATFORM_SUPERVISOR_PID": "7",
        "XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8",
    }
    env = child_env(1, 2, "10.0.0.1:1234", 4, False, environ, 60)
    assert env["GRPO_COORDINATOR_ADDRESS"] == "10.0.0.1:1234"
    assert (env["GRPO_NUM_PROCESSES"], env["GRPO_PROCESS_ID"], env["GRPO_INIT_TIMEOUT_S"]) == ("2", "1", "60")
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=4"
    assert env["PLATFORM_SUPERVISOR_PID"] is None  # removed: the child's parent is its actor
    assert env["PLATFORM_DATA_DIR"] == "/d" and env["DATABASE_URL"] == "postgres://x" and "HOME" not in env
    # GPUs: Ray picks them (CUDA_VISIBLE_DEVICES); no CPU device count; all of a host's GPUs when not set
    assert "XLA_FLAGS" not in child_env(0, 2, "h:1", 4, True, {}, 60)
    assert child_env(0, 2, "h:1", None, True, {}, 60)["CUDA_VISIBLE_DEVICES"] is None
    assert with_device_count("", 2) == "--xla_force_host_platform_device_count=2"


def test_how_a_gang_ending_is_judged():
    # all exited 0: process 0 wrote the final status
    assert Ending({0: 0, 1: 0}, {}, set()).lost() == "" and Ending({0: 0, 1: 0}, {}, set()).failed() == []
    # a process killed by someone else: lost (restart), even if process 0 then failed in a collective
    assert Ending({0: 1, 1: -9}, {}, set()).lost() == "trainer process 1 of the gang killed (SIGKILL)"
    # an actor gone: lost
    assert "host 0 of the gang lost" in Ending({0: None, 1: -9}, {0: "ActorDiedError"}, {1}).lost()
    # process 0 failed in the trainer, the other one killed here after the grace: failed, not lost
    ending = Ending({0: 1, 1: -9}, {}, {1})
    assert ending.lost() == "" and ending.failed() == [0]


# -- end to end with a worker, a local Ray and two trainer processes -------------------------------


@pytest.fixture
def procs(transactional_db, tmp_path):
    with platform_procs(tmp_path, log_lines=60) as procs:
        yield procs


def launch_through_api(name: str, config: dict) -> Run:
    user, _ = get_user_model().objects.get_or_create(username="ray-e2e")
    client = token_client(user)
    response = client.post("/api/experiments", {"name": name, "config": config}, content_type="application/json")
    assert response.status_code == 201, response.content
    response = client.post(f"/api/experiments/{response.json()['id']}/runs", {}, content_type="application/json")
    assert response.status_code == 201, response.content
    return Run.objects.get(pk=response.json()["id"])


def launch_through_form(client, name: str, config: dict) -> Run:
    """What a user does in the browser: the new-experiment form (cluster.* among its fields), then
    the experiment page's Launch button."""
    response = client.post(reverse("experiment-new"), form_data(config, name=name))
    assert response.status_code == 302, response.content.decode()[-3000:]
    experiment = Experiment.objects.get(name=name)
    assert experiment.config["cluster"] == config["cluster"]
    response = client.post(reverse("experiment-launch", args=[experiment.pk]))
    assert response.status_code == 302, response.content.decode()[-3000:]
    return Run.objects.get(experiment=experiment)


def status_of(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def metric_steps(run: Run, name: str = "reward/mean") -> list[int]:
    return sorted(MetricPoint.objects.filter(run=run, name=name).values_list("step", flat=True))


def host_logs(run: Run, attempt: int) -> str:
    logs = Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs"
    return "\n".join(
        f"--- {p.name} ---\n" + "\n".join(p.read_text(errors="replace").splitlines()[-30:])
        for p in sorted(logs.glob(f"attempt-{attempt}*"))
    )


def trainer_pid(run: Run, attempt: int, host: int, which: str = "trainer") -> int:
    """The pid of host `host`'s trainer child (or, which="actor", its Ray actor), from the driver's log."""
    log = (Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs" / f"attempt-{attempt}.log").read_text()
    return int(re.search(rf"host {host}: .* {which} pid (\d+)", log).group(1))


def test_a_two_host_run_launched_from_the_web_form_trains_as_one_run(procs, client):
    from runner.models import RayHost

    procs.worker()
    client.force_login(get_user_model().objects.create_user("ray-staff", is_staff=True, is_superuser=True))
    run = launch_through_form(client, "ray 2 hosts", gang_config(train__max_steps=4))
    # while it runs, the workers page shows the Ray cluster's host and the gang's processes on it
    wait_for(lambda: RayHost.objects.exclude(processes=[]).exists(), 180, "the gang's hosts recorded", procs)
    page = client.get(reverse("admin:runner_worker_changelist")).content.decode()
    assert "Ray cluster: hosts and devices" in page and f"local Ray of run {run.pk}" in page, page
    assert f"run {run.pk} process 0 (2 devices), run {run.pk} process 1 (2 devices)" in page, page
    wait_for(lambda: status_of(run) in ("succeeded", "failed"), 300, "the 2-host run to end", procs)
    run.refresh_from_db()
    assert run.status == "succeeded", f"{run.error}\n{host_logs(run, 1)}\n{procs.logs()}"
    assert (run.step, run.attempt, run.restarts) == (4, 1, 0) and len(run.params_digest) == 64
    assert metric_steps(run) == [1, 2, 3, 4]
    # the dashboard: the run's page and the metrics its charts read
    assert client.get(reverse("run-detail", args=[run.pk])).status_code == 200
    points = client.get(f"/api/runs/{run.pk}/metrics", {"name": "loss/policy", "after_step": 0}).json()["points"]
    assert [step for step, _ in points] == [1, 2, 3, 4]
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4]
    events = list(RunEvent.objects.filter(run=run).values_list("message", flat=True))
    assert any(m.startswith("multi-host: 2 hosts through a local Ray on this worker") for m in events), events
    # both processes trained (the mesh spans their 4 devices); only process 0 reported
    assert trainer_pid(run, 1, 0) != trainer_pid(run, 1, 1)
    logs = Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs"
    assert (logs / "attempt-1-host-1.log").exists() and (logs / "attempt-1-host-0.log").exists()
    # the local Ray goes with the gang (once the processes have left jax.distributed): so do its hosts
    wait_for(lambda: not RayHost.objects.exists(), 90, "the gang's driver to end", procs)
    assert "gang ended: exit codes {0: 0, 1: 0}" in (logs / "attempt-1.log").read_text()


def test_killing_one_actor_restarts_the_gang_from_the_newest_checkpoint(procs):
    procs.worker()
    max_steps = 8
    run = launch_through_api(
        "ray kill one host", gang_config(train__max_steps=max_steps, checkpoint__every_steps=2, checkpoint__keep_last=3)
    )
    wait_for(lambda: Checkpoint.objects.filter(run=run).exists(), 300, "the first checkpoint", procs)
    run.refresh_from_db()
    assert run.status == "running" and run.step < max_steps, "too late to kill mid-run"
    # host 1's Ray actor, as if its host died: its trainer child dies with it
    os.kill(trainer_pid(run, 1, 1, which="actor"), signal.SIGKILL)
    wait_for(lambda: Run.objects.get(pk=run.pk).attempt == 2, 60, "the gang's restart", procs)
    wait_for(lambda: status_of(run) in ("succeeded", "failed"), 300, "the restarted run to end", procs)
    run.refresh_from_db()
    assert run.status == "succeeded", f"{run.error}\n{host_logs(run, 2)}\n{procs.logs()}"
    assert (run.attempt, run.restarts, run.step) == (2, 1, max_steps)
    events = list(RunEvent.objects.filter(run=run).values_list("attempt", "message"))
    assert any(
        a == 1 and m.startswith("host 1 of the gang lost (its Ray actor died") and "requeued, restart 1 of" in m
        for a, m in events
    ), events
    assert not running(trainer_pid(run, 1, 1)) and not running(trainer_pid(run, 1, 0))  # none left behind
    assert any(a == 2 and m.startswith("resuming from checkpoint at step ") for a, m in events), events
    for name in ("reward/mean", "loss/policy", "grad_norm"):  # every step once, none lost
        assert metric_steps(run, name) == list(range(1, max_steps + 1)), name


def test_pause_and_cancel_stop_every_host_at_the_same_step(procs):
    from runner.services import request_cancel, request_pause, resume_run

    procs.worker()
    run = launch_through_api("ray pause cancel", gang_config(train__max_steps=5000, checkpoint__every_steps=1000))
    wait_for(lambda: Run.objects.get(pk=run.pk).step >= 2, 300, "step 2", procs)
    assert request_pause(Run.objects.get(pk=run.pk))
    wait_for(lambda: status_of(run) == "paused", 120, "paused", procs)
    run.refresh_from_db()
    paused_at = run.step
    assert Checkpoint.objects.filter(run=run, step=paused_at).exists(), "a pause checkpoints first (every host)"
    assert metric_steps(run) == list(range(1, paused_at + 1))
    # both processes stopped by themselves at the same step (exit 0), none was killed
    wait_for(
        lambda: "gang ended" in (Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs" / "attempt-1.log").read_text(),
        60,
        "the gang's end",
        procs,
    )
    assert (
        "gang ended: exit codes {0: 0, 1: 0}, actors lost {}, killed here []"
        in (Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs" / "attempt-1.log").read_text()
    )

    assert resume_run(run)
    wait_for(
        lambda: RunEvent.objects.filter(
            run=run, attempt=2, message=f"resuming from checkpoint at step {paused_at}"
        ).exists(),
        300,
        "the gang's resume from the pause checkpoint",
        procs,
    )
    wait_for(lambda: Run.objects.get(pk=run.pk).step >= paused_at + 1, 120, "progress after resume", procs)
    assert request_cancel(Run.objects.get(pk=run.pk))
    wait_for(lambda: status_of(run) == "cancelled", 120, "cancelled", procs)
    run.refresh_from_db()
    assert (run.attempt, run.restarts) == (2, 0)
    assert metric_steps(run) == list(range(1, run.step + 1))


def test_a_stopping_worker_checkpoints_the_gang_and_requeues_it(procs):
    from runner.services import request_cancel

    worker = procs.worker()
    run = launch_through_api("ray worker stops", gang_config(train__max_steps=5000, checkpoint__every_steps=1000))
    wait_for(lambda: Run.objects.get(pk=run.pk).step >= 2, 300, "step 2", procs)
    worker.send_signal(signal.SIGTERM)  # Celery's warm shutdown: the supervisor passes SIGTERM to the driver
    wait_for(lambda: Run.objects.filter(pk=run.pk, status="queued", attempt=2).exists(), 120, "the requeue", procs)
    run.refresh_from_db()
    stopped_at = run.step
    assert run.restarts == 0 and Checkpoint.objects.filter(run=run, step=stopped_at).exists()
    assert RunEvent.objects.filter(
        run=run, attempt=1, message=f"worker stopping: checkpointed at step {stopped_at}; requeued"
    ).exists()
    assert worker.wait(timeout=60) == 0
    procs.worker()
    wait_for(
        lambda: RunEvent.objects.filter(
            run=run, attempt=2, message=f"resuming from checkpoint at step {stopped_at}"
        ).exists(),
        300,
        "the gang's resume on the new worker",
        procs,
    )
    assert request_cancel(Run.objects.get(pk=run.pk))
    wait_for(lambda: status_of(run) == "cancelled", 120, "cancelled", procs)
    run.refresh_from_db()
    assert metric_steps(run) == list(range(1, run.step + 1))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ray_address_that_does_not_answer_fails_the_run(procs):
    procs.start("worker", "--loglevel", "INFO", env={"PLATFORM_RAY_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    run = launch_through_api("ray nowhere", gang_config())
    wait_for(lambda: status_of(run) in ("succeeded", "failed"), 60, "the run to fail", procs)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith("the Ray cluster at PLATFORM_RAY_ADDRESS=127.0.0.1:"), run.error
    assert "does not answer" in run.error


@pytest.fixture
def one_node_ray(tmp_path):
    """A real one-node Ray cluster (`ray start --head --block`), stopped by killing its process group."""
    port = _closed_port()
    ray_bin = str(Path(sys.executable).parent / "ray")
    # token authentication (Ray's default): the head and the worker share ~/.ray/auth_token
    proc = subprocess.Popen(
        [
            ray_bin,
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--object-store-memory=80000000",
            "--disable-usage-stats",
        ],
        stdout=open(tmp_path / "ray.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    yield address
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_hosts_that_never_join_fail_the_run_naming_cluster_hosts(procs, one_node_ray):
    procs.start(
        "worker",
        "--loglevel",
        "INFO",
        env={"PLATFORM_RAY_ADDRESS": one_node_ray, "RAY_AUTH_MODE": "token", "PLATFORM_RAY_JOIN_TIMEOUT_S": "5"},
    )
    run = launch_through_api("ray too few hosts", gang_config())
    wait_for(lambda: status_of(run) in ("succeeded", "failed"), 120, "the run to fail", procs)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith(
        f"cluster.hosts=2: the Ray cluster at PLATFORM_RAY_ADDRESS={one_node_ray} did not "
        "find 2 hosts (one bundle {'CPU': 1.0} each, STRICT_SPREAD) within "
        "PLATFORM_RAY_JOIN_TIMEOUT_S=5 s; it has 1 node(s) alive"
    ), run.error


def test_a_single_host_run_starts_no_ray(procs):
    procs.worker()
    run = launch_through_api("one host", tiny_config(train__max_steps=2))
    wait_for(lambda: status_of(run) in ("succeeded", "failed"), 120, "the run to end", procs)
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    log = (Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs" / "attempt-1.log").read_text()
    assert "host 0:" not in log and not list((Path(settings.ARTIFACTS_DIR) / run.run_dir / "logs").glob("*host*"))

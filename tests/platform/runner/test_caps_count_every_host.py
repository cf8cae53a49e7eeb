"""Security probe: caps that did not count everything. A run's cluster
(cluster.hosts x cluster.devices_per_host) counts against the per-user limits at launch and when a
worker starts it; evaluation jobs and their tokens count against per-user limits and can be
cancelled (the child process stops)."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment, make_run, token_client

pytestmark = pytest.mark.django_db

GANG = dict(cluster__hosts=2, cluster__devices_per_host=2, mesh__fsdp=-1)


def test_the_issues_4096_hosts_are_refused_at_launch_naming_cluster_hosts(alice, sent_messages):
    experiment = make_experiment(alice, cluster__hosts=4096, mesh__fsdp=-1)
    response = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs")
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["error"].startswith(
        "this run asks too much of the cluster: cluster.hosts: cluster.hosts 4096 = 4096, "
        "the limit is 8; lower cluster.hosts (PLATFORM_MAX_HOSTS_PER_RUN)"
    )
    assert experiment.runs.count() == 0 and sent_messages == []


def test_hosts_times_devices_counts(alice, settings, sent_messages):
    settings.PLATFORM_MAX_DEVICES_PER_RUN = 3
    experiment = make_experiment(alice, **GANG)  # 2 hosts x 2 devices = 4
    error = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs").json()["error"]
    assert (
        "cluster devices: cluster.hosts 2 x cluster.devices_per_host 2 = 4, the limit is 3; lower cluster.hosts "
        "or cluster.devices_per_host"
    ) in error
    settings.PLATFORM_MAX_DEVICES_PER_RUN = 4
    assert token_client(alice).post(f"/api/experiments/{experiment.pk}/runs").status_code == 201


def test_a_retry_of_a_stored_run_over_the_host_limit_is_refused(alice, settings, sent_messages):
    experiment = make_experiment(alice, **GANG)
    run = make_run(alice, status="failed", experiment=experiment, error="before")
    settings.PLATFORM_MAX_HOSTS_PER_RUN = 1
    response = token_client(alice).post(f"/api/runs/{run.pk}/retry")
    assert response.status_code == 429 and "cluster.hosts 2 = 2, the limit is 1" in response.json()["error"]
    run.refresh_from_db()
    assert run.status == "failed" and sent_messages == []


def test_the_worker_fails_a_run_over_the_host_limit_before_starting_ray(alice, settings, restore_signals, monkeypatch):
    """A run queued before the limit (or the limit lowered since) fails at start: the gang's driver
    refuses it before a local Ray starts one process per host, and so does each host's trainer."""
    from runner import ray_gang
    from runner.attempt import run_attempt

    def no_ray(self):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray_gang.Gang, "connect", no_ray)
    experiment = make_experiment(alice, **GANG)
    run = make_run(alice, status="running", experiment=experiment)
    settings.PLATFORM_MAX_HOSTS_PER_RUN = 1
    assert ray_gang.run_gang(run.pk, 1) == 1
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith(
        "this run asks too much of the cluster: cluster.hosts: cluster.hosts 2 = 2, the limit is 1"
    )
    other = make_run(alice, status="running", experiment=experiment)
    assert run_attempt(other.pk, 1) == 1
    other.refresh_from_db()
    assert other.status == "failed" and other.error == run.error


# --- evaluation jobs: counted, shown, cancellable ------------------------------------------------


@pytest.fixture
def checkpoint_run(alice, monkeypatch):
    from evaluations import services
    from experiments.models import Checkpoint

    monkeypatch.setattr(services, "send_when_committed", lambda job: None)  # no worker here
    run = make_run(alice, status="succeeded", run_dir="run-caps")
    Checkpoint.objects.create(run=run, step=2, path="run-caps/checkpoints/2", size_bytes=10)
    return run


def _evaluate(user, run, **body):
    return token_client(user).post(
        "/api/evaluations",
        json.dumps({"run": run.pk, "step": 2, "dataset": "task:reverse", **body}),
        content_type="application/json",
    )


def test_the_issues_huge_evaluation_job_is_refused_naming_the_token_limit(alice, checkpoint_run):
    from evaluations.models import EvaluationJob

    response = _evaluate(alice, checkpoint_run, prompts=10_000, k=64, max_new_tokens=4096)
    assert response.status_code == 429, response.content
    assert response.json()["error"].startswith(
        "evaluation tokens: this job's prompts x k x max_new_tokens = 2,621,440,000 (k 64, max_new_tokens 4096)"
    )
    assert "the limit is 67,108,864 (PLATFORM_MAX_EVALUATION_TOKENS_PER_USER)" in response.json()["error"]
    assert EvaluationJob.objects.count() == 0


def test_queued_jobs_and_their_tokens_count_and_show_on_the_account(alice, bob, checkpoint_run, settings, alice_client):
    settings.PLATFORM_MAX_EVALUATION_JOBS_PER_USER = 2
    settings.PLATFORM_MAX_EVALUATION_TOKENS_PER_USER = 1000
    assert _evaluate(alice, checkpoint_run, prompts=10, k=2, max_new_tokens=20).status_code == 201  # 400 tokens
    over = _evaluate(alice, checkpoint_run, prompts=10, k=4, max_new_tokens=20)  # 800 more: 1200
    assert over.status_code == 429
    assert "with your queued and running jobs' 400 that is 1,200, the limit is 1,000" in over.json()["error"]
    second = _evaluate(alice, checkpoint_run, prompts=10, k=1, max_new_tokens=20)  # the run's tiny budget: fine
    assert second.status_code == 201
    third = _evaluate(alice, checkpoint_run, prompts=1, k=1, max_new_tokens=1)
    assert third.status_code == 429
    assert third.json()["error"].startswith(
        "evaluation jobs: you have 2 queued or running, the limit is 2 (PLATFORM_MAX_EVALUATION_JOBS_PER_USER)"
    )
    account = token_client(alice).get("/api/account").json()
    assert account["evaluations"] == {"jobs": 2, "tokens": 600}
    assert account["limits"]["max_evaluation_jobs"] == {"value": 2, "source": "default"}
    assert account["limits"]["max_hosts_per_run"]["value"] == 8
    page = alice_client.get("/account/").content.decode()
    assert 'id="evaluation-usage"' in page and '<span data-value="2">2</span>' in page
    assert 'data-limit="max_evaluation_tokens"' in page and 'data-limit="max_devices_per_run"' in page
    # cancelling one frees its room
    assert token_client(alice).post(f"/api/evaluations/{second.json()['id']}/cancel").status_code == 202
    assert _evaluate(alice, checkpoint_run, prompts=1, k=1, max_new_tokens=1).status_code == 201


def test_cancel_over_the_api_and_the_page(alice, bob, checkpoint_run, alice_client):
    from django.urls import reverse

    from evaluations.models import EvaluationJob

    job_id = _evaluate(alice, checkpoint_run, prompts=2, k=1).json()["id"]
    assert token_client(bob).post(f"/api/evaluations/{job_id}/cancel").status_code == 404  # not theirs
    page = alice_client.get(reverse("evaluation-detail", args=[job_id])).content.decode()
    assert 'id="job-cancel"' in page and reverse("evaluation-cancel", args=[job_id]) in page
    answer = token_client(alice).post(f"/api/evaluations/{job_id}/cancel")
    assert answer.status_code == 202 and answer.json() == {"id": job_id, "status": "cancelled"}
    again = token_client(alice).post(f"/api/evaluations/{job_id}/cancel")
    assert again.status_code == 409 and "it is cancelled" in again.json()["error"]
    assert 'id="job-cancel"' not in alice_client.get(reverse("evaluation-detail", args=[job_id])).content.decode()
    from evaluations.jobs import run_job

    assert run_job(job_id) == ""  # a cancelled queued job never starts
    # the page's button: another user's job is 404, the owner's is cancelled
    other = _evaluate(alice, checkpoint_run, prompts=2, k=1).json()["id"]
    from django.test import Client

    bobs = Client()
    bobs.force_login(bob)
    assert bobs.post(reverse("evaluation-cancel", args=[other])).status_code == 404
    assert EvaluationJob.objects.get(pk=other).status == "queued"
    alice_client.post(reverse("evaluation-cancel", args=[other]))
    assert EvaluationJob.objects.get(pk=other).status == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_running_job_stops_its_child_process(alice, checkpoint_run, settings, monkeypatch, tmp_path):
    """The worker's evaluation child is stopped (and reaped) once the job is cancelled; the job stays
    cancelled, without samples."""
    import os
    import sys
    import threading
    import time

    from django.db import connection

    from evaluations import jobs
    from evaluations.models import EvaluationJob

    settings.PLATFORM_HEARTBEAT_S = 0.1
    pid_file = tmp_path / "child.pid"
    script = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    monkeypatch.setattr(jobs, "child_command", lambda job, config, out: [sys.executable, "-c", script])
    job_id = _evaluate(alice, checkpoint_run, prompts=2, k=1).json()["id"]
    outcome = []

    def work():
        try:
            outcome.append(jobs.run_job(job_id))
        finally:
            connection.close()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    for _ in range(600):  # the child has started
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    assert EvaluationJob.objects.get(pk=job_id).status == "running"
    assert token_client(alice).post(f"/api/evaluations/{job_id}/cancel").status_code == 202
    worker.join(timeout=120)
    assert not worker.is_alive() and outcome == ["cancelled"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped
    job = EvaluationJob.objects.get(pk=job_id)
    assert job.status == "cancelled" and job.samples.count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_client_cancels_a_job(live_server, alice, checkpoint_run):
    from test_cli_client import run_client

    from api.models import ApiToken
    from evaluations.models import EvaluationJob

    job_id = _evaluate(alice, checkpoint_run, prompts=2, k=1).json()["id"]
    key = ApiToken.issue(alice, name="cli").key
    out = run_client(live_server.url, key, "evaluations", "cancel", str(job_id))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"evaluation {job_id}: cancelled"
    assert EvaluationJob.objects.get(pk=job_id).status == "cancelled"
    again = run_client(live_server.url, key, "evaluations", "cancel", str(job_id))
    assert again.returncode == 1 and "it is cancelled" in again.stderr

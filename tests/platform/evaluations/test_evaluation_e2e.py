"""Evaluation jobs end to end through a real Celery worker (`manage.py worker`) on the test database
and the configured broker: a tiny run that asked to be evaluated when it ends trains to success and
its best checkpoint is evaluated; a job made through the API on another checkpoint fills the
leaderboard with accuracy and pass@k that agree with its stored completions; a job on a dataset of
the wrong shape fails with a clear recorded error and changes nothing else."""

from __future__ import annotations

import json

import pytest
from api_testlib import token_client
from django.contrib.auth import get_user_model
from platform_testlib import tiny_config
from runner_testlib import platform_procs, wait_for

from evaluations.models import EvaluateOnEnd, EvaluationJob
from evaluations.services import request_on_end
from experiments.dataset_models import Dataset, dataset_root
from experiments.models import Checkpoint, Experiment, Run
from runner.services import launch_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def procs(transactional_db, tmp_path):
    with platform_procs(tmp_path) as procs:
        yield procs


def job_status(pk: int) -> str:
    return EvaluationJob.objects.values_list("status", flat=True).get(pk=pk)


def test_jobs_fill_a_leaderboard_and_a_bad_dataset_fails_cleanly(procs):
    user = get_user_model().objects.create_user("evaluator", password="evaluator-pass-1")
    experiment = Experiment(owner=user, name="eval-e2e", config={})
    experiment.set_config(
        tiny_config(train__max_steps=2, checkpoint__every_steps=1, checkpoint__keep_last=2), user=user
    )
    run = launch_run(experiment)
    request_on_end(user, run, {"dataset": "task:reverse", "prompts": 3, "k": 1})
    procs.worker()
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "succeeded", 240, "the run to succeed", procs)
    assert sorted(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]

    # the API: checkpoint 1 on the arithmetic task's held-out prompts, pass@2
    client = token_client(user)
    response = client.post(
        "/api/evaluations",
        json.dumps({"run": run.pk, "step": 1, "dataset": "task:arithmetic", "prompts": 4, "k": 2}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    # a dataset whose file has no prompt/answer keys (written past the upload check)
    folder = dataset_root() / "users" / str(user.pk)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "broken.jsonl").write_text(json.dumps({"question": "1+1", "solution": "2"}) + "\n")
    broken = Dataset.objects.create(
        owner=user, name="broken", path=f"users/{user.pk}/broken.jsonl", size_bytes=10, rows=1, sha256="0" * 64
    )
    response = client.post(
        "/api/evaluations",
        json.dumps({"run": run.pk, "step": 2, "dataset": f"dataset:{broken.pk}"}),
        content_type="application/json",
    )
    bad_id = response.json()["id"]

    on_end = wait_for(lambda: EvaluateOnEnd.objects.get(run=run).job_id, 60, "the on-end job", procs)
    for pk in (on_end, job_id, bad_id):
        wait_for(lambda: job_status(pk) in ("succeeded", "failed"), 240, f"job {pk} to finish", procs)

    end_job = EvaluationJob.objects.get(pk=on_end)
    assert end_job.status == "succeeded", end_job.error
    assert end_job.requested_by_run_id == run.pk and end_job.dataset_key == "task:reverse"
    assert end_job.step in (1, 2) and end_job.samples.count() == 3

    job = EvaluationJob.objects.get(pk=job_id)
    assert job.status == "succeeded", job.error
    samples = list(job.samples.order_by("index"))
    assert [s.index for s in samples] == [0, 1, 2, 3] and all("=" in s.prompt for s in samples)
    assert job.accuracy == pytest.approx(sum(s.correct for s in samples) / 4)
    # pass@2 from 2 samples: a prompt counts when either sample was right
    assert job.pass_at_k == pytest.approx(sum(s.samples_correct > 0 for s in samples) / 4)
    assert job.progress_done == job.progress_total == 4

    board = client.get("/api/evaluations/leaderboard?dataset=task:arithmetic").json()
    assert [row["id"] for row in board["rows"]] == [job.pk]
    assert {b["key"] for b in board["boards"]} == {"task:arithmetic", "task:reverse"}

    bad = EvaluationJob.objects.get(pk=bad_id)
    assert bad.status == "failed" and "missing 'prompt'" in bad.error and not bad.samples.exists()
    assert Run.objects.get(pk=run.pk).status == "succeeded" and Checkpoint.objects.filter(run=run).count() == 2
    assert (
        client.get(f"/api/evaluations/{bad_id}")
        .json()["error"]
        .endswith("missing 'prompt' (fields: ['question', 'solution'])")
    )

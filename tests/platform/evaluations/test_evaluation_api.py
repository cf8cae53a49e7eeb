"""Evaluation jobs without a worker: the API's answers to bad input (4xx, never a 500), who may
evaluate what (another user's run or private dataset: 404), the best-checkpoint rule and the
leaderboard's order against hand-made rows, and the pages that show them."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from api_testlib import make_experiment, make_run, token_client
from datasets_testlib import dataset_root, upload  # noqa: F401 (fixture)
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from evaluations.leaderboard import ranked
from evaluations.models import EvaluateOnEnd, EvaluationJob, EvaluationSample
from evaluations.services import best_checkpoint, evaluate_on_end
from experiments.models import Checkpoint, Run

pytestmark = pytest.mark.django_db


def post(client, path, body):
    return client.post(path, json.dumps(body), content_type="application/json")


@pytest.fixture
def run(alice):
    run = make_run(alice, status="succeeded", run_dir="run-eval")
    Checkpoint.objects.create(
        run=run, step=2, path="run-eval/checkpoints/2", size_bytes=10, metrics={"reward/mean": 0.5}
    )
    return run


def test_create_job_and_read_it(alice, bob, run):
    client = token_client(alice)
    response = post(
        client, "/api/evaluations", {"run": run.pk, "step": 2, "dataset": "task:reverse", "k": 2, "prompts": 8}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued" and body["dataset"] == "task:reverse" and body["k"] == 2
    assert body["policy"] == f"#{run.pk} step 2"
    job = EvaluationJob.objects.get(pk=body["id"])
    assert job.checkpoint.step == 2 and job.prompts == 8
    assert client.get(f"/api/evaluations/{job.pk}").json()["id"] == job.pk
    assert client.get(f"/api/evaluations?run={run.pk}").json()["count"] == 1
    # another user sees neither the job nor the run
    assert token_client(bob).get(f"/api/evaluations/{job.pk}").status_code == 404
    assert token_client(bob).get("/api/evaluations").json()["count"] == 0
    answer = post(token_client(bob), "/api/evaluations", {"run": run.pk, "step": 2, "dataset": "task:reverse"})
    assert answer.status_code == 404 and "error" in answer.json()


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"dataset": "task:reverse"}, 400, "run"),
        ({"run": "x", "step": 2, "dataset": "task:reverse"}, 400, "run"),
        ({"run": "RUN", "dataset": "task:reverse"}, 400, "step"),
        ({"run": "RUN", "step": 3, "dataset": "task:reverse"}, 400, "step"),
        ({"run": "RUN", "step": 2, "dataset": "task:nope"}, 400, "dataset"),
        ({"run": "RUN", "step": 2, "dataset": "somewhere"}, 400, "dataset"),
        ({"run": "RUN", "step": 2}, 400, "dataset"),
        ({"run": "RUN", "step": 2, "dataset": "task:reverse", "k": 0}, 400, "k"),
        ({"run": "RUN", "step": 2, "dataset": "task:reverse", "k": 65}, 400, "k"),
        ({"run": "RUN", "step": 2, "dataset": "task:reverse", "prompts": -1}, 400, "prompts"),
        ({"run": "RUN", "step": 2, "dataset": "task:reverse", "max_new_tokens": "many"}, 400, "max_new_tokens"),
        ({"model": "not-a-folder", "dataset": "task:reverse"}, 400, "model"),
        ({"run": "RUN", "step": 2, "dataset": "dataset:99999"}, 404, None),
    ],
)
def test_bad_input_is_a_4xx(alice, run, body, status, field):
    body = {k: (run.pk if v == "RUN" else v) for k, v in body.items()}
    response = post(token_client(alice), "/api/evaluations", body)
    assert response.status_code == status, response.content
    if field:
        assert field in response.json()["errors"]
    assert not EvaluationJob.objects.exists()


def test_not_json_and_run_eval_of_a_model_folder(alice):
    client = token_client(alice)
    response = client.post("/api/evaluations", "[1, 2]", content_type="application/json")
    assert response.status_code == 400
    response = post(client, "/api/evaluations", {"model": "x", "dataset": "run_eval"})
    assert response.status_code == 400


def test_private_dataset_of_another_user_is_404(alice, bob, run, dataset_root):  # noqa: F811
    bobs = upload(bob, "secret")
    response = post(
        token_client(alice), "/api/evaluations", {"run": run.pk, "step": 2, "dataset": f"dataset:{bobs.pk}"}
    )
    assert response.status_code == 404
    bobs.shared_with.add(alice)
    response = post(
        token_client(alice), "/api/evaluations", {"run": run.pk, "step": 2, "dataset": f"dataset:{bobs.pk}"}
    )
    assert response.status_code == 201 and response.json()["dataset"] == f"dataset:{bobs.pk}"


def test_list_and_samples_query_errors(alice, run):
    client = token_client(alice)
    assert client.get("/api/evaluations?status=done").status_code == 400
    assert client.get("/api/evaluations?run=abc").status_code == 400
    job = EvaluationJob.objects.create(
        owner=alice,
        run=run,
        step=2,
        dataset_kind="task",
        task="reverse",
        dataset_key="task:reverse",
        dataset_label="task reverse",
    )
    assert client.get(f"/api/evaluations/{job.pk}/samples?correct=maybe").status_code == 400
    EvaluationSample.objects.bulk_create(
        [EvaluationSample(job=job, index=i, prompt=f"p{i}", completion="c", correct=i % 2 == 0) for i in range(5)]
    )
    page = client.get(f"/api/evaluations/{job.pk}/samples?limit=2&correct=true").json()
    assert [s["index"] for s in page["samples"]] == [0, 2] and page["next_after"] == 2
    page = client.get(f"/api/evaluations/{job.pk}/samples?after=2&correct=true").json()
    assert [s["index"] for s in page["samples"]] == [4] and page["next_after"] is None


def test_evaluate_on_end_request(alice, bob, run):
    response = post(token_client(alice), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:copy", "k": 2})
    assert response.status_code == 201 and response.json()["k"] == 2
    assert EvaluateOnEnd.objects.get(run=run).task == "copy"
    assert post(token_client(alice), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "x"}).status_code == 400
    assert post(token_client(bob), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:copy"}).status_code == 404
    bob.user_permissions.add(Permission.objects.get(codename="view_run"))
    assert post(token_client(bob), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:copy"}).status_code == 403


def test_evaluate_on_end_makes_one_job_on_the_best_checkpoint(alice, run):
    Run.objects.filter(pk=run.pk).update(status="running")  # asked before it ends
    Checkpoint.objects.create(run=run, step=4, path="p", metrics={"reward/mean": 0.25})
    assert evaluate_on_end(run.pk) is None  # nothing asked
    post(token_client(alice), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:copy", "k": 2, "prompts": 5})
    job = evaluate_on_end(run.pk)
    assert (job.step, job.dataset_key, job.k, job.prompts, job.requested_by_run_id) == (2, "task:copy", 2, 5, run.pk)
    assert EvaluateOnEnd.objects.get(run=run).job_id == job.pk
    assert evaluate_on_end(run.pk) is None and EvaluationJob.objects.count() == 1  # made once


def test_evaluate_on_end_of_a_succeeded_run_is_queued_now(alice, alice_client, run):
    """A run past its end gets no promise it will never keep: the job is queued at once, on the best
    checkpoint, and the API's answer names it; the form goes to the job's page."""
    Checkpoint.objects.create(run=run, step=4, path="p", metrics={"reward/mean": 0.25})
    response = post(token_client(alice), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:copy", "k": 2})
    assert response.status_code == 201, response.content
    job = EvaluationJob.objects.get(pk=response.json()["job"])
    assert (job.step, job.dataset_key, job.k, job.status) == (2, "task:copy", 2, "queued")
    assert EvaluateOnEnd.objects.get(run=run).job_id == job.pk
    response = alice_client.post(
        reverse("evaluation-new"), {"run": run.pk, "dataset": "task:reverse", "prompts": 3, "k": 1, "on_end": "on"}
    )
    newer = EvaluationJob.objects.latest("pk")
    assert newer.pk != job.pk and newer.dataset_key == "task:reverse" and newer.step == 2
    assert response.status_code == 302 and response["Location"] == reverse("evaluation-detail", args=[newer.pk])


@pytest.mark.parametrize("status", ["failed", "cancelled", "pruned"])
def test_evaluate_on_end_of_a_run_that_ended_otherwise_is_refused(alice, alice_client, run, status):
    Run.objects.filter(pk=run.pk).update(status=status)
    response = post(token_client(alice), f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:copy"})
    assert response.status_code == 409 and f"has ended ({status})" in response.json()["error"]
    response = alice_client.post(
        reverse("evaluation-new"), {"run": run.pk, "dataset": "task:copy", "prompts": 3, "k": 1, "on_end": "on"}
    )
    assert response.status_code == 409 and "evaluate one of its checkpoints now" in response.content.decode()
    assert not EvaluateOnEnd.objects.exists() and not EvaluationJob.objects.exists()
    # and the run page does not offer it
    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="evaluate-on-end"' not in page and 'id="evaluate-best"' not in page


def test_a_succeeded_run_without_a_checkpoint_is_refused(alice):
    bare = make_run(alice, status="succeeded")
    response = post(token_client(alice), f"/api/runs/{bare.pk}/evaluate-on-end", {"dataset": "task:copy"})
    assert response.status_code == 409 and "without a checkpoint" in response.json()["error"]
    assert not EvaluateOnEnd.objects.exists()


def test_the_run_page_offers_on_end_until_the_run_ends_then_evaluate_now(alice, alice_client, run):
    Run.objects.filter(pk=run.pk).update(status="running")
    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="evaluate-on-end"' in page and 'id="evaluate-best"' not in page
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="evaluate-on-end"' not in page
    assert f'?run={run.pk}&amp;step=2" id="evaluate-best">Evaluate the best checkpoint (step 2) now' in page


def test_best_checkpoint_by_hand(alice):
    run = make_run(alice)

    def ck(step, **metrics):
        return Checkpoint(run=run, step=step, path="p", metrics=metrics)

    # eval/accuracy wins over reward/mean where any checkpoint has it; the newest of equal ones
    rows = [
        ck(2, **{"eval/accuracy": 0.5, "reward/mean": 0.9}),
        ck(4, **{"eval/accuracy": 0.75}),
        ck(6, **{"eval/accuracy": 0.75, "reward/mean": 0.1}),
        ck(8, **{"reward/mean": 1.0}),
    ]
    assert best_checkpoint(rows).step == 6
    assert best_checkpoint([ck(2, **{"reward/mean": 0.3}), ck(4, **{"reward/mean": 0.2})]).step == 2
    assert best_checkpoint([ck(2), ck(4)]).step == 4  # no metric: the newest
    assert best_checkpoint([ck(2, **{"eval/accuracy": float("nan")}), ck(4, **{"reward/mean": 0.1})]).step == 4
    assert best_checkpoint([]) is None


def test_leaderboard_ranks_the_newest_job_per_policy(alice, run):
    now = timezone.now()

    def job(pk, step, accuracy, minutes, pass_k=None, model=""):
        return EvaluationJob(
            pk=pk,
            owner=alice,
            run=None if model else run,
            step=None if model else step,
            model_path=model,
            accuracy=accuracy,
            pass_at_k=pass_k,
            finished_at=now - dt.timedelta(minutes=minutes),
        )

    # newest first, as the query gives them: job 1 replaces job 4 for step 2 (newer, though worse)
    jobs = [
        job(1, 2, 0.4, 1),
        job(2, 4, 0.6, 2, pass_k=0.7),
        job(3, 6, 0.6, 3, pass_k=0.9),
        job(4, 2, 0.9, 4),
        job(5, None, 0.5, 5, model="smol"),
    ]
    assert [j.pk for j in ranked(jobs)] == [3, 2, 5, 1]


def test_job_page_is_its_owners(client, alice, bob, run):
    job = EvaluationJob.objects.create(
        owner=alice,
        run=run,
        step=2,
        dataset_kind="task",
        task="reverse",
        dataset_key="task:reverse",
        dataset_label="task reverse",
    )
    url = reverse("evaluation-detail", args=[job.pk])
    assert client.get(url).status_code == 302 and client.get(url)["Location"].startswith(reverse("login"))
    client.force_login(bob)
    assert client.get(url).status_code == 404
    assert f'data-job="{job.pk}"' not in client.get(reverse("leaderboard") + "?dataset=task:reverse").content.decode()
    client.force_login(alice)
    page = client.get(url).content.decode()
    assert 'data-poll="1"' in page and 'id="job-progress"' in page  # queued: the page polls


def test_pages(alice_client, alice, run):
    job = EvaluationJob.objects.create(
        owner=alice,
        run=run,
        step=2,
        checkpoint=run.checkpoints.get(),
        dataset_kind="task",
        task="reverse",
        dataset_key="task:reverse",
        dataset_label="task reverse",
        status="succeeded",
        accuracy=0.625,
        pass_at_1=0.5,
        pass_at_k=0.75,
        reward_mean=0.3,
        k=4,
        finished_at=timezone.now(),
    )
    EvaluationSample.objects.create(
        job=job, index=0, prompt="rev abc=", completion="cba", answer="cba", reward=1.0, correct=True, samples_correct=3
    )
    board = alice_client.get(reverse("leaderboard") + "?dataset=task:reverse").content.decode()
    assert f'data-job="{job.pk}"' in board and "0.625" in board and "0.750" in board
    page = alice_client.get(reverse("evaluation-detail", args=[job.pk])).content.decode()
    assert "rev abc=" in page and "3 / 4" in page and 'id="job-results"' in page
    assert 'id="nav-evaluations"' in alice_client.get(reverse("evaluation-list")).content.decode()
    form = alice_client.get(reverse("evaluation-new") + f"?run={run.pk}&step=2").content.decode()
    assert 'value="task:reverse"' in form and f'value="{run.pk}"' in form
    response = alice_client.post(
        reverse("evaluation-new"), {"run": run.pk, "step": 9, "dataset": "task:reverse", "prompts": 4, "k": 1}
    )
    assert response.status_code == 400 and "has no checkpoint at step 9" in response.content.decode()
    response = alice_client.post(
        reverse("evaluation-new"), {"run": run.pk, "step": 2, "dataset": "task:reverse", "prompts": 4, "k": 1}
    )
    assert response.status_code == 302
    assert EvaluationJob.objects.filter(status="queued", k=1, prompts=4).count() == 1
    # "when the run ends" (of a run still going): the run's request, then back to the run page, which
    # links to the form
    Run.objects.filter(pk=run.pk).update(status="running")
    response = alice_client.post(
        reverse("evaluation-new"), {"run": run.pk, "dataset": "task:copy", "prompts": 3, "k": 2, "on_end": "on"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("run-detail", args=[run.pk])
    assert (EvaluateOnEnd.objects.get(run=run).task, EvaluateOnEnd.objects.get(run=run).k) == ("copy", 2)
    assert 'id="evaluate-on-end"' in alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()


def test_a_lost_workers_job_is_requeued_then_given_up(alice, run, settings, monkeypatch):
    from evaluations import recovery

    sent = []
    monkeypatch.setattr(recovery, "send_when_committed", lambda job: sent.append(job.pk))
    settings.PLATFORM_STALE_AFTER_S = 20
    now = timezone.now()

    def running(attempts, beat_s_ago):
        return EvaluationJob.objects.create(
            owner=alice,
            run=run,
            step=2,
            dataset_kind="task",
            task="reverse",
            dataset_key="task:reverse",
            dataset_label="task reverse",
            status="running",
            attempts=attempts,
            progress_done=3,
            heartbeat_at=now - dt.timedelta(seconds=beat_s_ago),
        )

    lost, alive, hopeless = running(1, 60), running(1, 5), running(3, 60)
    assert recovery.requeue_lost_jobs() == [lost.pk] and sent == [lost.pk]
    lost.refresh_from_db()
    assert (lost.status, lost.progress_done, lost.heartbeat_at) == ("queued", 0, None)
    assert EvaluationJob.objects.get(pk=alive.pk).status == "running"
    hopeless.refresh_from_db()
    assert hopeless.status == "failed" and "lost 3 times" in hopeless.error
    assert recovery.requeue_lost_jobs() == []


def test_admin_pages_render(client, staff, alice, run):
    job = EvaluationJob.objects.create(
        owner=alice,
        run=run,
        step=2,
        dataset_kind="task",
        task="reverse",
        dataset_key="task:reverse",
        dataset_label="task reverse",
        status="failed",
        error="missing 'prompt'",
    )
    EvaluationSample.objects.create(job=job, index=0, prompt="rev ab=", completion="ba", correct=True)
    EvaluateOnEnd.objects.create(run=run, dataset_kind="task", task="copy")
    client.force_login(staff)
    listing = client.get(reverse("admin:evaluations_evaluationjob_changelist")).content.decode()
    assert "task reverse" in listing
    page = client.get(reverse("admin:evaluations_evaluationjob_change", args=[job.pk])).content.decode()
    assert "missing &#x27;prompt&#x27;" in page and "rev ab=" in page
    assert client.get(reverse("admin:evaluations_evaluateonend_changelist")).status_code == 200


def test_launch_with_evaluate_on_end(alice, alice_client, bob, dataset_root):  # noqa: F811
    from experiments.models import Run

    experiment = make_experiment(alice, "launch-eval")
    url = f"/api/experiments/{experiment.pk}/runs"
    response = post(token_client(alice), url, {"evaluate_on_end": {"dataset": "task:copy", "k": 2}})
    assert response.status_code == 201, response.content
    asked = EvaluateOnEnd.objects.get(run_id=response.json()["id"])
    assert (asked.task, asked.k) == ("copy", 2)
    # refused: nothing is launched
    for body, status in (
        ({"evaluate_on_end": {"dataset": "task:nope"}}, 400),
        ({"evaluate_on_end": "copy"}, 400),
        ({"evaluate_on_end": {"dataset": f"dataset:{upload(bob, 'bobs').pk}"}}, 404),
    ):
        response = post(token_client(alice), url, body)
        assert response.status_code == status, response.content
        assert Run.objects.filter(experiment=experiment).count() == 1
    assert (
        "evaluate_on_end.dataset"
        in post(token_client(alice), url, {"evaluate_on_end": {"dataset": "x"}}).json()["errors"]
    )
    # the launch form's select
    page = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert 'id="launch-evaluate-on-end"' in page and 'value="task:reverse"' in page
    response = alice_client.post(
        reverse("experiment-launch", args=[experiment.pk]), {"evaluate_on_end": "task:reverse"}
    )
    assert response.status_code == 302
    newest = Run.objects.filter(experiment=experiment).latest("pk")
    assert EvaluateOnEnd.objects.get(run=newest).task == "reverse"

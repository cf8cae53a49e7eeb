"""/api/experiments/<id>/runs and /api/runs/...: launch, list, status, actions (409 when the status
does not allow them), metrics, chart, samples, checkpoints, events."""

from __future__ import annotations

import json

import pytest
from api_testlib import (  # noqa: F401 (fixtures)
    add_points,
    fresh_series_cache,
    make_experiment,
    make_run,
    token_client,
)

from experiments.models import Checkpoint, RolloutSample, Run, RunEvent


def test_launch_queues_a_run(alice, sent_messages, django_capture_on_commit_callbacks):  # noqa: F811
    experiment = make_experiment(alice, train__max_steps=5)
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs")
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert response.json()["status"] == "queued" and run.status == "queued"
    assert run.experiment == experiment and run.max_steps == 5 and run.config == experiment.config
    assert sent_messages == [(run.pk, run.attempt, run.queue)]
    listed = token_client(alice).get(f"/api/experiments/{experiment.pk}/runs").json()["runs"]
    assert [r["id"] for r in listed] == [run.pk]


def test_launch_options_and_errors(alice, bob, sent_messages):  # noqa: F811
    experiment = make_experiment(alice)
    client = token_client(alice)
    url = f"/api/experiments/{experiment.pk}/runs"
    response = client.post(url, json.dumps({"max_restarts": 0}), content_type="application/json")
    assert response.status_code == 201 and Run.objects.get(pk=response.json()["id"]).max_restarts == 0
    response = client.post(url, json.dumps({"max_restarts": -1}), content_type="application/json")
    assert response.status_code == 400 and "max_restarts" in response.json()["errors"]
    assert client.post(url, "nope", content_type="application/json").status_code == 400
    assert token_client(bob).post(url).status_code == 404
    assert Run.objects.count() == 1


def test_run_detail_fields(alice, bob):
    run = make_run(alice, status="running", step=3, worker_host="w1@host", latest_reward=0.5)
    body = token_client(alice).get(f"/api/runs/{run.pk}").json()
    for key in (
        "id",
        "status",
        "step",
        "max_steps",
        "progress",
        "restarts",
        "attempt",
        "max_restarts",
        "worker",
        "heartbeat_at",
        "created_at",
        "started_at",
        "finished_at",
        "duration_s",
        "latest_reward",
        "error",
        "params_digest",
        "experiment",
    ):
        assert key in body, key
    assert body["status"] == "running" and body["step"] == 3 and body["progress"] == pytest.approx(0.5)
    assert body["worker"] == "w1@host" and body["latest_reward"] == 0.5
    assert body["experiment"] == {"id": run.experiment_id, "name": run.experiment.name}
    assert token_client(bob).get(f"/api/runs/{run.pk}").status_code == 404


def test_run_list_visibility_and_status_filter(alice, bob, staff):
    mine = make_run(alice, status="running")
    paused = make_run(alice, status="paused")
    theirs = make_run(bob)
    ids = lambda body: sorted(r["id"] for r in body["runs"])  # noqa: E731
    assert ids(token_client(alice).get("/api/runs").json()) == sorted([mine.pk, paused.pk])
    assert ids(token_client(alice).get("/api/runs?status=running").json()) == [mine.pk]
    assert ids(token_client(alice).get("/api/runs?status=running,paused").json()) == sorted([mine.pk, paused.pk])
    assert ids(token_client(staff).get("/api/runs").json()) == sorted([mine.pk, paused.pk, theirs.pk])
    assert ids(token_client(staff).get(f"/api/runs?experiment={theirs.experiment_id}").json()) == [theirs.pk]
    assert token_client(alice).get("/api/runs?status=sleeping").status_code == 400
    assert token_client(alice).get("/api/runs?limit=x").status_code == 400
    assert len(token_client(staff).get("/api/runs?limit=1").json()["runs"]) == 1


@pytest.mark.parametrize(
    "action, before, after",
    [
        ("cancel", "queued", "cancelled"),
        ("cancel", "running", "cancelling"),
        ("cancel", "paused", "cancelled"),
        ("pause", "running", "pausing"),
        ("resume", "paused", "queued"),
        ("retry", "failed", "queued"),
        ("retry", "cancelled", "queued"),
    ],
)
def test_actions(alice, sent_messages, action, before, after):  # noqa: F811
    run = make_run(alice, status=before)
    response = token_client(alice).post(f"/api/runs/{run.pk}/{action}")
    assert response.status_code == 202, response.content
    assert response.json() == {"id": run.pk, "status": after}
    assert Run.objects.get(pk=run.pk).status == after


@pytest.mark.parametrize(
    "action, status",
    [
        ("pause", "queued"),
        ("pause", "succeeded"),
        ("resume", "running"),
        ("resume", "failed"),
        ("retry", "running"),
        ("retry", "succeeded"),
        ("cancel", "succeeded"),
        ("cancel", "failed"),
    ],
)
def test_illegal_actions_are_409(alice, sent_messages, action, status):  # noqa: F811
    run = make_run(alice, status=status)
    response = token_client(alice).post(f"/api/runs/{run.pk}/{action}")
    assert response.status_code == 409 and status in response.json()["error"]
    assert Run.objects.get(pk=run.pk).status == status


def test_actions_on_other_users_runs_404_and_get_405(alice, bob, sent_messages):  # noqa: F811
    run = make_run(alice, status="running")
    assert token_client(bob).post(f"/api/runs/{run.pk}/cancel").status_code == 404
    response = token_client(alice).get(f"/api/runs/{run.pk}/cancel")
    assert response.status_code == 405 and response["Allow"] == "POST" and "error" in response.json()
    assert Run.objects.get(pk=run.pk).status == "running"


def test_metrics_by_name_incremental(alice, fresh_series_cache):  # noqa: F811
    run = make_run(alice)
    add_points(run, {"reward/mean": [(2, 0.2), (0, 0.0), (1, 0.1)], "kl": [(0, 9.0)]})
    client = token_client(alice)
    url = f"/api/runs/{run.pk}/metrics"
    body = client.get(url, {"name": "reward/mean"}).json()
    assert body["points"] == [[0, 0.0], [1, 0.1], [2, 0.2]] and body["last_step"] == 2
    assert client.get(url, {"name": "reward/mean", "after_step": 1}).json()["points"] == [[2, 0.2]]
    assert client.get(url, {"name": "reward/mean", "after_step": 2}).json() == {
        "name": "reward/mean",
        "points": [],
        "last_step": 2,
    }
    add_points(run, {"reward/mean": [(3, 0.3)]})
    assert client.get(url, {"name": "reward/mean", "after_step": 2}).json()["points"] == [[3, 0.3]]
    assert client.get(url, {"name": "nope"}).json()["points"] == []
    for bad in ("x", "1.5", str(2**60)):
        response = client.get(url, {"name": "kl", "after_step": bad})
        assert response.status_code == 400 and "after_step" in response.json()["error"]


def test_metrics_all_series(alice, fresh_series_cache):  # noqa: F811
    run = make_run(alice)
    add_points(run, {"a": [(0, 1.0), (1, 2.0)], "b": [(1, 3.0)]})
    client = token_client(alice)
    url = f"/api/runs/{run.pk}/metrics"
    assert client.get(url).json() == {"series": {"a": [[0, 1.0], [1, 2.0]], "b": [[1, 3.0]]}, "last_step": 1}
    add_points(run, {"a": [(2, 5.0)]})
    assert client.get(url, {"after_step": 1}).json() == {"series": {"a": [[2, 5.0]]}, "last_step": 2}
    assert client.get(url, {"after_step": "?"}).status_code == 400


def test_chart_downsamples_with_bounds(alice, fresh_series_cache):  # noqa: F811
    run = make_run(alice)
    spike = 3001
    add_points(run, {"loss": [(s, 100.0 if s == spike else 1.0) for s in range(5000)], "short": [(0, 1.0), (5, 2.0)]})
    client = token_client(alice)
    url = f"/api/runs/{run.pk}/chart"
    body = client.get(url).json()
    loss = body["series"]["loss"]
    assert len(loss["steps"]) <= 2000 and len(loss["steps"]) == len(loss["values"])
    assert spike in loss["steps"] and loss["values"][loss["steps"].index(spike)] == 100.0
    assert body["series"]["short"] == {"steps": [0, 5], "values": [1.0, 2.0]}  # short: unchanged
    assert body["last_step"] == 4999
    small = client.get(url, {"max_points": 10}).json()["series"]["loss"]
    assert len(small["steps"]) <= 10 and spike in small["steps"]
    assert len(client.get(url, {"max_points": 10**6}).json()["series"]["loss"]["steps"]) <= 2000  # capped
    assert client.get(url, {"max_points": 0}).status_code == 400
    assert client.get(url, {"max_points": "lots"}).status_code == 400


def test_samples(alice):
    run = make_run(alice)
    for step in (1, 3):
        for index in range(2):
            RolloutSample.objects.create(
                run=run,
                step=step,
                index=index,
                prompt=f"p{step}",
                completion=f"c{index}",
                answer="a",
                reward=float(index),
                advantage=-1.0,
            )
    client = token_client(alice)
    url = f"/api/runs/{run.pk}/samples"
    body = client.get(url).json()
    assert body["steps"] == [3, 1] and body["step"] == 3
    assert body["samples"][1] == {
        "index": 1,
        "prompt": "p3",
        "completion": "c1",
        "answer": "a",
        "reward": 1.0,
        "advantage": -1.0,
        "prompt_messages": None,
        "prompt_segments": [{"kind": "text", "text": "p3"}],
        "completion_segments": [{"kind": "text", "text": "c1"}],
        "truncated": None,
        "in_loss": None,
        "overlong_penalty": None,
    }
    assert client.get(url, {"step": 1}).json()["samples"][0]["prompt"] == "p1"
    assert client.get(url, {"step": 2}).json()["samples"] == []
    assert client.get(url, {"step": "last"}).status_code == 400
    empty = make_run(alice)
    assert client.get(f"/api/runs/{empty.pk}/samples").json() == {"steps": [], "step": None, "samples": []}


def test_checkpoints(alice):
    run = make_run(alice)
    Checkpoint.objects.create(run=run, step=4, path="run-1/checkpoints/4", size_bytes=123, metrics={"reward/mean": 1})
    Checkpoint.objects.create(run=run, step=2, path="run-1/checkpoints/2", size_bytes=100)
    body = token_client(alice).get(f"/api/runs/{run.pk}/checkpoints").json()
    assert [c["step"] for c in body["checkpoints"]] == [2, 4]
    assert body["checkpoints"][1]["size_bytes"] == 123 and body["checkpoints"][1]["metrics"] == {"reward/mean": 1}
    assert {"step", "path", "size_bytes", "metrics", "created_at"} == set(body["checkpoints"][0])


def test_events_incremental(alice):
    run = make_run(alice)
    for i in range(5):
        run.add_event(f"line {i}", level="warning" if i == 4 else "info")
    client = token_client(alice)
    url = f"/api/runs/{run.pk}/events"
    body = client.get(url, {"limit": 3}).json()
    assert [e["message"] for e in body["events"]] == ["line 0", "line 1", "line 2"]
    assert {"id", "created_at", "level", "kind", "message"} <= set(body["events"][0])
    rest = client.get(url, {"after_id": body["last_id"]}).json()
    assert [e["message"] for e in rest["events"]] == ["line 3", "line 4"] and rest["events"][1]["level"] == "warning"
    assert rest["last_id"] == RunEvent.objects.filter(run=run).latest("id").pk
    assert client.get(url, {"after_id": rest["last_id"]}).json() == {"events": [], "last_id": rest["last_id"]}
    assert client.get(url, {"limit": 0}).status_code == 400
    assert client.get(url, {"after_id": "z"}).status_code == 400


def test_lists_do_not_query_per_row(alice, django_assert_max_num_queries):
    experiment = make_experiment(alice)
    for _ in range(5):
        make_run(alice, experiment=experiment)
    make_experiment(alice, name="second")
    client = token_client(alice)
    # a constant number: token, the user's permissions (two queries, once per request), the rows,
    # the runs' tags, the count
    for url in ("/api/runs", "/api/experiments", f"/api/experiments/{experiment.pk}/runs"):
        with django_assert_max_num_queries(7):
            assert client.get(url).status_code == 200
    with django_assert_max_num_queries(9):
        assert len(client.get(f"/api/experiments/{experiment.pk}").json()["runs"]) == 5


def test_launch_onto_a_named_queue(alice, sent_messages, django_capture_on_commit_callbacks):  # noqa: F811
    """A run can target a queue an admin registered for the user (workers take `worker --queues Q`);
    a bad name is a 400 naming the field."""
    from runner.models import RunQueue

    RunQueue.objects.create(name="gpu-h100").users.add(alice)
    experiment = make_experiment(alice)
    client = token_client(alice)
    with django_capture_on_commit_callbacks(execute=True):
        ok = client.post(
            f"/api/experiments/{experiment.pk}/runs", {"queue": "gpu-h100"}, content_type="application/json"
        )
    assert ok.status_code == 201, ok.content
    assert Run.objects.get(pk=ok.json()["id"]).queue == "gpu-h100"
    assert sent_messages[-1][2] == "gpu-h100"
    bad = client.post(
        f"/api/experiments/{experiment.pk}/runs", {"queue": "no spaces!"}, content_type="application/json"
    )
    assert bad.status_code == 400 and "queue" in bad.json()["errors"]

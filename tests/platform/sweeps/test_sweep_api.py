"""The sweep endpoints: create (400s name the field before any trial starts), list, detail with
trials, cancel (409 when not running), another user's sweep 404, the OpenAPI schema lists them."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment, token_client

from experiments.models import Run, RunStatus
from sweeps.models import Sweep

LR = "optimizer.learning_rate"
pytestmark = pytest.mark.django_db


def body(**fields) -> dict:
    return {
        "name": "lr",
        "space": {LR: {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "metric": "reward/mean",
        "max_trials": 3,
        "max_concurrent_trials": 2,
        "sampler": "random",
        "pruner": "median",
        "seed": 3,
        **fields,
    }


def post(client, path: str, data) -> tuple[int, dict]:
    response = client.post(path, json.dumps(data), content_type="application/json")
    return response.status_code, response.json()


def test_create_list_show_and_cancel_a_sweep(alice, sent_messages):
    experiment = make_experiment(alice)
    client = token_client(alice)
    status, created = post(client, f"/api/experiments/{experiment.pk}/sweeps", body())
    assert status == 201, created
    assert created["status"] == "running" and created["trial_count"] == 2 and created["max_trials"] == 3
    assert created["space"] == body()["space"] and created["pruner"] == "median"
    trials = created["trials"]
    assert [t["number"] for t in trials] == [0, 1] and all(t["status"] == "queued" for t in trials)
    assert all(1e-4 <= t["params"][LR] <= 1e-2 for t in trials) and trials[0]["params"] != trials[1]["params"]
    run = Run.objects.get(pk=trials[0]["run_id"])
    assert trials[0]["run_label"] == "lr #0" == run.label
    assert run.config["optimizer"]["learning_rate"] == trials[0]["params"][LR]

    listed = client.get("/api/sweeps").json()
    assert listed["count"] == 1 and listed["sweeps"][0]["id"] == created["id"]
    assert client.get(f"/api/experiments/{experiment.pk}/sweeps").json()["count"] == 1
    assert client.get("/api/sweeps?status=finished").json()["count"] == 0
    assert client.get("/api/sweeps?status=bogus").json()["errors"] == {
        "status": "must be 'running', 'finished', 'cancelled' or 'failed', got 'bogus'"
    }
    detail = client.get(f"/api/sweeps/{created['id']}").json()
    assert detail["trials"] == trials

    response = client.post(f"/api/sweeps/{created['id']}/cancel")
    assert response.status_code == 202 and response.json() == {"id": created["id"], "status": "cancelled"}
    assert Run.objects.get(pk=trials[0]["run_id"]).status == RunStatus.CANCELLED
    response = client.post(f"/api/sweeps/{created['id']}/cancel")
    assert response.status_code == 409 and "it is cancelled" in response.json()["error"]


@pytest.mark.parametrize(
    "fields, key, words",
    [
        (
            {"space": {"optimizer.lr": {"type": "float", "low": 0.1, "high": 0.2}}},
            "space.optimizer.lr",
            "no config field",
        ),
        (
            {"space": {"grpo.num_generations": {"type": "int", "low": 0, "high": 4}}},
            "space.grpo.num_generations",
            "the value 0 makes the config invalid",
        ),
        ({"space": {LR: {"type": "float", "low": -1.0, "high": 0.1}}}, f"space.{LR}", "the value -1.0"),
        ({"metric": "made/up"}, "metric", "a metric the trainer reports"),
        ({"max_trials": 0}, "max_trials", "must be at least 1"),
        ({"sampler": "grid"}, f"space.{LR}", "listed values"),
        (
            {"sampler": "grid", "space": {"seed": {"type": "categorical", "choices": [1, 2]}}},
            "max_trials",
            "the grid has 2 points",
        ),
        ({"pruner": "sometimes"}, "pruner", "must be 'none', 'median'"),
        ({"name": ""}, "name", "letters"),
        ({"extra": 1}, "(input)", "unknown field(s) extra"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_starts_nothing(alice, sent_messages, fields, key, words):
    experiment = make_experiment(alice)
    status, answer = post(token_client(alice), f"/api/experiments/{experiment.pk}/sweeps", body(**fields))
    assert status == 400 and words in answer["errors"][key], answer
    assert not Sweep.objects.exists() and not Run.objects.exists() and not sent_messages


def test_not_json_is_a_400(alice):
    experiment = make_experiment(alice)
    response = token_client(alice).post(
        f"/api/experiments/{experiment.pk}/sweeps", "[1", content_type="application/json"
    )
    assert response.status_code == 400 and "error" in response.json()


def test_another_users_sweep_is_404_and_their_experiment_too(alice, bob, sent_messages):
    experiment = make_experiment(alice)
    status, created = post(token_client(alice), f"/api/experiments/{experiment.pk}/sweeps", body())
    client = token_client(bob)
    assert client.get(f"/api/sweeps/{created['id']}").status_code == 404
    assert client.post(f"/api/sweeps/{created['id']}/cancel").status_code == 404
    assert client.get("/api/sweeps").json()["count"] == 0
    assert post(client, f"/api/experiments/{experiment.pk}/sweeps", body())[0] == 404
    assert Sweep.objects.get().status == "running"


def test_the_openapi_schema_lists_the_sweep_endpoints(client):
    paths = client.get("/api/schema").json()["paths"]
    assert {"post", "get"} <= set(paths["/api/experiments/{pk}/sweeps"])
    assert "get" in paths["/api/sweeps"] and "get" in paths["/api/sweeps/{pk}"]
    assert "202" in paths["/api/sweeps/{pk}/cancel"]["post"]["responses"]

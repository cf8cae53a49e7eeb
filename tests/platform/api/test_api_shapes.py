"""Every JSON answer of the API fits the shape its contract declares (api/contract.py). One scenario
calls every operation of the OpenAPI document (api/openapi.py) as a user who has one of everything
(experiments, runs with metrics, samples, events and checkpoints, a dataset, evaluation jobs, a
sweep, an alert rule and its log), and reads each answer back with the pydantic model the view's
`Op` names for that status: it forbids a key the shape lacks and requires every required field.
The views build their answers from those same models (api.endpoint.send), so a shape that lost a
field, a view that adds one, or a view answering another model than its contract names fails here
(as a 500, or as a body its declared model refuses)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
from api_testlib import add_points, make_run, token_client
from datasets_testlib import dataset_root, jsonl  # noqa: F401 (fixture)
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import HttpResponseBase, JsonResponse
from django.test import RequestFactory
from django.urls import re_path, resolve
from django.utils import timezone
from platform_testlib import tiny_config
from pydantic import ValidationError

from alerts.models import AlertDelivery
from api import openapi
from api.contract import Error, Errors, Op, Shape, operations
from api.endpoint import api_endpoint
from evaluations.models import EvaluationJob, EvaluationSample
from experiments.models import Checkpoint, RolloutSample, RunEvent
from tests.tiny_models import write_model_config

pytestmark = pytest.mark.django_db

EPISODE = {
    "env": "calculator",
    "turns": [
        {"role": "assistant", "text": "<tool_call>1+1</tool_call>", "tokens": 6},
        {"role": "tool", "text": "2", "tokens": 1},
    ],
    "reward_parts": {"exact_match": 1.0},
    "end_reason": "done",
    "tool_calls": 1,
    "tool_errors": 0,
    "truncated": False,
    "in_loss": True,
    "overlong_penalty": 0.0,
    "generation": 1,
}
SWEEP = {
    "name": "lr",
    "space": {"optimizer.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2}},
    "metric": "reward/mean",
    "max_trials": 2,
    "max_concurrent_trials": 1,
    "sampler": "random",
}


def document_operations() -> set[str]:
    return {f"{method.upper()} {path}" for path, item in openapi.build()["paths"].items() for method in item}


def check_answer(op: Op, response: HttpResponseBase) -> None:
    """`response` is what `op` declares for its status: its model reads the JSON body (the shared
    errors: either of them, as the document's anyOf says), or it has the declared media type, or no
    body. Raises AssertionError or pydantic's ValidationError."""
    assert response.status_code in op.responses, (response.status_code, "is not declared", op.responses)
    shape = op.responses[response.status_code]
    content = b"".join(response.streaming_content) if response.streaming else response.content
    if shape is None:
        assert content == b"", content[:200]
    elif isinstance(shape, str):
        assert response["Content-Type"].startswith(shape), response["Content-Type"]
    elif shape in (Error, Errors):
        body = json.loads(content)
        (Errors if "errors" in body else Error).model_validate(body)
    else:
        shape.model_validate_json(content)


class Caller:
    """Sends requests as one client, checks each answer against its operation's declared shape and
    records the operations called ("GET /api/runs/{pk}", as the document names them)."""

    def __init__(self, client):
        self.client = client
        self.called: set[str] = set()
        self.routes = {
            view: openapi.API_PREFIX + openapi.path_template(regex)[0]
            for regex, view in openapi.api_routes()
            if getattr(view, "api_ops", None)
        }

    def __call__(self, method: str, path: str, status: int, body=None) -> dict | None:
        send = getattr(self.client, method.lower())
        if body is None:
            response = send(path)
        elif isinstance(body, dict) and any(isinstance(v, SimpleUploadedFile) for v in body.values()):
            response = send(path, body)  # multipart
        else:
            response = send(path, json.dumps(body), content_type="application/json")
        content = response.content if not response.streaming else b""
        assert response.status_code == status, (method, path, response.status_code, content[:500])
        view = resolve(urlsplit(path).path).func
        check_answer(view.api_ops[method], response)
        self.called.add(f"{method} {self.routes[view]}")
        return response.json() if response.get("Content-Type") == "application/json" and content else None


@pytest.fixture
def models_root(settings, tmp_path):
    root = tmp_path / "models"
    write_model_config(root / "tiny")
    settings.PLATFORM_MODELS_DIRS = [root]
    return root


@pytest.fixture
def finished_run(alice, settings, tmp_path):
    """A succeeded run with metrics (one non-finite), a plain and a multi-turn sample, an event and
    a checkpoint whose files are on disk (so it can be forked)."""
    settings.ARTIFACTS_DIR = tmp_path / "runs"
    run = make_run(alice, status="succeeded", run_dir="run-shapes", step=4, latest_reward=0.5)
    add_points(run, {"reward/mean": [(1, 0.1), (2, float("nan")), (4, 1.0)], "loss": [(1, 2.0), (4, 1.5)]})
    RolloutSample.objects.create(
        run=run,
        step=4,
        index=0,
        prompt="1+1=",
        completion="2",
        answer="2",
        reward=1.0,
        advantage=0.5,
        prompt_hash="0" * 32,
    )
    RolloutSample.objects.create(
        run=run,
        step=4,
        index=1,
        prompt="2+2=",
        completion="4",
        answer="4",
        reward=1.0,
        advantage=0.5,
        prompt_hash="1" * 32,
        extra=EPISODE,
    )
    RunEvent.objects.create(run=run, attempt=1, message="done")
    folder = settings.ARTIFACTS_DIR / "run-shapes" / "checkpoints" / "4" / "params"
    folder.mkdir(parents=True)
    (folder / "weights").write_text("weights")
    Checkpoint.objects.create(
        run=run, step=4, path="run-shapes/checkpoints/4", size_bytes=10, metrics={"reward/mean": 1.0}
    )
    return run


def test_every_operation_answers_the_shape_its_contract_declares(
    alice, bob, sent_messages, dataset_root, models_root, finished_run
):
    call = Caller(token_client(alice))
    run = finished_run.pk

    experiment = call("POST", "/api/experiments", 201, {"name": "shapes", "config": tiny_config()})["id"]
    call("GET", "/api/experiments", 200)
    call("PUT", f"/api/experiments/{experiment}", 200, {"name": "shapes", "config": tiny_config()})
    call("PATCH", f"/api/experiments/{experiment}", 200, {"description": "every answer"})
    queued = call("POST", f"/api/experiments/{experiment}/runs", 201, {})["id"]
    assert len(call("GET", f"/api/experiments/{experiment}", 200)["runs"]) == 1
    call("GET", f"/api/experiments/{experiment}/runs", 200)

    assert call("GET", "/api/runs?metrics=reward/mean", 200)["count"] == 2
    call("GET", f"/api/runs/compare?runs={run},{queued}", 200)
    call("GET", f"/api/runs/{run}", 200)
    call("PATCH", f"/api/runs/{run}", 200, {"name": "named", "tags": ["a"], "notes": "n"})
    call("GET", f"/api/runs/{run}/metrics", 200)
    assert call("GET", f"/api/runs/{run}/metrics?name=reward/mean", 200)["points"][1] == [2, "NaN"]
    call("GET", f"/api/runs/{run}/chart", 200)
    assert "episode" in call("GET", f"/api/runs/{run}/samples?step=4", 200)["samples"][1]
    assert len(call("GET", f"/api/runs/{run}/samples?kind=train&limit=5", 200)["samples"]) == 2
    call("GET", f"/api/runs/{run}/samples.jsonl", 200)
    call("GET", f"/api/runs/{run}/events", 200)
    call("GET", f"/api/runs/{run}/checkpoints", 200)
    call("GET", f"/api/runs/{run}/checkpoints/4/hf.zip", 409)  # a toy preset has no Hugging Face form
    call("POST", f"/api/runs/{run}/export", 400, {"step": 4})  # nor does its export
    call("POST", f"/api/runs/{run}/fork", 201, {"step": 4})
    call("POST", f"/api/runs/{queued}/evaluate-on-end", 201, {"dataset": "task:reverse"})
    call("POST", f"/api/runs/{queued}/cancel", 202)
    assert call("GET", "/api/models", 200)["models"][0]["name"] == "tiny"
    call("GET", "/api/account", 200)

    upload = {"name": "arith", "file": SimpleUploadedFile("arith.jsonl", jsonl()), "description": "sums"}
    dataset = call("POST", "/api/datasets", 201, upload)["id"]
    call("GET", "/api/datasets", 200)
    call("GET", f"/api/datasets/{dataset}", 200)
    call("POST", f"/api/datasets/{dataset}/share", 200, {"users": [bob.username]})
    call("POST", f"/api/datasets/{dataset}/unshare", 200, {"users": [bob.username]})
    call("DELETE", f"/api/datasets/{dataset}", 204)

    asked = {"run": run, "step": 4, "dataset": "task:reverse", "prompts": 8, "k": 2}
    scored = call("POST", "/api/evaluations", 201, asked)["id"]
    cancelled = call("POST", "/api/evaluations", 201, asked)["id"]
    call("POST", f"/api/evaluations/{cancelled}/cancel", 202)
    EvaluationJob.objects.filter(pk=scored).update(
        status="succeeded", accuracy=0.5, pass_at_1=0.5, pass_at_k=1.0, reward_mean=0.5, finished_at=timezone.now()
    )
    EvaluationSample.objects.create(
        job_id=scored, index=0, prompt="ab", completion="ba", answer="ba", reward=1.0, correct=True, samples_correct=2
    )
    call("GET", "/api/evaluations", 200)
    call("GET", f"/api/evaluations/{scored}", 200)
    call("GET", f"/api/evaluations/{scored}/samples", 200)
    assert call("GET", "/api/evaluations/leaderboard?dataset=task:reverse", 200)["rows"][0]["rank"] == 1

    sweep = call("POST", f"/api/experiments/{experiment}/sweeps", 201, SWEEP)["id"]
    call("GET", f"/api/experiments/{experiment}/sweeps", 200)
    call("GET", "/api/sweeps", 200)
    assert call("GET", f"/api/sweeps/{sweep}", 200)["trials"]
    call("POST", f"/api/sweeps/{sweep}/cancel", 202)

    rule = call("POST", "/api/alerts", 201, {"events": ["failed"], "channel": "email", "target": "alice@example.com"})[
        "id"
    ]
    AlertDelivery.objects.create(rule_id=rule, run=finished_run, event="failed", key="k", message="run failed")
    call("GET", "/api/alerts", 200)
    call("GET", f"/api/alerts/{rule}", 200)
    call("PATCH", f"/api/alerts/{rule}", 200, {"enabled": False})
    assert call("GET", "/api/alerts/deliveries", 200)["count"] == 1
    call("DELETE", f"/api/alerts/{rule}", 204)

    assert document_operations() - call.called == set()  # every operation the document describes


# --- the checks can fail -----------------------------------------------------------------------


class Pair(Shape):
    id: int
    name: str


def test_an_answer_with_an_undeclared_key_or_without_a_field_fails_the_check():
    op = Op(responses={200: Pair, 409: Error})
    check_answer(op, JsonResponse({"id": 1, "name": "a"}))
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        check_answer(op, JsonResponse({"id": 1, "name": "a", "owner": "alice"}))
    with pytest.raises(ValidationError, match="Field required"):
        check_answer(op, JsonResponse({"id": 1}))
    with pytest.raises(AssertionError, match="is not declared"):
        check_answer(op, JsonResponse({"id": 1, "name": "a"}, status=201))


def test_a_view_that_strays_from_its_shape_answers_500(alice, caplog):
    """A view answering a dict, or building its shape with a key the shape lacks, is a bug the
    endpoint answers with a JSON 500 (logged), never a body that drifts from the document."""

    @operations(GET=Op(responses={200: Pair}))
    @api_endpoint("GET")
    def plain_dict(request):
        return {"id": 1, "name": "a"}

    @operations(GET=Op(responses={200: Pair}))
    @api_endpoint("GET")
    def extra_key(request):
        return Pair(id=1, name="a", owner="alice")

    @operations(GET=Op(responses={200: Pair}))
    @api_endpoint("GET")
    def fits(request):
        return Pair(id=1, name="a")

    request = RequestFactory().get("/api/pairs")
    request.user = alice
    assert json.loads(fits(request).content) == {"id": 1, "name": "a"}
    for view in (plain_dict, extra_key):
        response = view(request)
        assert response.status_code == 500 and json.loads(response.content) == {
            "error": "internal error (logged on the server)"
        }
    assert len(openapi.build([re_path(r"^pairs/?$", fits)])["paths"]) == 1

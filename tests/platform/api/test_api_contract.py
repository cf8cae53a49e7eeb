"""The API keeps its contract: the generated OpenAPI schema covers every route under /api/, and
Schemathesis fuzzes every operation it describes as an authenticated user with some data (an
experiment, a finished run with metrics, samples, events and a checkpoint): no 5xx, and every answer
has a documented status, content type and body. Bounded and derandomized so CI is reproducible."""

from __future__ import annotations

import json
import re

import pytest
import schemathesis
from api_testlib import add_points, make_experiment, make_run
from django.core import signals
from django.db import close_old_connections
from django.test import Client
from django.urls import re_path
from hypothesis import HealthCheck, Phase, given, settings
from pydantic import BaseModel
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api import openapi
from api.contract import Op, operations
from api.endpoint import api_endpoint
from api.models import ApiToken
from experiments.models import Checkpoint, RolloutSample, RunEvent
from grpo_platform.wsgi import application

EXAMPLES_PER_OPERATION = 40
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

DOCUMENT = openapi.build()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
SCHEMA.app = application
OPERATIONS = sorted(f"{method.upper()} {path}" for path, item in DOCUMENT["paths"].items() for method in item)


# --- the generator ------------------------------------------------------------------------------


def test_every_api_route_declares_its_operations():
    assert openapi.undeclared_routes() == []


def test_path_templates_from_route_regexes():
    template, params = openapi.path_template(r"^runs/(?P<pk>[0-9]{1,18})/checkpoints/(?P<step>[0-9]{1,9})/hf\.zip$")
    assert template == "runs/{pk}/checkpoints/{step}/hf.zip"
    assert params == {
        "pk": {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
        "step": {"type": "integer", "minimum": 0, "maximum": 10**9 - 1},
    }
    template, params = openapi.path_template(r"^runs/(?P<pk>[0-9]{1,18})/(?P<action>cancel|pause)/?$")
    assert template == "runs/{pk}/{action}"
    assert params["action"] == {"type": "string", "enum": ["cancel", "pause"]}


def test_an_undeclared_endpoint_is_reported():
    @api_endpoint("GET")
    def bare(request):
        return {}

    @operations(GET=Op(responses={200: None}))
    @api_endpoint("GET")
    def declared(request):
        return {}

    patterns = [re_path(r"^bare/?$", bare), re_path(r"^declared/?$", declared), re_path(r"", bare)]
    assert openapi.undeclared_routes(patterns) == ["^bare/?$"]
    assert list(openapi.build(patterns)["paths"]) == ["/api/declared"]


def test_a_multipart_body_with_a_file():
    class Upload(BaseModel):
        name: str
        file: bytes

    @operations(POST=Op(form=Upload, responses={201: None}))
    @api_endpoint("POST")
    def upload(request):
        return {}

    operation = openapi.build([re_path(r"^uploads/?$", upload)])["paths"]["/api/uploads"]["post"]
    schema = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["properties"]["file"] == {"type": "string", "format": "binary", "title": "File"}
    assert schema["required"] == ["name", "file"]
    assert set(operation["responses"]) == {"201", "400", "401", "413", "414"}


def test_operations_must_match_the_served_methods():
    with pytest.raises(TypeError, match="differ"):
        operations(POST=Op(responses={201: None}))(api_endpoint("GET")(lambda request: {}))


def test_schema_is_openapi_31_with_the_token_scheme(client):
    response = client.get("/api/schema")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["token"] == {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": "`Token <key>`: a key from the API tokens page",
    }
    run = document["paths"]["/api/runs/{pk}"]
    assert set(run) == {"get", "patch"}
    assert run["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunDetail"
    }
    assert run["get"]["summary"] == "A run: status, progress, config and lineage"
    assert run["patch"]["summary"] == "Rename a run, or replace its tags or notes"
    assert "RunDetail" in document["components"]["schemas"]
    params = {p["name"]: p for p in document["paths"]["/api/runs"]["get"]["parameters"]}
    assert params["tag"]["schema"] == {
        "type": "array",
        "maxItems": 10,
        "items": {"type": "string", "pattern": "^(?:[A-Za-z0-9._:/-]{1,64})$"},
    }
    assert params["tag"]["style"] == "form" and params["tag"]["explode"] is True  # ?tag=a&tag=b
    assert params["status"]["schema"]["items"]["enum"][0] == "queued"


def test_each_method_of_a_path_has_its_own_summary():
    """POST/PUT/PATCH entries used to repeat the GET summary (the docstring's first line)."""
    for path, item in openapi.build()["paths"].items():
        summaries = {method: op["summary"] for method, op in item.items()}
        assert len(set(summaries.values())) == len(summaries), (path, summaries)
        for method, summary in summaries.items():
            others = [m.upper() for m in summaries if m != method]
            assert not any(summary.startswith(m) for m in others), (path, method, summary)


def test_a_summary_from_a_docstring_that_describes_several_methods():
    doc = (
        'GET: the run. PATCH {"name"?: text} (who may steer it. Or staff): replaces its name.\n'
        "It answers the run. PUT (name required) /\nDELETE: 204; gone."
    )
    assert openapi.method_summary(doc, "GET") == "GET: the run."
    assert (
        openapi.method_summary(doc, "PATCH") == 'PATCH {"name"?: text} (who may steer it. Or staff): replaces its name.'
    )
    assert openapi.method_summary(doc, "PUT") == "PUT (name required)"
    assert openapi.method_summary(doc, "DELETE") == "DELETE: 204; gone."
    assert openapi.method_summary(doc, "POST") == ""
    assert openapi.method_summary("POST " + "word " * 40, "POST").endswith(" …")


def test_docs_page_loads_swagger_ui_from_this_site_only(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "swagger-ui-bundle.js" in page and 'data-schema-url="/api/schema"' in page
    urls = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert urls and all(u.startswith("/") for u in urls)  # nothing from another host (no CDN)
    assert "<script>" not in page  # the CSP allows no inline script


# --- Schemathesis ------------------------------------------------------------------------------


@pytest.fixture
def in_process_requests():
    """Requests through the WSGI app keep the test's database connection (its transaction), as
    Django's test client does: no closing of connections around each request."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(alice, sent_messages, in_process_requests):
    """Alice's token and her objects: an experiment and a failed run (retry, then cancel, can change
    it) with everything a run reports."""
    experiment = make_experiment(alice)
    run = make_run(alice, status="failed", experiment=experiment, step=4)
    add_points(run, {"reward/mean": [(1, 0.1), (2, 0.5), (3, 0.75), (4, 1.0)], "loss": [(1, 2.0), (4, 1.5)]})
    for index in range(2):
        RolloutSample.objects.create(
            run=run,
            step=4,
            index=index,
            prompt="1+1=",
            completion="2",
            answer="2",
            reward=1.0,
            advantage=0.5,
            prompt_hash="0" * 32,
        )
    Checkpoint.objects.create(
        run=run, step=4, path=f"run-{run.pk}/checkpoints/4", size_bytes=10, metrics={"reward/mean": 1.0}
    )
    RunEvent.objects.create(run=run, attempt=1, message="done")
    return {"token": ApiToken.issue(alice).key, "experiment": experiment.pk, "run": run.pk, "step": 4}


def _aim_at_world(case, world) -> None:
    """Half the cases (an even drawn id, so reproducibly) ask for Alice's own objects
    instead of ids that do not exist, so the fuzzing reaches past the 404s."""
    params = case.path_parameters or {}
    pk = params.get("pk")
    if isinstance(pk, int) and pk % 2 == 0:
        params["pk"] = world["experiment"] if case.path.startswith("/api/experiments/") else world["run"]
        if "step" in params:
            params["step"] = world["step"]
        if isinstance(case.body, dict) and isinstance(case.body.get("step"), int):  # a fork's checkpoint
            case.body["step"] = world["step"]
    runs = (case.query or {}).get("runs")
    if isinstance(runs, str) and runs.split(",")[0].isdecimal() and int(runs.split(",")[0]) % 2 == 0:
        case.query["runs"] = f"{world['run']},{runs}" if "," in runs else str(world["run"])


@pytest.mark.django_db
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_keeps_the_contract(label, mode, world):
    """Positive cases fit the schema, negative ones break it (wrong types, missing or extra
    fields): both must get a documented answer, never a server error."""
    operation = SCHEMA.find_operation_by_label(label)
    headers = {"Authorization": f"Token {world['token']}"}
    answered = []

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case):
        _aim_at_world(case, world)
        response = case.call_and_validate(headers=headers, checks=CHECKS)
        answered.append(response.status_code)

    fuzz()

    assert answered and all(status < 500 for status in answered)


def test_the_fuzzing_reaches_real_objects(world):
    """The objects the fuzzing aims at answer 200 with a token (else it would only meet 404s)."""
    client = Client(headers={"authorization": f"Token {world['token']}"})
    assert client.get(f"/api/runs/{world['run']}/samples").json()["step"] == 4
    assert json.loads(client.get(f"/api/experiments/{world['experiment']}").content)["id"] == world["experiment"]


def test_a_wrong_api_path_answers_json_404_to_any_method():
    """Found by the fuzzing: a PATCH to /api/runs/true met CSRF's HTML 403 before the JSON 404."""
    response = Client(enforce_csrf_checks=True).patch("/api/runs/true", "{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json() == {"error": "no API endpoint at /api/runs/true"}

"""Requests are read through the shapes their operations declare (api/inputs.py): query parameters
before the view runs, the body when the view asks. The reader's rules against hand-written cases,
then the endpoints: a value the document does not allow is a 400 naming it, and someone else's
object is still a 404 whatever the body holds."""

from __future__ import annotations

import json
from typing import ClassVar, Literal

import pytest
from api_testlib import make_experiment, make_run, token_client
from django.http import QueryDict
from pydantic import BaseModel, Field

from api import openapi
from api.inputs import InvalidInput, Query, read_body, read_query


class Listing(Query):
    comma_separated: ClassVar[tuple[str, ...]] = ("tag",)
    limit: int = Field(100, ge=1)
    status: Literal["queued", "running"] | None = None
    tag: list[str] | None = None
    name: list[str] | None = None
    done: bool | None = None


class Launch(BaseModel):
    max_restarts: int | None = Field(None, ge=0, le=100)
    overrides: list[str] | None = None


def query(text: str) -> Listing:
    return read_query(Listing, QueryDict(text))


def refused(read) -> dict[str, str]:
    with pytest.raises(InvalidInput) as caught:
        read()
    return caught.value.errors


def test_defaults_blanks_lists_and_unknown_parameters():
    assert query("") == Listing(limit=100)
    assert query("limit=&status=") == Listing(limit=100)  # an empty parameter is an absent one
    assert query("limit=7&limit=9").limit == 9  # a single value: the last one given
    assert query("tag=a,b&tag=c").tag == ["a", "b", "c"]  # comma_separated: split
    assert query("name=a,b&name=c").name == ["a,b", "c"]  # not listed: kept whole
    assert query("done=true").done is True and query("done=false").done is False
    assert query("color=red&limit=3") == Listing(limit=3)  # a parameter the shape lacks is ignored


def test_refused_parameters_are_named_with_what_was_sent():
    assert refused(lambda: query("limit=x")) == {"limit": "must be a whole number, got 'x'"}
    assert refused(lambda: query("limit=0")) == {"limit": "must be at least 1, got '0'"}
    assert refused(lambda: query("status=paused")) == {"status": "must be 'queued' or 'running', got 'paused'"}
    assert refused(lambda: query("done=maybe")) == {"done": "must be true or false, got 'maybe'"}
    # beyond 2**53 a whole number would overflow the databases' integers
    assert refused(lambda: query(f"limit={2**53 + 1}")) == {"limit": f"is out of range: {2**53 + 1}"}
    assert query(f"limit={2**53}").limit == 2**53


def test_a_body_names_its_fields_and_a_list_names_its_item():
    assert read_body(Launch, {"max_restarts": 3, "other": 1}) == Launch(max_restarts=3)
    assert refused(lambda: read_body(Launch, {"max_restarts": 101, "overrides": ["a=1", 2]})) == {
        "max_restarts": "must be at most 100, got 101",
        "overrides": "item 1 must be a string, got 2",
    }


def test_a_query_parameter_outside_its_shape_is_a_400_naming_it(alice):
    client = token_client(alice)
    run = make_run(alice, status="succeeded", step=2)
    answer = client.get(f"/api/runs/{run.pk}/events?limit=0")
    assert answer.status_code == 400
    assert answer.json() == {
        "errors": {"limit": "must be at least 1, got '0'"},
        "error": "limit: must be at least 1, got '0'",
    }
    answer = client.get("/api/sweeps?status=sleeping")
    assert answer.status_code == 400 and set(answer.json()["errors"]) == {"status"}
    answer = client.get("/api/evaluations?limit=5&correct=maybe")  # `correct` is not this list's: ignored
    assert answer.status_code == 200
    # the shape's defaults are what the view uses: no ?limit= means 100 in the document and the answer
    document = openapi.build()
    limit = next(p for p in document["paths"]["/api/experiments"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["default"] == 100


def test_the_runs_table_takes_statuses_repeated_or_comma_separated(alice):
    client = token_client(alice)
    running = make_run(alice, status="running")
    make_run(alice, status="failed")
    paused = make_run(alice, status="paused")
    for address in ("/api/runs?status=running,paused", "/api/runs?status=running&status=paused"):
        answer = client.get(address)
        assert answer.status_code == 200
        assert {r["id"] for r in answer.json()["runs"]} == {running.pk, paused.pk}
    answer = client.get("/api/runs?status=running,asleep")
    assert answer.status_code == 400 and "asleep" in answer.json()["errors"]["status"]


def test_a_body_is_read_after_the_object_is_found(alice, bob):
    """Someone else's run is a 404 whatever the body holds; on your own, the body's shape answers."""
    theirs = make_run(bob, status="succeeded", step=2)
    mine = make_run(alice, status="succeeded", step=2)
    client = token_client(alice)
    bad = json.dumps({"step": -1, "dtype": "float64"})
    assert client.post(f"/api/runs/{theirs.pk}/export", bad, content_type="application/json").status_code == 404
    answer = client.post(f"/api/runs/{mine.pk}/export", bad, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["errors"] == {
        "step": "must be at least 0, got -1",
        "dtype": "must be 'float32' or 'bfloat16', got 'float64'",
    }


def test_launch_reads_its_body_through_the_shape(alice):
    experiment = make_experiment(alice)
    client = token_client(alice)
    body = json.dumps({"max_restarts": "three", "queue": "no spaces", "evaluate_on_end": [1]})
    answer = client.post(f"/api/experiments/{experiment.pk}/runs", body, content_type="application/json")
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert set(errors) == {"max_restarts", "queue", "evaluate_on_end"}
    assert errors["max_restarts"] == "must be a whole number, got 'three'"
    assert experiment.runs.count() == 0

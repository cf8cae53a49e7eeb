"""Authentication, CSRF and permissions across the whole API: every /api/ URL pattern answers an
anonymous caller 401 and another user 404 (staff too, without the model permission), always in
JSON; the view permission reads others' rows (changing them: 403), the change permission steers."""

from __future__ import annotations

import json
import re

import pytest
from api_testlib import make_run, token_client  # noqa: F401 (fixtures)
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from api.models import ApiToken
from experiments.models import Experiment, Run


def api_patterns() -> list[tuple[str, list[str]]]:
    """(URL template with <pk>/<action> to fill, methods) for every /api/ endpoint."""
    resolver = next(p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and str(p.pattern) == "api/")
    found = []
    for pattern in resolver.url_patterns:
        assert isinstance(pattern, URLPattern)
        methods = getattr(pattern.callback, "api_methods", None)
        if methods is None:
            continue  # the JSON 404 catch-all
        regex = str(pattern.pattern).lstrip("^").rstrip("$").replace("/?", "").replace("\\.", ".")
        if "(?P<action>" in regex:
            for action in re.search(r"\(\?P<action>([^)]*)\)", regex).group(1).split("|"):
                found.append(("/api/" + re.sub(r"\(\?P<action>[^)]*\)", action, regex), methods))
        else:
            found.append(("/api/" + regex, methods))
    found = [(re.sub(r"\(\?P<pk>[^)]*\)", "{pk}", url), methods) for url, methods in found]
    return [(re.sub(r"\(\?P<\w+>[^)]*\)", "1", url), methods) for url, methods in found]  # e.g. a step


def call(client, method, url, body=None):
    if method in ("GET", "HEAD"):
        return getattr(client, method.lower())(url)
    return getattr(client, method.lower())(url, data=json.dumps(body or {}), content_type="application/json")


def test_every_endpoint_is_covered_by_the_walk():
    urls = {url for url, _ in api_patterns()}
    assert {
        "/api/experiments",
        "/api/experiments/{pk}",
        "/api/experiments/{pk}/runs",
        "/api/runs",
        "/api/runs/{pk}",
        "/api/runs/{pk}/metrics",
        "/api/runs/{pk}/chart",
        "/api/runs/{pk}/samples",
        "/api/runs/{pk}/checkpoints",
        "/api/runs/{pk}/events",
        "/api/runs/{pk}/cancel",
        "/api/runs/{pk}/pause",
        "/api/runs/{pk}/resume",
        "/api/runs/{pk}/retry",
    } <= urls


def test_anonymous_gets_401_json_everywhere(alice):
    run = make_run(alice, status="running")
    client = Client()
    for url, methods in api_patterns():
        pk = run.experiment_id if url.startswith("/api/experiments/") else run.pk
        for method in methods:
            response = call(client, method, url.format(pk=pk))
            assert response.status_code == 401, (method, url, response.status_code)
            assert response["Content-Type"] == "application/json" and response.json()["error"]
            assert response["WWW-Authenticate"].startswith("Token")
    assert Run.objects.get(pk=run.pk).status == "running"


def test_other_user_gets_404_on_every_object_url(alice, bob, sent_messages):  # noqa: F811
    run = make_run(alice, status="running")
    client = token_client(bob)
    for url, methods in api_patterns():
        if "{pk}" not in url:
            continue
        pk = run.experiment_id if url.startswith("/api/experiments/") else run.pk
        for method in methods:
            response = call(client, method, url.format(pk=pk), {"name": "x", "config": {}})
            assert response.status_code == 404, (method, url, response.status_code)
            assert response.json()["error"]
    # and bob's lists do not show alice's objects
    assert token_client(bob).get("/api/runs").json()["runs"] == []
    assert token_client(bob).get("/api/experiments").json()["experiments"] == []
    assert Run.objects.get(pk=run.pk).status == "running" and Run.objects.count() == 1


def test_superuser_sees_and_steers_everyones_runs(alice, staff, sent_messages):  # noqa: F811
    run = make_run(alice, status="running")
    client = token_client(staff)
    assert client.get(f"/api/runs/{run.pk}").status_code == 200
    assert client.get(f"/api/experiments/{run.experiment_id}").status_code == 200
    assert client.post(f"/api/runs/{run.pk}/pause").status_code == 202


def _state(run):
    experiment = Experiment.objects.get(pk=run.experiment_id)
    return (
        Run.objects.values_list("status", "attempt").get(pk=run.pk),
        experiment.name,
        experiment.config,
        Run.objects.count(),
    )


def test_staff_without_permissions_gets_404_on_every_object_url(alice, plain_staff, sent_messages):  # noqa: F811
    """Being staff grants nothing in the API: someone else's rows need the model permission."""
    run = make_run(alice, status="running")
    before = _state(run)
    client = token_client(plain_staff)
    for url, methods in api_patterns():
        if "{pk}" not in url:
            continue
        pk = run.experiment_id if url.startswith("/api/experiments/") else run.pk
        for method in methods:
            response = call(client, method, url.format(pk=pk), {"name": "taken over", "config": {}})
            assert response.status_code == 404, (method, url, response.status_code)
    assert client.get("/api/runs").json()["runs"] == []
    assert client.get("/api/experiments").json()["experiments"] == []
    assert _state(run) == before


def test_view_permission_reads_but_cannot_change(alice, viewer, tiny_config, sent_messages):  # noqa: F811
    run = make_run(alice, status="running")
    before = _state(run)
    client = token_client(viewer)
    assert client.get(f"/api/experiments/{run.experiment_id}").status_code == 200
    assert client.get(f"/api/runs/{run.pk}").status_code == 200
    assert [r["id"] for r in client.get("/api/runs").json()["runs"]] == [run.pk]
    body = {"name": "taken over", "config": tiny_config(seed=9)}
    for method in ("PUT", "PATCH"):
        response = call(client, method, f"/api/experiments/{run.experiment_id}", body)
        assert response.status_code == 403 and "change_experiment" in response.json()["error"], method
    assert call(client, "POST", f"/api/experiments/{run.experiment_id}/runs").status_code == 403
    for action in ("pause", "cancel", "resume", "retry"):
        assert call(client, "POST", f"/api/runs/{run.pk}/{action}").status_code == 403, action
    assert _state(run) == before


def test_change_permission_edits_and_steers(alice, changer, tiny_config, sent_messages):  # noqa: F811
    run = make_run(alice, status="running")
    client = token_client(changer)
    response = call(client, "PATCH", f"/api/experiments/{run.experiment_id}", {"config": tiny_config(seed=9)})
    assert response.status_code == 200, response.content
    assert Experiment.objects.get(pk=run.experiment_id).config["seed"] == 9
    assert call(client, "POST", f"/api/runs/{run.pk}/pause").status_code == 202
    assert Run.objects.get(pk=run.pk).status == "pausing"


def test_staff_without_permissions_steers_their_own(plain_staff, sent_messages):  # noqa: F811
    run = make_run(plain_staff, status="running")
    client = token_client(plain_staff)
    assert client.get(f"/api/runs/{run.pk}").status_code == 200
    assert call(client, "POST", f"/api/runs/{run.pk}/pause").status_code == 202


def test_token_auth(alice):
    key = ApiToken.issue(alice).key
    client = Client(headers={"authorization": f"Token {key}"})
    assert client.get("/api/runs").status_code == 200
    assert Client(headers={"authorization": f"token  {key}"}).get("/api/runs").status_code == 200  # case, spaces
    for header in ("Token wrong", "Token ", f"Token {key} extra"):
        response = Client(headers={"authorization": header}).get("/api/runs")
        assert response.status_code == 401 and response.json()["error"], header
    alice.is_active = False
    alice.save()
    assert client.get("/api/runs").status_code == 401


def test_a_bad_token_is_refused_even_with_a_session(alice):
    client = Client()
    client.force_login(alice)
    assert client.get("/api/runs").status_code == 200
    assert client.get("/api/runs", headers={"authorization": "Token nope"}).status_code == 401


def test_session_posts_need_csrf_token_requests_do_not(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    body = json.dumps({"name": "x", "config": {}})
    assert client.get("/api/experiments").status_code == 200  # safe methods need no CSRF token
    response = client.post("/api/experiments", body, content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]
    assert Experiment.objects.count() == 0
    client.get("/admin/login/")  # any page that sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post("/api/experiments", body, content_type="application/json", headers={"x-csrftoken": token})
    assert response.status_code == 201
    # a token request with CSRF checks on and no CSRF token at all: fine
    assert token_client(alice).post("/api/experiments", body, content_type="application/json").status_code == 201


def test_wrong_methods_and_unknown_paths_answer_json(alice):
    client = token_client(alice)
    response = client.delete("/api/experiments")
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD, POST" and response.json()["error"]
    assert client.post("/api/runs").status_code == 405
    assert client.put("/api/runs/1/chart").status_code == 405
    for url in ("/api/nothing", "/api/runs/abc", "/api/runs/1/unknown", "/api/runs/" + "9" * 30):
        response = client.get(url)
        assert response.status_code == 404 and response["Content-Type"] == "application/json", url
    assert client.get("/api/runs/").status_code == 200  # a trailing slash is fine
    assert client.head("/api/runs").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/api/runs/{pk}/metrics?after_step=1e3",
        "/api/runs/{pk}/events?limit=-1",
        "/api/runs/{pk}/chart?max_points=-5",
        "/api/runs?offset=-1",
    ],
)
def test_bad_query_parameters_are_400(alice, url):
    run = make_run(alice)
    response = token_client(alice).get(url.format(pk=run.pk))
    assert response.status_code == 400 and response.json()["error"]

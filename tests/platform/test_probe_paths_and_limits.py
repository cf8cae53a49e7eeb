"""Security probes (issue 17, item 5): over-long /api/ URLs answer the API's JSON 414, with the test
client and from the real web server (`manage.py serve`, gunicorn); server paths shown to users are
relative to the data dir."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request

import pytest
from api.long_urls import API_MAX_URL_CHARS, too_long_message
from django.urls import reverse

from api_testlib import token_client
from test_runner_serve import procs, start_serve  # noqa: F401  (procs: a fixture)

GUNICORN_MAX_REQUEST_LINE_BYTES = 8190


def long_api_url(chars: int) -> str:
    """An /api/ URL of exactly `chars` characters (a query parameter the view ignores)."""
    prefix = "/api/runs?x="
    return prefix + "a" * (chars - len(prefix))


# --- over-long /api/ URLs ------------------------------------------------------------------------


def test_the_limit_message():
    assert too_long_message(API_MAX_URL_CHARS) is None
    assert too_long_message(API_MAX_URL_CHARS + 1).startswith(f"the URL is {API_MAX_URL_CHARS + 1} characters long")


def test_an_over_long_api_url_gets_a_json_414(alice):
    client = token_client(alice)
    assert client.get(long_api_url(API_MAX_URL_CHARS)).status_code == 200
    response = client.get(long_api_url(API_MAX_URL_CHARS + 1))
    assert response.status_code == 414 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": too_long_message(API_MAX_URL_CHARS + 1)}
    anonymous = type(client)().post("/api/" + "x" * 6000)  # before authentication, any method
    assert anonymous.status_code == 414 and "error" in anonymous.json()


def test_pages_outside_the_api_are_not_limited(alice_client):
    response = alice_client.get(reverse("experiment-list") + "?x=" + "a" * 6000)
    assert response.status_code == 200


def raw_get(port: int, url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


@pytest.mark.django_db(transaction=True)
def test_the_served_platform_answers_long_api_urls_with_json(procs):
    """Through gunicorn: up to its request line maximum (8190 bytes; its default, 4094, answered 6000
    characters with its own HTML 414) the API's JSON 414; beyond it gunicorn's HTML 414, which no
    server setting can change (documented in api/long_urls.py)."""
    proc, port = start_serve(procs)
    status, content_type, body = raw_get(port, long_api_url(API_MAX_URL_CHARS))
    assert status == 401 and "error" in json.loads(body)  # served as usual: not logged in
    status, content_type, body = raw_get(port, long_api_url(6000))
    assert (status, content_type) == (414, "application/json"), body[:300]
    assert json.loads(body) == {"error": too_long_message(6000)}
    status, content_type, body = raw_get(port, long_api_url(GUNICORN_MAX_REQUEST_LINE_BYTES + 100))
    assert status == 414 and "json" not in content_type  # gunicorn's own answer, before Django
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, procs.logs(60)

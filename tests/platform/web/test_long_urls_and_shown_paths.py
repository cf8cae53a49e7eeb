"""Security probes: over-long /api/ URLs answer the API's JSON 414, with the test
client and from the real web server (`manage.py serve`, gunicorn); server paths shown to users are
relative to the data dir."""

from __future__ import annotations

import json
import signal
import sys
import urllib.error
import urllib.request

import pytest
from api_testlib import token_client
from django.urls import reverse
from platform_testlib import tiny_config
from test_run_export import hf_config
from test_runner_serve import procs, start_serve  # noqa: F401  (procs: a fixture)

from api.long_urls import API_MAX_URL_CHARS, too_long_message
from experiments.models import Experiment, Run
from experiments.shown_paths import shown, shown_errors
from tests.tiny_models import write_tiny_model

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


# --- server paths shown to users ------------------------------------------------------------------


@pytest.fixture
def data_dir(settings, tmp_path):
    """This test's own data dir, with the dataset, model, run and export folders under it."""
    root = tmp_path / "data"
    settings.DATA_DIR, settings.ARTIFACTS_DIR, settings.EXPORTS_DIR = root, root / "runs", root / "exports"
    settings.PLATFORM_DATASET_DIRS, settings.PLATFORM_MODELS_DIRS = [root / "datasets"], [root / "models"]
    for folder in ("runs", "exports", "datasets", "models"):
        (root / folder).mkdir(parents=True)
    return root


def test_shown_rewrites_known_roots_as_whole_paths(data_dir, settings, tmp_path):
    d, code = str(data_dir), str(settings.REPO_ROOT)
    text = (
        f"No such file: '{d}/datasets/users/3/x.jsonl' (log {d}/runs/run-12/log.txt, model {d}/models/m)\n"
        f'  File "{code}/trainers/loop/trainer.py", line 9\n'
        f"{d} {d}base /elsewhere{d}/x /tmp/other {sys.prefix}/lib/x.py"
    )
    assert shown(text) == (
        "No such file: '<datasets>/users/3/x.jsonl' (log <data>/runs/run-12/log.txt, model <models>/m)\n"
        '  File "<code>/trainers/loop/trainer.py", line 9\n'
        f"<data> {d}base /elsewhere{d}/x /tmp/other <python>/lib/x.py"
    )
    assert shown("") == "" and shown("no paths here") == "no paths here"
    assert shown_errors({"model.path": f"missing: {d}/models/x", "n": 3}) == {
        "model.path": "missing: <models>/x",
        "n": 3,
    }
    (tmp_path / "link").symlink_to(data_dir)  # a root configured through a symlink: both forms are known
    settings.DATA_DIR = tmp_path / "link"
    assert shown(f"{d}/runs/1 {tmp_path}/link/runs/2") == "<data>/runs/1 <data>/runs/2"


def test_trained_by_names_the_run_and_model_without_paths():
    from trainers.commands.export import trained_by

    assert trained_by("/srv/platform/runs/run-12/", 4, "/srv/platform/models/smollm2-135m", "bfloat16") == {
        "run": "run-12",
        "step": 4,
        "base_model": "smollm2-135m",
        "dtype": "bfloat16",
    }


@pytest.mark.django_db(transaction=True)  # the trainer's hooks write from their own threads
def test_a_run_failing_on_a_bad_file_shows_no_server_path(alice, data_dir, client, sent_messages, restore_signals):
    """The stored error keeps the whole path (admins, logs); the API (run, runs list, events), the
    run page and the CLI's source show it relative to the data dir."""
    from runner.attempt import run_attempt

    dataset = data_dir / "datasets" / "arith.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(8)))
    api = token_client(alice)
    config = tiny_config(train__max_steps=2, checkpoint__every_steps=0)
    config["data"] = {"task": None, "train_path": "arith.jsonl", "train_prompts": 0, "eval_prompts": 0}
    config["rewards"] = [{"name": "exact_match", "weight": 1.0}]
    created = api.post(
        "/api/experiments", json.dumps({"name": "bad file", "config": config}), content_type="application/json"
    )
    assert created.status_code == 201, created.content
    launched = api.post(f"/api/experiments/{created.json()['id']}/runs")
    assert launched.status_code == 201, launched.content
    run = Run.objects.get(pk=launched.json()["id"])
    dataset.write_text('{"prompt": "1+1=", "answer": "2"}\nnot json at all\n')  # broken after the launch
    Run.objects.filter(pk=run.pk).update(status="running")
    assert run_attempt(run.pk, run.attempt) == 1
    run.refresh_from_db()
    assert run.status == "failed" and str(data_dir) in run.error, run.error  # stored whole

    shown_error = api.get(f"/api/runs/{run.pk}").json()["error"]
    assert "<datasets>/arith.jsonl" in shown_error, shown_error
    client.force_login(alice)
    answers = [
        api.get(f"/api/runs/{run.pk}"),
        api.get("/api/runs"),
        api.get(f"/api/runs/{run.pk}/events"),
        client.get(reverse("run-detail", args=[run.pk])),
    ]
    for answer in answers:
        assert answer.status_code == 200
        body = answer.content.decode()
        assert str(data_dir) not in body and str(data_dir.parent) not in body, (answer.request["PATH_INFO"], body)


@pytest.mark.django_db
def test_the_export_panel_and_its_messages_show_no_server_path(alice, alice_client, data_dir):
    """The run page's export card (where exports go, the ones written) and a refused export's message
    (already exported: it says where), on the page and in the API."""
    write_tiny_model(data_dir / "models" / "tiny-chat")
    experiment = Experiment(owner=alice, name="hf")
    experiment.set_config(hf_config(), user=alice)
    run = Run.objects.create(
        experiment=experiment, config=experiment.config, status="succeeded", attempt=1, max_steps=2, run_dir="run-x"
    )
    (data_dir / "runs" / "run-x" / "checkpoints" / "2").mkdir(parents=True)
    (data_dir / "exports" / f"run-{run.pk}-step-2").mkdir()
    shown_folder = f"&lt;data&gt;/exports/run-{run.pk}-step-2"

    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="export-form"' in page and shown_folder in page and "&lt;data&gt;/exports</code>" in page
    refused = token_client(alice).post(
        f"/api/runs/{run.pk}/export", json.dumps({"step": 2}), content_type="application/json"
    )
    assert refused.status_code == 409 and f"<data>/exports/run-{run.pk}-step-2" in refused.json()["error"]
    answered = alice_client.post(reverse("run-export", args=[run.pk]), {"step": "2", "dtype": "float32"}, follow=True)
    assert "is already exported" in answered.content.decode() and shown_folder in answered.content.decode()
    for body in (page, refused.content.decode(), answered.content.decode()):
        assert str(data_dir) not in body and str(data_dir.parent) not in body

"""Input an attacker would send, through the HTTP API and the web pages: JSON and YAML nested
thousands deep, lone surrogates, alias bombs, huge sizes. Each answers 400 with a message (JSON
for the API, a form error or the preview's errors on the web), never a 500, and nothing logs a
traceback."""

from __future__ import annotations

import json
import logging

import pytest
from api_testlib import make_experiment, token_client
from django.urls import reverse
from platform_testlib import TINY_CONFIG_YAML, tiny_config
from web_testlib import form_data

from experiments.models import Experiment

pytestmark = pytest.mark.django_db

DEEP_JSON = "[" * 5000 + "]" * 5000
# 9 values, each level 9 aliases of the one before: 9**9 (387 million) values in ~300 bytes
ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)
DEEP_YAML = "model:\n  preset: " + "[" * 500 + "]" * 500 + "\n"
BRACKETS = "[" * 3000


def deep_dict(depth: int) -> dict:
    root: dict = {}
    node = root
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


@pytest.fixture(autouse=True)
def no_tracebacks(caplog):
    """Nothing in these requests may log an error (a 500 logs its traceback)."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def post_json(client, url: str, body: str, method: str = "post"):
    return getattr(client, method)(url, data=body, content_type="application/json")


def assert_400_json(response, *fields: str) -> dict:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body.get("error") or body.get("errors"), body
    for field in fields:
        assert field in body["errors"] and body["errors"][field], (field, body)
    return body


# --- the API ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["post", "put", "patch"])
def test_api_json_nested_5000_deep_is_400(alice, method):
    client = token_client(alice)
    experiment = make_experiment(alice)
    url = "/api/experiments" if method == "post" else f"/api/experiments/{experiment.pk}"
    for body in (
        DEEP_JSON,
        '{"name": "x", "config": ' + DEEP_JSON + "}",
        '{"name": "x", "config": ' + "{\"a\": " * 5000 + "1" + "}" * 5001,
    ):
        response = post_json(client, url, body, method)
        assert_400_json(response)
        assert "nested too deeply" in response.json()["error"]
    assert Experiment.objects.count() == 1


@pytest.mark.parametrize("field", ["name", "description"])
def test_api_lone_surrogate_is_400(alice, field):
    client = token_client(alice)
    body = {"name": "ok", "description": "ok", "config": tiny_config()}
    text = json.dumps(body).replace(f'"{field}": "ok"', f'"{field}": "bad \\ud800 text"')
    assert "\\ud800" in text
    assert_400_json(post_json(client, "/api/experiments", text), field)
    experiment = make_experiment(alice)
    for method in ("put", "patch"):
        response = post_json(client, f"/api/experiments/{experiment.pk}", text, method)
        assert_400_json(response, field)
    experiment.refresh_from_db()
    assert experiment.name == "exp" and experiment.description == ""
    assert Experiment.objects.count() == 1


def test_api_lone_surrogate_inside_the_config_is_400(alice):
    body = json.dumps({"name": "x", "config": tiny_config()}).replace('"tokenizer": "auto"', '"tokenizer": "\\udfff"')
    assert "\\udfff" in body
    assert_400_json(post_json(token_client(alice), "/api/experiments", body), "data.tokenizer")


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"config_yaml": DEEP_YAML}, "(yaml)"),
        ({"config_yaml": ALIAS_BOMB}, "(yaml)"),
        ({"config": {"model": deep_dict(500)}}, None),
        ({"config": {"mesh": {"rollout_devices": BRACKETS}}}, "mesh.rollout_devices"),
        ({"config_yaml": f"mesh:\n  rollout_devices: '{BRACKETS}'\n"}, "mesh.rollout_devices"),
        ({"config": {"async": {"rollout_devices": BRACKETS}}}, "async.rollout_devices"),  # the old place
        ({"config": {"batch": {"prompts_per_step": 10**12}}}, "batch.prompts_per_step"),
        ({"config": {"batch": {"prompts_per_step": 100000001}}}, "batch.prompts_per_step"),
        ({"config": {"grpo": {"num_generations": 10**12}}}, "grpo.num_generations"),
        ({"config": {"train": {"max_steps": 10**15}}}, "train.max_steps"),
    ],
)
def test_api_hostile_configs_are_400(alice, payload, field):
    assert len(ALIAS_BOMB) < 450
    client = token_client(alice)
    response = post_json(client, "/api/experiments", json.dumps({"name": "x", **payload}))
    body = assert_400_json(response, *([field] if field else []))
    if field is None:  # the nested one: the message names where, and says what
        assert any("nested deeper" in message for message in body["errors"].values()), body
    experiment = make_experiment(alice)
    response = post_json(client, f"/api/experiments/{experiment.pk}", json.dumps(payload), "patch")
    assert_400_json(response, *([field] if field else []))
    assert Experiment.objects.count() == 1


# --- the web pages ---------------------------------------------------------------------------


def form_errors(response) -> str:
    assert response.status_code == 400, response.status_code
    form = response.context["form"]
    return json.dumps({k: list(v) for k, v in form.errors.items()})


def test_web_yaml_tab_refuses_alias_bomb_deep_yaml_and_brackets(alice_client):
    for text, expected in (
        (ALIAS_BOMB, "expands to more than"),
        (DEEP_YAML, "nested deeper"),
        (f"mesh:\n  rollout_devices: '{BRACKETS}'\n", "mesh.rollout_devices"),
        (TINY_CONFIG_YAML.replace("prompts_per_step: 4", "prompts_per_step: 1000000000000"), "batch.prompts_per_step"),
        (TINY_CONFIG_YAML + 'description_of_nothing: "\\ud800"\n', "description_of_nothing"),
    ):
        response = alice_client.post(reverse("experiment-new"), {"name": "x", "mode": "yaml", "config_yaml": text})
        assert expected in form_errors(response), text[:60]
    assert Experiment.objects.count() == 0


def test_web_form_tab_refuses_brackets_and_huge_sizes(alice_client):
    response = alice_client.post(reverse("experiment-new"), form_data(mesh__rollout_devices=BRACKETS))
    assert "mesh__rollout_devices" in form_errors(response)
    response = alice_client.post(reverse("experiment-new"), form_data(batch__prompts_per_step=str(10**12)))
    assert "batch__prompts_per_step" in form_errors(response)
    assert Experiment.objects.count() == 0


def test_web_form_with_undecodable_text_is_not_a_500(alice_client):
    """A form body cannot carry a lone surrogate: bytes that are not UTF-8 (what "\\ud800" would
    be) arrive replaced, and the experiment saves as valid text, or the form refuses it."""
    body = "&".join(f"{k}={v}" for k, v in form_data(name="x").items() if k not in ("name", "description"))
    body += "&name=bad%ED%A0%80name&description=%ED%A0%80"
    response = alice_client.post(reverse("experiment-new"), body, content_type="application/x-www-form-urlencoded")
    assert response.status_code in (302, 400)
    for experiment in Experiment.objects.all():
        experiment.name.encode("utf-8")


def test_web_import_refuses_an_alias_bomb(alice_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("bomb.yaml", ALIAS_BOMB.encode(), content_type="application/x-yaml")
    response = alice_client.post(reverse("experiment-import"), {"file": upload})
    assert "expands to more than" in form_errors(response)
    assert Experiment.objects.count() == 0


def test_web_edit_refuses_deep_yaml(alice_client, alice):
    experiment = make_experiment(alice)
    response = alice_client.post(
        reverse("experiment-edit", args=[experiment.pk]), {"name": "x", "mode": "yaml", "config_yaml": DEEP_YAML}
    )
    assert "nested deeper" in form_errors(response)
    assert Experiment.objects.get(pk=experiment.pk).versions.count() == 1


def test_web_yaml_tab_refuses_oversize_yaml(alice_client):
    """The guarded loader's size limit holds on the YAML tab too (the page has no other)."""
    text = TINY_CONFIG_YAML + "# padding\n" * 120_000  # 1.2 million characters of comments
    response = alice_client.post(reverse("experiment-new"), {"name": "x", "mode": "yaml", "config_yaml": text})
    assert "characters long" in form_errors(response)
    body = alice_client.post(reverse("plan-preview"), {"mode": "yaml", "config_yaml": text}).json()
    assert body["ok"] is False and "characters long" in body["errors"]["(yaml)"]
    assert Experiment.objects.count() == 0


@pytest.mark.parametrize(
    "data, field",
    [
        ({"mode": "yaml", "config_yaml": ALIAS_BOMB}, "(yaml)"),
        ({"mode": "yaml", "config_yaml": DEEP_YAML}, "(yaml)"),
        ({"mode": "yaml", "config_yaml": f"mesh:\n  rollout_devices: '{BRACKETS}'\n"}, "mesh.rollout_devices"),
        ({"mode": "yaml", "config_yaml": f"async:\n  rollout_devices: '{BRACKETS}'\n"}, "async.rollout_devices"),
        (form_data(mesh__rollout_devices=BRACKETS), "mesh.rollout_devices"),
        (form_data(batch__prompts_per_step=str(10**12)), "batch.prompts_per_step"),
        ({"mode": "yaml", "config_yaml": "batch: {prompts_per_step: 100000001}"}, "batch.prompts_per_step"),
    ],
)
def test_plan_preview_refuses_hostile_input(alice_client, data, field):
    response = alice_client.post(reverse("plan-preview"), {**data, "sync": "1"})
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False and body["errors"].get(field), body


SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() says no


@pytest.mark.django_db
def test_unicode_digits_in_whole_number_fields_are_a_400_naming_the_field(alice, alice_client, sent_messages):
    """'²' (and other non-ASCII digits) in each whole-number field of a request gave a 500
    at 8 places; each answers 400 naming its field."""
    from api_testlib import make_run

    from experiments.whole_numbers import NotAWholeNumber, whole_number

    api = token_client(alice)
    experiment = make_experiment(alice)
    run = make_run(alice, status="succeeded", experiment=experiment)
    run.checkpoints.create(step=1, path="run/checkpoints/1")
    two = SUPERSCRIPT_TWO

    def post(url, body):
        return api.post(url, json.dumps(body), content_type="application/json")

    answers = {
        "run": post("/api/evaluations", {"run": two, "step": 1, "dataset": "task:reverse"}),
        "dataset": post("/api/evaluations", {"run": run.pk, "step": 1, "dataset": f"dataset:{two}"}),
        "step": post(f"/api/runs/{run.pk}/fork", {"step": two}),
        "max_restarts": post(f"/api/experiments/{experiment.pk}/runs", {"max_restarts": two}),
        "max_trials": post(
            f"/api/experiments/{experiment.pk}/sweeps",
            {
                "name": "s",
                "space": {"seed": {"type": "categorical", "choices": [1, 2]}},
                "metric": "reward/mean",
                "max_trials": two,
            },
        ),
        "prompts": post(f"/api/runs/{run.pk}/evaluate-on-end", {"dataset": "task:reverse", "prompts": two}),
    }
    export = post(f"/api/runs/{run.pk}/export", {"step": two})
    preview = alice_client.post(reverse("plan-preview") + f"?experiment={two}", form_data())
    for field, response in answers.items():
        assert response.status_code == 400, (field, response.content)
        assert field in response.json().get("errors", {}) or response.json().get("field") == field, (
            field,
            response.json(),
        )
    assert export.status_code == 400 and "step" in export.json()["errors"]
    assert preview.status_code == 400 and "experiment" in preview.json()["errors"]
    assert sent_messages == []

    # the one parser, against hand-written cases
    assert [whole_number(v, 0, 99) for v in (0, "7", " 42 ", None, "")] == [0, 7, 42, None, None]
    assert whole_number("-3", -5, 5) == -3 and whole_number("", 0, 9, default=4) == 4
    for bad in (two, "\u0663", "\u2460", "-3", "1.0", "1e3", True, 2.0, 100, "9" * 19, [1]):
        with pytest.raises(NotAWholeNumber):
            whole_number(bad, 0, 99)

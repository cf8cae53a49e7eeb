"""The environment (env: multi-turn episodes) on the experiment form and the run page's charts: the `env` section is a
collapsed group of the generated form, `env.settings` (a mapping) is a JSON textarea whose bad text,
and whose bad settings, come back as errors on that field naming env.settings.<field> (a 400 with
the form, never a 500), and the env/* and eval/env/* metrics share two charts each."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser_testlib import script_evaluator
from django.urls import reverse
from web_testlib import fast_passwords, form_data  # noqa: F401 (fast_passwords: autouse)

from experiments.models import Experiment
from trainers.config import iter_field_specs
from web.config_form import error_target, form_values, mapping_from_text, mapping_problem, value_from_text
from web.dashboard import chart_panels

SPECS = {spec.path: spec for spec in iter_field_specs()}
CHARTS_JS = Path(__file__).resolve().parents[3] / "platform" / "static" / "web" / "charts.js"


def _details(html: str, key: str) -> str:
    return re.search(rf'<details class="section group" id="section-{key}"[^>]*>.*?</details>', html, re.S).group(0)


# --- text <-> value --------------------------------------------------------------------------------


def test_env_settings_is_a_mapping_field_shown_as_json():
    spec = SPECS["env.settings"]
    assert spec.kind == "mapping" and spec.default == {}
    assert form_values({})["env__settings"] == "{}"
    assert form_values({"env": {"settings": {"low": 1, "high": 100}}})["env__settings"] == '{"low": 1, "high": 100}'
    assert value_from_text(spec, ' {"low": 1, "high": 100} ') == {"low": 1, "high": 100}
    assert value_from_text(spec, "") == {} and value_from_text(spec, None) == {}
    # not an object: left as text for the schema to refuse
    assert mapping_from_text(spec, "[1, 2]") == "[1, 2]" and mapping_from_text(spec, "{low: 1") == "{low: 1"


def test_mapping_problems_say_what_the_json_lacks():
    assert mapping_problem('{"low": 1}') == "" and mapping_problem("") == "" and mapping_problem("  ") == ""
    assert mapping_problem('{"low": 1').startswith("not valid JSON (Expecting ',' delimiter: line 1 column 10")
    assert mapping_problem("[1, 2]") == 'must be a JSON object such as {"name": 1} ({} for none), got a JSON array'
    assert mapping_problem("7") == 'must be a JSON object such as {"name": 1} ({} for none), got a JSON number'


def test_errors_inside_a_mapping_go_to_its_field():
    assert error_target("env.settings") == "env__settings"
    assert error_target("env.settings.max_expression_chars") == "env__settings"
    assert error_target("env.settings.a.b") == "env__settings"
    assert error_target("env.name") == "env__name"
    assert error_target("rewards[1].weight") == "rewards"
    assert error_target("batch.nonsense") is None  # unknown key of a section: form-wide
    assert error_target("rollout.temperature.x") is None  # under a field that is not a mapping


# --- the form ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_form_shows_the_env_section_collapsed(alice_client):
    html = alice_client.get(reverse("experiment-new")).content.decode()
    env = _details(html, "env")
    assert " open" not in env.split(">", 1)[0]
    for key in ("name", "max_turns", "max_total_tokens", "settings"):
        assert f'<span class="key">{key}</span>' in env, key
    settings = re.search(r'<textarea name="env__settings"[^>]*>([^<]*)</textarea>', env)
    assert settings and settings.group(1).strip() == "{}"
    suggestions = re.search(r'<datalist id="suggest-env__name">(.*?)</datalist>', env, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)">', suggestions)[:3] == ["single_turn", "calculator", "guess_number"]
    assert 'list="suggest-env__name"' in env  # a text input: a dotted path is accepted too


@pytest.mark.django_db
def test_the_default_form_saves_with_empty_env_settings(alice_client):
    response = alice_client.post(reverse("experiment-new"), form_data(name="plain"))
    assert response.status_code == 302
    assert Experiment.objects.get(name="plain").config["env"] == {
        "name": "single_turn",
        "max_turns": 4,
        "max_total_tokens": None,
        "settings": {},
    }


@pytest.mark.django_db
def test_env_settings_are_saved_as_an_object(alice_client):
    response = alice_client.post(
        reverse("experiment-new"),
        form_data(
            name="calc",
            env__name="calculator",
            env__max_turns="3",
            env__settings='{"max_expression_chars": 50}',
            rollout__stop_at_eos="on",
        ),
    )
    assert response.status_code == 302, response.context["form"].config_errors
    env = Experiment.objects.get(name="calc").config["env"]
    assert env["name"] == "calculator" and env["max_turns"] == 3 and env["settings"] == {"max_expression_chars": 50}
    # shown again on the edit page as the same JSON, and the env group opens (not the default)
    html = alice_client.get(reverse("experiment-edit", args=[Experiment.objects.get(name="calc").pk])).content.decode()
    env_group = _details(html, "env")
    assert " open" in env_group.split(">", 1)[0]
    assert "{&quot;max_expression_chars&quot;: 50}" in env_group


@pytest.mark.django_db
@pytest.mark.parametrize(
    "text, message",
    [
        ('{"max_expression_chars": 50', "not valid JSON (Expecting &#x27;,&#x27; delimiter: line 1 column 28"),
        ("[1, 2]", "must be a JSON object such as {&quot;name&quot;: 1} ({} for none), got a JSON array"),
    ],
)
def test_bad_settings_text_is_refused_on_its_field(alice_client, text, message):
    response = alice_client.post(reverse("experiment-new"), form_data(name="bad", env__settings=text))
    assert response.status_code == 400
    assert "env.settings" in response.context["form"].config_errors
    errors = re.search(
        r'<ul class="errorlist" data-error-for="env.settings">(.*?)</ul>', response.content.decode(), re.S
    ).group(1)
    assert message in errors
    assert " open" in _details(response.content.decode(), "env").split(">", 1)[0]
    assert not Experiment.objects.filter(name="bad").exists()


@pytest.mark.django_db
def test_bad_env_settings_name_the_field(alice_client):
    """The config checks validate env.settings against the environment's own settings: the error
    names env.settings.<field> and shows on the env.settings field, on the page and in the preview."""
    data = form_data(
        name="bad", env__name="calculator", env__settings='{"max_expression_chars": "many"}', rollout__stop_at_eos="on"
    )
    response = alice_client.post(reverse("experiment-new"), data)
    assert response.status_code == 400
    errors = response.context["form"].config_errors
    assert "env.settings.max_expression_chars" in errors, errors
    shown = re.search(
        r'<ul class="errorlist" data-error-for="env.settings">(.*?)</ul>', response.content.decode(), re.S
    ).group(1)
    assert "env.settings.max_expression_chars: " in shown
    preview = alice_client.post(reverse("plan-preview"), data)
    assert preview.status_code == 200
    assert preview.json()["ok"] is False and "env.settings.max_expression_chars" in preview.json()["errors"]


@pytest.mark.django_db
def test_an_unknown_env_name_is_refused_naming_env_name(alice_client):
    response = alice_client.post(reverse("experiment-new"), form_data(name="bad", env__name="no_such_env"))
    assert response.status_code == 400
    assert "env.name" in response.context["form"].config_errors


@pytest.mark.django_db
def test_the_preview_answers_bad_json_without_a_server_error(alice_client):
    response = alice_client.post(reverse("plan-preview"), form_data(env__settings="{nope"))
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False and body["errors"]["env.settings"].startswith("not valid JSON")


# --- charts -------------------------------------------------------------------------------------


def test_env_metrics_share_two_lazy_charts_and_eval_env_two_more():
    panels = chart_panels()
    by_metric = {p["metric"]: p for p in panels}
    env = by_metric["env/turns_mean"]
    assert env["metrics"] == ["env/turns_mean", "env/tool_calls_mean", "env/tool_errors_mean"] and env["lazy"]
    assert by_metric["env/tool_use_fraction"]["metrics"] == [
        "env/tool_use_fraction",
        "env/max_turns_fraction",
        "env/max_total_tokens_fraction",
        "env/error_fraction",
    ]
    assert by_metric["eval/env/turns_mean"]["metrics"] == [
        "eval/env/turns_mean",
        "eval/env/tool_calls_mean",
        "eval/env/tool_errors_mean",
    ]
    assert by_metric["eval/env/tool_use_fraction"]["metrics"][-1] == "eval/env/error_fraction"
    order = [p["metric"] for p in panels]
    # the training environment charts right before the evaluation charts, their eval twins right after
    assert order.index("env/tool_use_fraction") + 1 == order.index("eval/reward_mean")
    assert order.index("eval/reward_mean") + 1 == order.index("eval/env/turns_mean")
    every = [m for p in panels for m in p["metrics"]]
    assert len(every) == len(set(every))  # no metric in two charts (eval/env/* is not in eval/*)
    assert not any(m.startswith("eval/env/") for m in by_metric["eval/reward_mean"]["metrics"])


def test_the_compare_page_orders_env_metrics_as_a_group():
    names = [
        "system/cpu_percent",
        "env/turns_mean",
        "loss/policy",
        "env/error_fraction",
        "rollout/truncated_fraction",
        "eval/env/turns_mean",
        "eval/pass@1",
        "train/trained_sequence_fraction",
    ]
    with script_evaluator(CHARTS_JS) as js:
        assert js(f"GrpoCharts.orderMetrics({names})") == [
            "eval/env/turns_mean",
            "eval/pass@1",  # eval/*
            "loss/policy",
            "rollout/truncated_fraction",
            "env/error_fraction",
            "env/turns_mean",  # env/*, after rollout/*
            "train/trained_sequence_fraction",
            "system/cpu_percent",
        ]

"""The experiment form: generated from the schema's field_specs, validated by parse_config alone,
with a live plan preview that takes the form tab or the YAML tab."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils.html import escape
from platform_testlib import TINY_CONFIG_YAML, tiny_config
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    form_data,
)

from experiments.configs import load_yaml
from trainers.config import field_specs, iter_field_specs, parse_config
from web.config_form import html_name
from web.forms import BASIC_FIELDS

pytestmark = pytest.mark.django_db


def test_form_renders_every_schema_section_and_field(alice_client):
    response = alice_client.get(reverse("experiment-new"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="section-basics"' in html
    for section in field_specs():  # a collapsed group per section, unless all its fields are basic
        if any(spec.path not in BASIC_FIELDS for spec in section.fields):
            assert f'id="section-{section.key or "experiment"}"' in html
    for spec in iter_field_specs():
        assert f'name="{html_name(spec.path)}"' in html
        assert f'data-error-for="{spec.path}"' in html
        assert escape(spec.description) in html
    # defaults shown in the inputs, choices from the Literal
    assert 'name="batch__prompts_per_step" value="16"' in html
    assert '<option value="rloo">rloo</option>' in html
    assert 'id="plan-preview"' in html and 'id="plan-sequences_per_step"' in html
    assert "128" in html  # 16 prompts x G=8: the plan is rendered server-side too


def test_invalid_form_shows_the_schema_message_next_to_the_field(alice_client):
    data = form_data(batch__prompts_per_step="4", batch__mini_batch_prompts="3")
    response = alice_client.post(reverse("experiment-new"), data)
    assert response.status_code == 400
    html = response.content.decode()
    message = "batch.mini_batch_prompts=3 does not divide batch.prompts_per_step=4; use 1, 2 or 4"
    field_errors = html.split('data-error-for="batch.mini_batch_prompts">', 1)[1].split("</ul>", 1)[0]
    assert message in field_errors
    assert response.context["form"].config_errors == {"batch.mini_batch_prompts": message}


def test_type_errors_come_from_the_schema_and_rewards_errors_go_to_rewards(alice_client):
    response = alice_client.post(reverse("experiment-new"), form_data(train__max_steps="many"))
    assert response.status_code == 400
    assert "valid integer" in response.context["form"].config_errors["train.max_steps"]
    data = form_data(rewards="exact_match: 1\nno_such_reward: 2")
    response = alice_client.post(reverse("experiment-new"), data)
    errors = response.context["form"].config_errors
    assert "unknown reward 'no_such_reward'" in errors["rewards[1].name"]
    html = response.content.decode()
    rewards_box = html.split('data-error-for="rewards">', 1)[1].split("</ul>", 1)[0]
    assert "rewards[1].name" in rewards_box and "unknown reward" in rewards_box


def test_form_saves_the_full_validated_config(alice_client, alice):
    data = form_data(name="arith", batch__mini_batch_prompts="2", rewards="exact_match: 0.5\nprefix_match")
    response = alice_client.post(reverse("experiment-new"), data)
    assert response.status_code == 302
    experiment = alice.experiments.get(name="arith")
    expected = tiny_config(
        batch__mini_batch_prompts=2,
        rewards=[{"name": "exact_match", "weight": 0.5}, {"name": "prefix_match", "weight": 1.0}],
    )
    assert experiment.config == expected
    assert experiment.versions.count() == 1
    assert response["Location"] == reverse("experiment-detail", args=[experiment.pk])


def test_nullable_fields_take_empty_or_null(alice_client, alice):
    data = form_data(name="n", batch__mini_batch_prompts="null", rollout__max_new_tokens="")
    assert alice_client.post(reverse("experiment-new"), data).status_code == 302
    config = alice.experiments.get(name="n").config
    assert config["batch"]["mini_batch_prompts"] is None and config["rollout"]["max_new_tokens"] is None


def test_unchecked_box_is_false(alice_client, alice):
    data = form_data(name="b")
    data.pop("rollout__stop_at_eos")
    assert alice_client.post(reverse("experiment-new"), data).status_code == 302
    assert alice.experiments.get(name="b").config["rollout"]["stop_at_eos"] is False


def test_non_finite_number_is_refused_with_a_message(alice_client):
    response = alice_client.post(reverse("experiment-new"), form_data(optimizer__learning_rate="inf"))
    assert response.status_code == 400
    assert "finite" in response.context["form"].config_errors["optimizer.learning_rate"]  # the schema's own message


def test_create_from_yaml_tab(alice_client, alice):
    data = {"name": "from yaml", "mode": "yaml", "config_yaml": TINY_CONFIG_YAML}
    response = alice_client.post(reverse("experiment-new"), data)
    assert response.status_code == 302
    assert alice.experiments.get(name="from yaml").config == tiny_config()


# Seven lines that stand for 10^7 values through aliases ("billion laughs").
YAML_BOMB = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg")
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("batch: {prompts_per_step: 4\n", "not valid YAML at line"),
        ("- just\n- a list\n", "must be a mapping"),
        (YAML_BOMB, "expands to more than"),
        ("a: &a [*a]\n", "refers to itself"),
        ("batch: {nonsense: 1}\n", "batch.nonsense: unknown key"),
        # a misspelt field: the error names it and the fix
        ("optimizer: {learnig_rate: 0.01}\n", "optimizer.learnig_rate: unknown key; did you mean 'learning_rate'?"),
        (
            "data: {task: arithmetic_words_calc}\nenv: {name: calculator, settings: {enabeld: false}}\n",
            "env.settings.enabeld: unknown setting; did you mean 'enabled'?",
        ),
    ],
)
def test_bad_yaml_gives_400_with_a_clear_message(alice_client, text, expected):
    response = alice_client.post(reverse("experiment-new"), {"name": "y", "mode": "yaml", "config_yaml": text})
    assert response.status_code == 400
    html = response.content.decode()
    yaml_errors = html.split('id="yaml-errors" data-error-for="config_yaml">', 1)[1].split("</ul>", 1)[0]
    assert expected in yaml_errors.replace("&#x27;", "'")
    assert 'id="mode-yaml" checked' in html  # the YAML tab stays open


def test_load_yaml_is_safe():
    with pytest.raises(Exception) as info:
        load_yaml("!!python/object/apply:os.system ['true']")
    assert "(yaml)" in str(info.value)


def test_plan_preview_ok(alice_client):
    response = alice_client.post(reverse("plan-preview"), form_data(batch__mini_batch_prompts="2"))
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["plan"]["sequences_per_step"] == 16  # 4 prompts x G=4
    assert body["plan"]["optimizer_updates_per_step"] == 2
    assert body["plan"]["accumulation_steps"] == 1
    assert body["plan"]["epochs"] == 0.375  # 6 steps x 4 prompts / 64
    assert body["text"].startswith("Batch plan (per step)")


def test_plan_preview_errors(alice_client):
    response = alice_client.post(reverse("plan-preview"), form_data(batch__mini_batch_prompts="3"))
    body = response.json()
    assert body["ok"] is False
    assert "does not divide" in body["errors"]["batch.mini_batch_prompts"]


def test_plan_preview_takes_yaml_and_syncs_tabs(alice_client):
    yaml_text = TINY_CONFIG_YAML.replace("prompts_per_step: 4", "prompts_per_step: 8")
    body = alice_client.post(reverse("plan-preview"), {"mode": "yaml", "config_yaml": yaml_text, "sync": "1"}).json()
    assert body["ok"] and body["plan"]["sequences_per_step"] == 32
    assert body["values"]["batch__prompts_per_step"] == "8"
    body = alice_client.post(reverse("plan-preview"), {**form_data(), "sync": "1"}).json()
    assert parse_config(load_yaml(body["yaml"])).to_dict() == tiny_config()
    body = alice_client.post(reverse("plan-preview"), {"mode": "yaml", "config_yaml": "a: [", "sync": "1"}).json()
    assert body["ok"] is False and "not valid YAML" in body["errors"]["(yaml)"] and "values" not in body


def test_plan_preview_needs_csrf_token(alice):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get(reverse("experiment-new"))
    token = page.cookies["csrftoken"].value
    assert client.post(reverse("plan-preview"), form_data()).status_code == 403
    response = client.post(reverse("plan-preview"), form_data(), HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200 and response.json()["ok"]


def test_plan_preview_is_post_only(alice_client):
    assert alice_client.get(reverse("plan-preview")).status_code == 405


def test_example_config_prefills_the_form(alice_client):
    response = alice_client.get(reverse("experiment-new") + "?example=demo")
    assert response.status_code == 200
    assert 'name="train__max_steps" value="300"' in response.content.decode()
    assert alice_client.get(reverse("experiment-new") + "?example=../etc/passwd").status_code == 404


def test_a_nullable_bool_is_a_three_state_select(alice_client, alice):
    """data.chat_template is true, false or null ("on when the tokenizer has a template"): a checkbox
    would save null as false, so the form offers all three and keeps each."""
    html = alice_client.get(reverse("experiment-new")).content.decode()
    assert '<select name="data__chat_template"' in html and 'type="checkbox" name="data__chat_template"' not in html
    for text, value in (("", None), ("true", True), ("false", False)):
        data = form_data(name=f"chat {text or 'null'}", data__chat_template=text)
        if value:  # the char tokenizer has no template: true is refused by the schema, naming the field
            response = alice_client.post(reverse("experiment-new"), data)
            assert (
                response.context["form"]
                .errors["data__chat_template"][0]
                .startswith("the built-in character tokenizer has no chat template")
            )
            continue
        assert alice_client.post(reverse("experiment-new"), data).status_code == 302
        experiment = alice.experiments.get(name=f"chat {text or 'null'}")
        assert experiment.config["data"]["chat_template"] is value
        edit = alice_client.get(reverse("experiment-edit", args=[experiment.pk])).content.decode()
        assert re.search(rf'<option value="{text}" selected>', edit), text

"""The algorithm choices (policy losses, LoRA, dynamic sampling) reach the platform from the trainer's schema alone: the
new-experiment form offers grpo.policy_loss (gspo, cispo, ...), model.lora.rank and
rollout.dynamic_sampling, and the API refuses an unknown policy loss with a 400 that names the
field and lists the known losses."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from api_testlib import token_client
from django.urls import reverse
from platform_testlib import TINY_CONFIG_YAML
from web_testlib import form_data

from experiments.models import Experiment
from web.config_form import html_name

pytestmark = pytest.mark.django_db

# Written out by hand (trainers/algo/loss.py registers them): the test fails if one goes missing.
KNOWN_LOSSES = ("grpo", "gspo", "gspo-token", "cispo")


def select_options(html: str, name: str) -> list[str]:
    """The option values of the <select name=...> in the page."""
    match = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert match, f"no <select name={name!r}>"
    return re.findall(r'<option value="([^"]*)"', match.group(1))


def test_form_offers_the_new_choices(alice_client):
    html = alice_client.get(reverse("experiment-new")).content.decode()
    assert html_name("grpo.policy_loss") == "grpo__policy_loss"
    assert set(KNOWN_LOSSES) <= set(select_options(html, "grpo__policy_loss"))
    assert 'data-field="model.lora.rank"' in html and f'name="{html_name("model.lora.rank")}"' in html
    assert 'data-field="rollout.dynamic_sampling"' in html
    assert f'name="{html_name("rollout.dynamic_sampling")}"' in html


def test_form_saves_a_gspo_lora_dynamic_sampling_config(alice_client, alice):
    """The form tab posts the new fields like any other; the stored config holds them."""
    data = form_data(name="gspo", grpo__policy_loss="gspo", model__lora__rank="4", rollout__dynamic_sampling=True)
    response = alice_client.post(reverse("experiment-new"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    config = Experiment.objects.get(owner=alice, name="gspo").config
    assert config["grpo"]["policy_loss"] == "gspo" and config["model"]["lora"]["rank"] == 4
    assert config["rollout"]["dynamic_sampling"] is True


def test_api_refuses_an_unknown_policy_loss_naming_the_field_and_the_known_ones(alice):
    raw = yaml.safe_load(TINY_CONFIG_YAML)
    raw["grpo"]["policy_loss"] = "ppo"
    response = token_client(alice).post(
        "/api/experiments", data=json.dumps({"name": "ppo", "config": raw}), content_type="application/json"
    )
    assert 400 <= response.status_code < 500
    errors = response.json()["errors"]
    assert list(errors) == ["grpo.policy_loss"]
    for loss in KNOWN_LOSSES:
        assert loss in errors["grpo.policy_loss"]
    assert not Experiment.objects.filter(name="ppo").exists()


def test_api_schema_lists_the_new_choices(client):
    """GET /api/schema (public): the config's sections carry the new fields, the losses as an enum."""
    schemas = client.get("/api/schema").json()["components"]["schemas"]
    assert schemas["GrpoSection"]["properties"]["policy_loss"]["enum"] == list(KNOWN_LOSSES)
    assert schemas["ModelSection"]["properties"]["lora"] == {"$ref": "#/components/schemas/LoraSection"}
    assert schemas["LoraSection"]["properties"]["rank"]["type"] == "integer"
    assert schemas["RolloutSection"]["properties"]["dynamic_sampling"]["type"] == "boolean"

"""/api/experiments: create (errors keyed by the schema's dotted fields), list, detail, update."""

from __future__ import annotations

import json

import yaml
from api_testlib import make_experiment, token_client
from platform_testlib import TINY_CONFIG_YAML, tiny_config

from experiments.models import Experiment
from trainers.config import ConfigError, parse_config


def post(client, url, body, **extra):
    return client.post(
        url,
        data=json.dumps(body) if not isinstance(body, (str, bytes)) else body,
        content_type="application/json",
        **extra,
    )


def schema_errors(raw) -> dict:
    try:
        parse_config(raw)
    except ConfigError as exc:
        return exc.as_dict()
    raise AssertionError("config was valid")


def test_create_stores_the_normalised_config_and_a_version(alice):
    client = token_client(alice)
    raw = yaml.safe_load(TINY_CONFIG_YAML)
    response = post(client, "/api/experiments", {"name": " first ", "config": raw, "description": "d"})
    assert response.status_code == 201, response.content
    body = response.json()
    experiment = Experiment.objects.get(pk=body["id"])
    assert body["version"] == 1 and response["Location"] == f"/api/experiments/{experiment.pk}"
    assert experiment.owner == alice and experiment.name == "first" and experiment.description == "d"
    assert experiment.config == parse_config(raw).model_dump(mode="json", by_alias=True)
    assert experiment.latest_version.number == 1


def test_create_from_yaml_text(alice):
    response = post(token_client(alice), "/api/experiments", {"name": "y", "config_yaml": TINY_CONFIG_YAML})
    assert response.status_code == 201
    assert Experiment.objects.get(pk=response.json()["id"]).config == tiny_config()


def test_invalid_config_answers_the_schemas_fields_and_messages(alice):
    raw = yaml.safe_load(TINY_CONFIG_YAML)
    raw["batch"]["mini_batch_prompts"] = 3  # does not divide prompts_per_step=4
    raw["grpo"]["num_generations"] = 0
    raw["train"]["bogus"] = 1
    response = post(token_client(alice), "/api/experiments", {"name": "bad", "config": raw})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors == schema_errors(raw)  # exactly the schema's {dotted.field: message}
    assert "grpo.num_generations" in errors and "train.bogus" in errors
    # the cross-field rule is reported once the fields themselves are valid
    raw["grpo"]["num_generations"] = 4
    del raw["train"]["bogus"]
    errors = post(token_client(alice), "/api/experiments", {"name": "bad", "config": raw}).json()["errors"]
    assert list(errors) == ["batch.mini_batch_prompts"]
    assert errors["batch.mini_batch_prompts"] == schema_errors(raw)["batch.mini_batch_prompts"]
    assert Experiment.objects.count() == 0


def test_missing_name_and_config(alice):
    client = token_client(alice)
    errors = post(client, "/api/experiments", {}).json()["errors"]
    assert set(errors) == {"name", "config"}
    response = post(client, "/api/experiments", {"name": "", "config": tiny_config()})
    assert response.status_code == 400 and set(response.json()["errors"]) == {"name"}
    errors = post(client, "/api/experiments", {"name": "x", "config": tiny_config(), "config_yaml": "seed: 1"}).json()
    assert set(errors["errors"]) == {"config"}
    errors = post(client, "/api/experiments", {"name": "x", "config": [1, 2]}).json()["errors"]
    assert set(errors) == set(schema_errors([1, 2]))
    errors = post(client, "/api/experiments", {"name": "x", "config_yaml": "a: [1"}).json()["errors"]
    assert list(errors) == ["(yaml)"]
    errors = post(client, "/api/experiments", {"name": "n" * 201, "config": tiny_config()}).json()["errors"]
    assert list(errors) == ["name"]


def test_bad_json_bodies_are_400(alice):
    client = token_client(alice)
    for body in ("{not json", "[1, 2]", b"\xff\xfe", '{"name": "x", "config": {"grpo": {"beta": NaN}}}'):
        response = post(client, "/api/experiments", body)
        assert response.status_code == 400 and "error" in response.json(), body


def test_list_is_own_and_staff_sees_all(alice, bob, staff):
    make_experiment(alice, name="a1")
    make_experiment(bob, name="b1")
    names = [e["name"] for e in token_client(alice).get("/api/experiments").json()["experiments"]]
    assert names == ["a1"]
    body = token_client(staff).get("/api/experiments").json()
    assert sorted(e["name"] for e in body["experiments"]) == ["a1", "b1"] and body["count"] == 2
    first = body["experiments"][0]
    assert {"id", "name", "owner", "version", "run_count", "created_at", "updated_at"} <= set(first)


def test_detail_and_other_users_404(alice, bob):
    experiment = make_experiment(alice)
    body = token_client(alice).get(f"/api/experiments/{experiment.pk}").json()
    assert body["id"] == experiment.pk and body["config"] == experiment.config
    assert body["versions"][0]["number"] == 1 and body["runs"] == []
    response = token_client(bob).get(f"/api/experiments/{experiment.pk}")
    assert response.status_code == 404 and "error" in response.json()
    assert token_client(alice).get("/api/experiments/999999").status_code == 404


def test_put_and_patch_add_a_version_only_when_the_config_changes(alice, bob):
    experiment = make_experiment(alice)
    client = token_client(alice)
    url = f"/api/experiments/{experiment.pk}"
    changed = tiny_config(seed=7)
    response = client.put(url, json.dumps({"name": "renamed", "config": changed}), content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["version"] == 2 and response.json()["name"] == "renamed"
    response = client.patch(url, json.dumps({"description": "only text"}), content_type="application/json")
    assert response.json()["version"] == 2 and response.json()["description"] == "only text"
    response = client.patch(url, json.dumps({"config_yaml": TINY_CONFIG_YAML}), content_type="application/json")
    assert response.json()["version"] == 3
    experiment.refresh_from_db()
    assert experiment.config == tiny_config() and experiment.name == "renamed"
    # PUT needs the whole thing; invalid configs change nothing
    assert set(client.put(url, json.dumps({"name": "x"}), content_type="application/json").json()["errors"]) == {
        "config"
    }
    bad = dict(tiny_config(), batch={"prompts_per_step": 4, "mini_batch_prompts": 3})
    response = client.patch(url, json.dumps({"config": bad}), content_type="application/json")
    assert response.status_code == 400 and "batch.mini_batch_prompts" in response.json()["errors"]
    assert Experiment.objects.get(pk=experiment.pk).versions.count() == 3
    # someone else's: 404, not 403
    assert (
        token_client(bob).patch(url, json.dumps({"name": "mine"}), content_type="application/json").status_code == 404
    )
    assert Experiment.objects.get(pk=experiment.pk).name == "renamed"

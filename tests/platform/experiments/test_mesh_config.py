"""The mesh section on the platform: migration experiments/0007 moves stored async device lists
into it, the form and the API take it (and name the new place of an old async list), the plan
preview shows the mesh, and a mesh the worker's devices cannot form fails the run with a one-line
config error naming the field (no traceback)."""

from __future__ import annotations

import importlib
import json

import pytest
from api_testlib import token_client
from django.urls import reverse
from platform_testlib import tiny_config
from web_testlib import fast_passwords, form_data  # noqa: F401 (fast_passwords: autouse)

from experiments.models import ConfigVersion, Experiment, Run
from runner import services
from trainers.config import parse_config

MESH_DEFAULTS = {"data": 1, "fsdp": 1, "tensor": 1, "train_devices": [], "rollout_devices": [], "rollout_tensor": 1}


def stored_before(config: dict, **async_lists) -> dict:
    """`config` as rows stored it before the mesh section: device lists in async, no mesh."""
    old = {key: value for key, value in config.items() if key != "mesh"}
    old["async"] = {**old["async"], "train_devices": [], "rollout_devices": [], **async_lists}
    return old


@pytest.mark.django_db
def test_the_migration_moves_async_device_lists_into_the_mesh_section(alice):
    from django.apps import apps

    migration = importlib.import_module("experiments.migrations.0007_mesh_devices")
    experiment = Experiment(owner=alice, name="old")
    experiment.set_config(tiny_config(async__enabled=True), user=alice)
    new = experiment.config
    assert new["mesh"] == MESH_DEFAULTS
    async_pair = stored_before(new, train_devices=[0, 1], rollout_devices=[2, 3])
    Experiment.objects.filter(pk=experiment.pk).update(config=async_pair)
    ConfigVersion.objects.filter(experiment=experiment).update(config=async_pair)
    sync_config = tiny_config()
    olds = [
        stored_before(new),  # empty lists
        stored_before(sync_config, train_devices=[0], rollout_devices=[1]),  # ignored without async
        stored_before(new, train_devices=[0], rollout_devices=[1]),
        new,  # stored after: unchanged
        {"model": {"preset": "tiny"}},
        ["not", "a", "config"],
    ]
    runs = [
        Run.objects.create(experiment=experiment, config=config, status="succeeded", attempt=1, max_steps=2)
        for config in olds
    ]
    migration.move_device_lists(apps, None)

    moved = {**MESH_DEFAULTS, "data": 2, "train_devices": [0, 1], "rollout_devices": [2, 3]}
    experiment.refresh_from_db()
    assert experiment.config == {**new, "mesh": moved}
    assert experiment.versions.get().config == {**new, "mesh": moved}
    assert set(experiment.config) == set(new)  # (PostgreSQL's jsonb keeps no key order: sets, not lists)
    now = [Run.objects.get(pk=run.pk).config for run in runs]
    assert now[0] == new
    assert now[1] == sync_config
    assert now[2] == {**new, "mesh": {**MESH_DEFAULTS, "train_devices": [0], "rollout_devices": [1]}}
    assert now[3:] == olds[3:]
    # every rewritten config is valid, and means what it meant (two train devices: data parallel)
    mesh = parse_config(experiment.config).mesh
    assert (mesh.data, mesh.train_devices, mesh.rollout_devices) == (2, [0, 1], [2, 3])
    for config in now[:3]:
        parse_config(config)


@pytest.mark.django_db
def test_the_form_and_the_api_take_the_mesh_section(alice, alice_client):
    html = alice_client.get(reverse("experiment-new")).content.decode()
    assert 'id="section-mesh"' in html and 'name="mesh__train_devices"' in html
    assert 'id="plan-mesh"' in html and "one device (no mesh)" in html
    response = alice_client.post(reverse("experiment-new"), form_data(name="meshed", mesh__data="2", mesh__fsdp="2"))
    assert response.status_code == 302, response.content[:500]
    assert Experiment.objects.get(name="meshed").config["mesh"] == {**MESH_DEFAULTS, "data": 2, "fsdp": 2}
    # the form's error goes next to its field
    response = alice_client.post(reverse("experiment-new"), form_data(name="x", mesh__tensor="4"))
    assert response.status_code == 400
    assert response.context["form"].config_errors == {
        "mesh.tensor": (
            "mesh.tensor=4: 4 does not divide the KV heads (2) of model.preset 'tiny'; tensor parallelism splits "
            "attention by heads, the MLP by its width and the LM head by the vocabulary; use 1 or 2"
        )
    }
    # the preview shows the mesh and the sequences per device (4 prompts x G 4 = 16 over 4 devices)
    body = alice_client.post(reverse("plan-preview"), form_data(mesh__data="2", mesh__fsdp="2")).json()
    assert body["ok"] and body["plan"]["mesh"] == "data 2 x fsdp 2 x tensor 1 (4 devices)"
    assert body["plan"]["train_sequences_per_device"] == 4
    # and the token positions a train micro-batch holds at most: its 16 sequences x (prompt + completion budget)
    budget = body["plan"]["prompt_token_budget"] + body["plan"]["completion_token_budget"]
    assert body["plan"]["train_micro_batch_tokens"] == 16 * budget
    assert "train micro-batch             16 sequences = 4 per device (split over data x fsdp = 4)" in body["text"]

    api = token_client(alice)
    config = tiny_config(mesh__fsdp=2)
    response = api.post(
        "/api/experiments", json.dumps({"name": "api", "config": config}), content_type="application/json"
    )
    assert response.status_code == 201, response.content[:500]
    assert Experiment.objects.get(name="api").config["mesh"]["fsdp"] == 2
    old = {**tiny_config(async__enabled=True)}
    old["async"] = {**old["async"], "train_devices": [0, 1], "rollout_devices": [2]}
    response = api.post("/api/experiments", json.dumps({"name": "old", "config": old}), content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "async.train_devices": "async.train_devices moved to mesh.train_devices; write mesh: {train_devices: [0, 1], "
        "data: 2} (--set mesh.train_devices=[0, 1]) and remove async.train_devices",
        "async.rollout_devices": "async.rollout_devices moved to mesh.rollout_devices; write mesh: {rollout_devices: "
        "[2]} (--set mesh.rollout_devices=[2]) and remove async.rollout_devices",
    }


@pytest.mark.django_db(transaction=True)  # the trainer's hooks write from their own threads
def test_a_mesh_the_worker_cannot_form_fails_the_run_naming_the_field(
    alice, settings, tmp_path, sent_messages, restore_signals
):
    """fsdp 16 is valid before launch (16 sequences a step split evenly) but the worker sees 8 devices."""
    from runner.attempt import run_attempt

    settings.ARTIFACTS_DIR = tmp_path / "runs"
    experiment = Experiment(owner=alice, name="too wide")
    experiment.set_config(tiny_config(mesh__fsdp=16), user=alice)
    run = services.launch_run(experiment)
    Run.objects.filter(pk=run.pk).update(status="running")
    assert run_attempt(run.pk, run.attempt) == 1
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == (
        "invalid config (1 problem(s)):\n  mesh: data x fsdp x tensor = 16 devices but the run sees 8 "
        "free device(s); lower the sizes, or start the run with more devices"
    )

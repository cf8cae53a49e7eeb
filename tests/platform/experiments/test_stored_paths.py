"""Security probe: stored configs name `model.path`, `data.train_path` and
`data.eval_path` relative to their first root (experiments.configs.stored / stored_path), and
`GET /api/models` lists folders the same way, so no server directory reaches users through a
config: the API, the experiment page and its form, the `config.yaml` export, the run page, the runs
table. A stored config read back and sent again (GET then PATCH) is accepted unchanged, and the
worker, which parses the stored config again, still trains on the same files."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from api_testlib import token_client
from django.conf import settings
from django.urls import reverse
from test_long_urls_and_shown_paths import data_dir  # noqa: F401  (a fixture: this test's own data dir)
from test_run_export import hf_config

from experiments import configs
from experiments.models import Experiment, RolloutSample, Run
from tests.tiny_models import write_model_config, write_tiny_model

# --- stored_path: hand-computed values -----------------------------------------------------------


def test_stored_path_is_relative_to_the_first_root_only(tmp_path):
    first, second = tmp_path / "models", tmp_path / "more"
    (first / "a" / "b").mkdir(parents=True)
    second.mkdir()
    roots = [str(first), str(second)]
    assert configs.stored_path(str(first / "a"), roots) == "a"
    assert configs.stored_path(str(first / "a" / "b"), roots) == os.path.join("a", "b")
    assert configs.stored_path(str(second / "x"), roots) == str(second / "x")  # another root: absolute
    assert configs.stored_path(str(tmp_path / "modelsx" / "y"), roots) == str(tmp_path / "modelsx" / "y")
    assert configs.stored_path("already/relative", roots) == "already/relative"
    assert configs.stored_path(str(first / "a"), []) == str(first / "a")
    (tmp_path / "link").symlink_to(first)  # a first root configured through a symlink: its real path counts
    assert configs.stored_path(str(first / "a"), [str(tmp_path / "link")]) == "a"


# --- round trip: parse(stored(parse(x))) names the same files -----------------------------------


def write_jsonl(path, rows: int = 8, tag: str = "probe") -> None:
    path.write_text(
        "".join(json.dumps({"prompt": f"{tag}-{i}: 2+{i}=", "answer": str(2 + i)}) + "\n" for i in range(rows))
    )


def path_config(model_path: str, train_path: str, eval_path: str) -> dict:
    """hf_config (the tiny chat model, 2 steps) reading prompts from JSONL files."""
    raw = hf_config()
    raw["model"] = {"path": model_path}
    raw["data"] = {
        "task": None,
        "train_path": train_path,
        "eval_path": eval_path,
        "train_prompts": 0,
        "eval_prompts": 0,
        "system_prompt": "Answer briefly.",
    }
    raw["rewards"] = [{"name": "exact_match", "weight": 1.0}]
    return raw


@pytest.fixture
def files(data_dir, settings):  # noqa: F811
    """The tiny chat model in the model root, train and eval files in the dataset root, and a second
    model root (after the first) holding one more model."""
    write_tiny_model(data_dir / "models" / "tiny-chat")
    (data_dir / "datasets" / "sub").mkdir()
    write_jsonl(data_dir / "datasets" / "sub" / "train.jsonl", tag="probe-train")
    write_jsonl(data_dir / "datasets" / "eval.jsonl", tag="probe-eval")
    write_model_config(data_dir / "more-models" / "other-model")
    settings.PLATFORM_MODELS_DIRS = [data_dir / "models", data_dir / "more-models"]
    return data_dir


def test_stored_paths_round_trip_to_the_same_files(files):
    d = files
    for model, train, evaluation in [
        ("tiny-chat", "sub/train.jsonl", "eval.jsonl"),
        (
            str(d / "models" / "tiny-chat"),
            str(d / "datasets" / "sub" / "train.jsonl"),
            str(d / "datasets" / "eval.jsonl"),
        ),
        ("./tiny-chat/../tiny-chat", "sub/../sub/train.jsonl", "./eval.jsonl"),
    ]:
        first = configs.parse(path_config(model, train, evaluation))
        data = configs.stored(first)
        assert (data["model"]["path"], data["data"]["train_path"], data["data"]["eval_path"]) == (
            "tiny-chat",
            os.path.join("sub", "train.jsonl"),
            "eval.jsonl",
        ), model
        again = configs.parse(data)
        assert again.model.path == first.model.path == str((d / "models" / "tiny-chat").resolve())
        assert again.data.train_path == first.data.train_path == str((d / "datasets" / "sub" / "train.jsonl").resolve())
        assert again.data.eval_path == first.data.eval_path
        assert configs.validated(data) == data  # idempotent
    # a model in the second root: kept absolute (a relative path starts in the first root)
    other = str((d / "more-models" / "other-model").resolve())
    raw = path_config(other, "eval.jsonl", "eval.jsonl")
    raw["data"].update(chat_template=False, system_prompt=None)  # a config-only folder: no tokenizer
    data = configs.validated(raw)
    assert data["model"]["path"] == other and configs.validated(data) == data


@pytest.mark.django_db
def test_api_models_lists_paths_as_a_config_names_them(alice, files):
    paths = {m["name"]: m["path"] for m in token_client(alice).get("/api/models").json()["models"]}
    # the first root's folder relative to it; the second root's absolute (a relative path starts in the first)
    assert paths == {"tiny-chat": "tiny-chat", "other-model": str((files / "more-models" / "other-model").resolve())}


# --- what users see ----------------------------------------------------------------------------


def assert_no_server_path(body: str, where: str) -> None:
    roots = [settings.DATA_DIR, *settings.PLATFORM_DATASET_DIRS, *settings.PLATFORM_MODELS_DIRS]
    for root in roots:
        for form in {str(root), os.path.realpath(root)}:
            assert form not in body, (where, form, body[:3000])


@pytest.mark.django_db(transaction=True)  # the trainer's hooks write from their own threads
def test_configs_show_no_server_path_and_the_worker_trains_on_the_same_files(
    alice, client, files, sent_messages, restore_signals, settings
):
    """With one root of each kind (the default settings)."""
    from runner.attempt import run_attempt

    d = files
    settings.PLATFORM_MODELS_DIRS = [d / "models"]
    api = token_client(alice)
    client.force_login(alice)
    given = [
        ("relative", path_config("tiny-chat", "sub/train.jsonl", "eval.jsonl")),
        (
            "absolute",
            path_config(
                str(d / "models" / "tiny-chat"),
                str(d / "datasets" / "sub" / "train.jsonl"),
                str(d / "datasets" / "eval.jsonl"),
            ),
        ),
    ]
    for label, raw in given:
        created = api.post(
            "/api/experiments", json.dumps({"name": label, "config": raw}), content_type="application/json"
        )
        assert created.status_code == 201, created.content
        pk = created.json()["id"]
        got = api.get(f"/api/experiments/{pk}")
        assert got.status_code == 200
        assert_no_server_path(got.content.decode(), f"GET /api/experiments ({label})")
        config = got.json()["config"]
        assert (config["model"]["path"], config["data"]["train_path"], config["data"]["eval_path"]) == (
            "tiny-chat",
            "sub/train.jsonl",
            "eval.jsonl",
        )
        # read back and sent again: accepted, and nothing changed (no new version)
        patched = api.patch(f"/api/experiments/{pk}", json.dumps({"config": config}), content_type="application/json")
        assert patched.status_code == 200, patched.content
        assert Experiment.objects.get(pk=pk).versions.count() == 1
        # the same through YAML: the config.yaml export imported as config_yaml
        exported = client.get(reverse("experiment-export", args=[pk]))
        assert exported.status_code == 200
        text = b"".join(exported.streaming_content).decode() if exported.streaming else exported.content.decode()
        assert_no_server_path(text, f"config.yaml ({label})")
        assert yaml.safe_load(text)["model"]["path"] == "tiny-chat"
        patched = api.patch(
            f"/api/experiments/{pk}", json.dumps({"config_yaml": text}), content_type="application/json"
        )
        assert patched.status_code == 200, patched.content
        assert Experiment.objects.get(pk=pk).versions.count() == 1
        for name in ("experiment-detail", "experiment-edit", "version-list"):
            page = client.get(reverse(name, args=[pk]))
            assert page.status_code == 200
            assert_no_server_path(page.content.decode(), f"{name} ({label})")

    models = api.get("/api/models")
    assert_no_server_path(models.content.decode(), "/api/models")
    assert [(m["name"], m["path"]) for m in models.json()["models"]] == [("tiny-chat", "tiny-chat")]

    # a launched run: the worker parses the stored config again and trains on the same files
    experiment = Experiment.objects.get(name="relative")
    launched = api.post(f"/api/experiments/{experiment.pk}/runs")
    assert launched.status_code == 201, launched.content
    run = Run.objects.get(pk=launched.json()["id"])
    assert run.config["model"]["path"] == "tiny-chat" and run.config["data"]["train_path"] == "sub/train.jsonl"
    Run.objects.filter(pk=run.pk).update(status="running")
    assert run_attempt(run.pk, run.attempt) == 0
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    prompts = list(RolloutSample.objects.filter(run=run).values_list("prompt", flat=True))
    assert prompts and all("probe-train-" in p for p in prompts), prompts[:3]
    trained = yaml.safe_load((settings.ARTIFACTS_DIR / run.run_dir / "config.yaml").read_text())  # the trainer's
    assert trained["model"]["path"] == str((d / "models" / "tiny-chat").resolve())
    assert trained["data"]["train_path"] == str((d / "datasets" / "sub" / "train.jsonl").resolve())
    assert trained["data"]["eval_path"] == str((d / "datasets" / "eval.jsonl").resolve())
    for where, answer in [
        ("run page", client.get(reverse("run-detail", args=[run.pk]))),
        ("runs table", client.get(reverse("run-list"), {"config": "model.path:tiny-chat"})),
        ("GET /api/runs/<id>", api.get(f"/api/runs/{run.pk}")),
        ("GET /api/runs", api.get("/api/runs")),
    ]:
        assert answer.status_code == 200, where
        assert_no_server_path(answer.content.decode(), where)
    # the runs table's config filter matches the stored (relative) value
    table = client.get(reverse("run-list"), {"config": "model.path:tiny-chat"}).content.decode()
    assert reverse("run-detail", args=[run.pk]) in table


# --- rows stored before: migration experiments/0006 -------------------------------------------------


@pytest.mark.django_db
def test_the_migration_rewrites_absolute_paths_stored_before(alice, files):
    """A row holding the resolved absolute paths (as stored before) names them relative after the
    migration; a path in the second root, one outside every root and a toy config stay as they are."""
    import importlib

    from django.apps import apps

    from experiments.models import ConfigVersion

    d = files
    migration = importlib.import_module("experiments.migrations.0006_stored_paths_relative")
    experiment = Experiment(owner=alice, name="old")
    experiment.set_config(path_config("tiny-chat", "sub/train.jsonl", "eval.jsonl"), user=alice)
    new = experiment.config
    old = {
        **new,
        "model": {**new["model"], "path": str((d / "models" / "tiny-chat").resolve())},
        "data": {
            **new["data"],
            "train_path": str((d / "datasets" / "sub" / "train.jsonl").resolve()),
            "eval_path": str((d / "datasets" / "eval.jsonl").resolve()),
        },
    }
    other = {
        **old,
        "model": {**old["model"], "path": str((d / "more-models" / "other-model").resolve())},
        "data": {**old["data"], "eval_path": "/etc/passwd"},
    }
    Experiment.objects.filter(pk=experiment.pk).update(config=old)
    ConfigVersion.objects.filter(experiment=experiment).update(config=old)
    runs = [
        Run.objects.create(experiment=experiment, config=config, status="succeeded", attempt=1, max_steps=2)
        for config in (old, other, {"model": {"preset": "tiny"}}, ["not", "a", "config"])
    ]
    migration.relative_paths(apps, None)
    experiment.refresh_from_db()
    assert experiment.config == new and experiment.versions.get().config == new
    configs_now = [Run.objects.get(pk=run.pk).config for run in runs]
    assert configs_now[0] == new
    assert configs_now[1]["model"]["path"] == other["model"]["path"]  # another root: absolute
    assert configs_now[1]["data"] == {**other["data"], "train_path": "sub/train.jsonl"}  # outside: as it was
    assert configs_now[2:] == [{"model": {"preset": "tiny"}}, ["not", "a", "config"]]
    # nothing changes for the form: the stored config equals a fresh save, so no new version
    experiment.set_config(path_config(str(d / "models" / "tiny-chat"), "sub/train.jsonl", "eval.jsonl"), user=alice)
    assert experiment.versions.count() == 1

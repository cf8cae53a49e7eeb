"""Pretrained models on the platform: `model.path` only inside the model roots (settings.PLATFORM_MODELS_DIRS,
from PLATFORM_MODELS_DIR) through the API, the web form, its YAML tab and the worker; the listing
of the model folders (`available_models`, `GET /api/models`) and the form's choices built from it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from api_testlib import make_experiment, token_client
from django.test import Client
from django.urls import reverse
from platform_testlib import tiny_config
from web_testlib import form_data

from experiments.models import Experiment
from experiments.models_dir import available_models
from tests.tiny_models import write_model_config, write_tiny_model

pytestmark = pytest.mark.django_db

REFUSED = "missing or not allowed: {path}; put the model folder under the platform's models directory"


@pytest.fixture
def roots(settings, tmp_path):
    """Two model roots of this test's own: `first` holds tiny-llama (a complete folder), a
    config-only folder, a hidden folder, a broken one, an unsupported one and a symlink leading
    out to a model folder outside every root; `second` holds one more model."""
    first, second, outside = tmp_path / "models", tmp_path / "more-models", tmp_path / "outside"
    write_tiny_model(first / "tiny-llama")
    write_model_config(first / "config-only")
    write_model_config(first / ".partial-fetch")
    (first / "broken").mkdir()
    (first / "broken" / "config.json").write_text("{not json")
    (first / "gpt2").mkdir()
    (first / "gpt2" / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    (first / "notes.txt").write_text("a file, not a folder")
    write_model_config(outside / "secret-model")
    (first / "escape").symlink_to(outside / "secret-model")
    write_model_config(second / "other-model", vocab_size=1000)
    settings.PLATFORM_MODELS_DIRS = [first, second]
    return {"first": first, "second": second, "outside": outside}


def model_config(path: str | None) -> dict:
    raw = tiny_config()
    raw["model"] = {"path": path}
    return raw


def refused_paths(roots) -> list[str]:
    return [
        "/etc",
        "../../",
        "../outside/secret-model",
        str(roots["outside"] / "secret-model"),
        "escape",  # a symlink inside a root that leads outside
        "notes.txt",  # a file, not a folder
        "missing-model",
        "/",
    ]


def post_experiment(client: Client, config: dict):
    return client.post("/api/experiments", json.dumps({"name": "m", "config": config}), content_type="application/json")


# --- validation --------------------------------------------------------------------------------


def test_api_refuses_model_paths_outside_the_roots_naming_model_path(alice, roots):
    client = token_client(alice)
    for path in refused_paths(roots):
        response = post_experiment(client, model_config(path))
        assert response.status_code == 400, (path, response.content)
        assert response.json()["errors"] == {"model.path": REFUSED.format(path=path)}, path
    response = client.post(
        "/api/experiments",
        json.dumps({"name": "m", "config_yaml": "model: {path: /etc}\n"}),
        content_type="application/json",
    )
    assert response.json()["errors"] == {"model.path": REFUSED.format(path="/etc")}
    experiment = make_experiment(alice)
    response = client.patch(
        f"/api/experiments/{experiment.pk}",
        json.dumps({"config": model_config("../../")}),
        content_type="application/json",
    )
    assert response.status_code == 400 and "model.path" in response.json()["errors"]
    assert Experiment.objects.count() == 1 and experiment.versions.count() == 1


def test_a_folder_inside_a_root_is_accepted_and_stored_resolved(alice, roots):
    """Stored resolved: relative to the first root when inside it (where a relative path starts), else absolute."""
    client = token_client(alice)
    for given, expected in [
        ("tiny-llama", "tiny-llama"),  # relative to the first root
        ("./tiny-llama/../config-only", "config-only"),
        (str(roots["first"] / "tiny-llama"), "tiny-llama"),
        (str(roots["second"] / "other-model"), str((roots["second"] / "other-model").resolve())),
    ]:
        response = post_experiment(client, model_config(given))
        assert response.status_code == 201, (given, response.content)
        stored = Experiment.objects.get(pk=response.json()["id"]).config["model"]["path"]
        assert stored == expected, given


def test_a_folder_that_is_not_a_supported_model_names_model_path(alice, roots):
    response = post_experiment(token_client(alice), model_config("gpt2"))
    assert response.status_code == 400
    assert "GPT2LMHeadModel" in response.json()["errors"]["model.path"]


def test_web_form_and_yaml_tab_refuse_a_path_outside(alice_client, roots):
    for path in ("/etc", "../../", "escape"):
        message = REFUSED.format(path=path)
        response = alice_client.post(reverse("experiment-new"), form_data(model_config(path), name="x"))
        assert response.status_code == 400 and response.context["form"].errors["model__path"] == [message], path
        response = alice_client.post(
            reverse("experiment-new"), {"name": "x", "mode": "yaml", "config_yaml": f"model: {{path: '{path}'}}\n"}
        )
        assert response.status_code == 400
        assert response.context["form"].errors["config_yaml"] == [f"model.path: {message}"], path
    assert Experiment.objects.count() == 0


def test_the_worker_checks_model_path_again(alice, roots, restore_signals):
    """A stored config naming a folder outside (a row written before the roots, a folder swapped for a
    symlink since) fails the run before anything is read."""
    from experiments.models import Run
    from runner.attempt import run_attempt

    experiment = make_experiment(alice)
    run = Run.objects.create(
        experiment=experiment,
        config=model_config("/etc"),
        status="running",
        attempt=1,
        max_steps=6,
        run_dir="run-model-path-check",
    )
    assert run_attempt(run.pk, 1) == 1
    run.refresh_from_db()
    assert run.status == "failed" and f"model.path: {REFUSED.format(path='/etc')}" in run.error


# --- listing ------------------------------------------------------------------------------------


def test_available_models_lists_model_folders_one_level_down(roots):
    models = available_models()
    assert [(m.name, m.path) for m in models] == [
        ("config-only", "config-only"),  # as model.path names it: relative to the first root
        ("tiny-llama", "tiny-llama"),
        ("other-model", str((roots["second"] / "other-model").resolve())),  # in another root: absolute
    ]  # not: hidden, broken, unsupported, a file, a symlink leading out
    tiny = models[1]
    assert (tiny.architecture, tiny.has_chat_template, tiny.label) == (
        "LlamaForCausalLM",
        True,
        f"tiny-llama — LlamaForCausalLM, {tiny.size}",
    )
    assert models[0].has_chat_template is False
    assert tiny.parameters > 0 and models[2].parameters > tiny.parameters  # a larger vocabulary


def test_available_models_skips_a_missing_root(settings, roots, tmp_path):
    settings.PLATFORM_MODELS_DIRS = [tmp_path / "no-such-root", roots["second"]]
    assert [m.name for m in available_models()] == ["other-model"]


def test_api_models(alice, roots, client):
    response = token_client(alice).get("/api/models")
    assert response.status_code == 200
    models = response.json()["models"]
    assert [m["name"] for m in models] == ["config-only", "tiny-llama", "other-model"]
    tiny = models[1]
    assert set(tiny) == {"name", "path", "architecture", "size", "parameters", "has_chat_template"}
    assert tiny["path"] == "tiny-llama" and tiny["has_chat_template"] is True
    # the path it lists is what model.path accepts
    assert post_experiment(token_client(alice), model_config(tiny["path"])).status_code == 201
    assert client.get("/api/models").status_code == 401  # not logged in


# --- the form's choices -------------------------------------------------------------------------


def _options(html: str, name: str) -> list[tuple[str, str, bool]]:
    """(value, text, selected) of the <select name=...>'s options, in order."""
    import re

    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select, f"no select {name}"
    return [
        (value, text.strip(), bool(selected))
        for value, selected, text in re.findall(
            r'<option value="([^"]*)"( selected)?>([^<]*)</option>', select.group(1)
        )
    ]


def test_form_offers_the_model_folders_for_model_path(alice_client, alice, roots):
    html = alice_client.get(reverse("experiment-new")).content.decode()
    options = _options(html, "model__path")
    tiny_path = "tiny-llama"  # relative to the first model root, as stored
    assert options[0] == ("", "none: a randomly initialised model.preset (toy sizes)", True)
    assert (tiny_path, "tiny-llama — LlamaForCausalLM, 29K", False) in options
    assert [o[0] for o in options[1:]] == [m.path for m in available_models()]
    # choosing one saves it; editing shows it selected
    response = alice_client.post(reverse("experiment-new"), form_data(model_config(tiny_path), name="with model"))
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    experiment = alice.experiments.get(name="with model")
    assert experiment.config["model"]["path"] == tiny_path
    html = alice_client.get(reverse("experiment-edit", args=[experiment.pk])).content.decode()
    assert (tiny_path, "tiny-llama — LlamaForCausalLM, 29K", True) in _options(html, "model__path")


def test_form_keeps_a_current_model_path_that_is_not_listed(alice_client, alice, roots, settings):
    tiny_path = "tiny-llama"
    experiment = Experiment(owner=alice, name="e")
    experiment.set_config(model_config(str(roots["first"] / "tiny-llama")), user=alice)
    settings.PLATFORM_MODELS_DIRS = [roots["second"]]  # the folder is no longer under a root
    html = alice_client.get(reverse("experiment-edit", args=[experiment.pk])).content.decode()
    assert (tiny_path, f"{tiny_path} (not a model folder under the model roots)", True) in _options(html, "model__path")


def test_models_dir_setting_reads_several_roots(tmp_path):
    """PLATFORM_MODELS_DIR: one directory or a list, like PLATFORM_DATASET_DIRS (settings read in a child)."""
    import subprocess
    import sys

    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'grpo_platform.settings'; "
        "from django.conf import settings; print(settings.PLATFORM_MODELS_DIRS)"
    )
    env = {
        **os.environ,
        "PLATFORM_DATA_DIR": str(tmp_path / "data"),
        "PLATFORM_MODELS_DIR": f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'},{tmp_path / 'c'}",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(Path(__file__).parents[3] / "platform"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == repr([(tmp_path / n).resolve() for n in "abc"])
    assert all((tmp_path / n).is_dir() for n in "abc")
    env.pop("PLATFORM_MODELS_DIR")
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(Path(__file__).parents[3] / "platform"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == repr([(tmp_path / "data" / "models").resolve()])


def test_an_example_config_names_its_model_relative_to_the_repository(alice_client, settings, tmp_path):
    """configs/*.yaml are written for the CLI run from the repository (model.path:
    var/models/NAME); "new from example" gives such a folder inside the first model root as the platform
    names it: relative to that root."""
    repo = tmp_path / "repo"
    write_tiny_model(repo / "var" / "models" / "tiny-llama")
    write_model_config(tmp_path / "outside" / "secret-model")
    (repo / "configs").mkdir()
    (repo / "configs" / "real.yaml").write_text("# a comment\nmodel:\n  path: var/models/tiny-llama\n")
    (repo / "configs" / "escape.yaml").write_text("model:\n  path: ../outside/secret-model\n")
    settings.REPO_ROOT = repo
    settings.PLATFORM_MODELS_DIRS = [repo / "var" / "models"]
    response = alice_client.get(reverse("experiment-new"), {"example": "real"})
    form = response.context["form"]
    folder = "tiny-llama"
    assert form.initial["model__path"] == folder and "# a comment" in form.initial["config_yaml"]
    assert (folder, "tiny-llama — LlamaForCausalLM, 29K", True) in _options(response.content.decode(), "model__path")
    response = alice_client.get(reverse("experiment-new"), {"example": "escape"})
    assert response.context["form"].errors["config_yaml"] == [
        f"model.path: {REFUSED.format(path='../outside/secret-model')}"
    ]


def test_a_shipped_config_naming_var_models_is_accepted_through_the_api(alice, settings, tmp_path):
    """configs/*.yaml name model.path var/models/<name> (written for the CLI in the
    checkout). Imported through the API (as `grpo_client launch` does), such a path that resolves
    inside a models directory from the checkout is accepted and stored relative to that root; one
    that leaves every root is still refused with the one message."""
    repo = tmp_path / "repo"
    write_tiny_model(repo / "var" / "models" / "smollm2-135m-instruct")
    write_model_config(tmp_path / "outside" / "secret-model")
    (repo / "configs").mkdir()
    settings.REPO_ROOT = repo
    settings.PLATFORM_MODELS_DIRS = [repo / "var" / "models"]
    client = token_client(alice)
    shipped = (Path(__file__).resolve().parents[3] / "configs" / "calculator-arith.yaml").read_text()
    assert "path: var/models/smollm2-135m-instruct" in shipped
    response = client.post(
        "/api/experiments", json.dumps({"name": "calc", "config_yaml": shipped}), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert Experiment.objects.get(pk=response.json()["id"]).config["model"]["path"] == "smollm2-135m-instruct"
    for path in ("var/models/../../../outside/secret-model", "configs", "var", "var/models/missing"):
        response = post_experiment(client, model_config(path))
        assert response.status_code == 400 and response.json()["errors"] == {"model.path": REFUSED.format(path=path)}


def judged_config(judge_path: str | None) -> dict:
    raw = tiny_config()
    raw["rewards"] = [{"name": "judge", "weight": 1.0}]
    raw["judge"] = {"model_path": judge_path}
    return raw


def test_the_judge_folder_is_a_model_folder_under_the_roots(alice_client, alice, roots):
    """judge.model_path is chosen, stored and refused as model.path is: the form offers the model
    folders (none first: no judge), a folder under a root is stored relative to it, one outside is
    refused naming judge.model_path."""
    html = alice_client.get(reverse("experiment-new")).content.decode()
    options = _options(html, "judge__model_path")
    assert options[0] == ("", "none: no judge (the judge reward needs one)", True)
    assert [o[0] for o in options[1:]] == [m.path for m in available_models()]
    response = alice_client.post(reverse("experiment-new"), form_data(judged_config("tiny-llama"), name="judged"))
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    assert alice.experiments.get(name="judged").config["judge"]["model_path"] == "tiny-llama"
    client = token_client(alice)
    absolute = post_experiment(client, judged_config(str(roots["first"] / "tiny-llama")))
    assert absolute.status_code == 201
    assert Experiment.objects.get(pk=absolute.json()["id"]).config["judge"]["model_path"] == "tiny-llama"
    for path in refused_paths(roots):
        response = post_experiment(client, judged_config(path))
        assert response.status_code == 400, path
        assert response.json()["errors"] == {"judge.model_path": REFUSED.format(path=path)}, path
    missing = post_experiment(client, judged_config(None))
    assert missing.status_code == 400 and "judge.model_path" in missing.json()["errors"]

"""`data.train_path` / `data.eval_path` on the platform: only files inside the dataset roots
(settings.PLATFORM_DATASET_DIRS), through every entry point: the API, the web form and its YAML
tab, the plan preview, clone, restore, the admin. A path outside, a symlink leading outside, the
database file, the secret key and a missing file all get one and the same message, so the answer
never tells whether a file exists."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from api_testlib import make_experiment, token_client
from django.conf import settings
from django.db import connection
from django.urls import reverse
from django.utils.html import escape
from platform_testlib import tiny_config
from web_testlib import form_data

from experiments.models import ConfigVersion, Experiment
from experiments.shown_paths import shown

pytestmark = pytest.mark.django_db

REFUSED = "missing or not allowed: {path}; put the file under the platform's dataset directory"


def dataset_dir() -> Path:
    return Path(settings.PLATFORM_DATASET_DIRS[0])


def write_jsonl(path: Path, rows: int = 24) -> None:
    path.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(rows)))


@pytest.fixture
def files(tmp_path):
    """A good JSONL file inside the dataset dir, and a symlink there that leads to one outside."""
    tag = uuid.uuid4().hex[:8]
    good = dataset_dir() / f"arith-{tag}.jsonl"
    write_jsonl(good)
    outside = tmp_path / "outside.jsonl"
    write_jsonl(outside)
    link = dataset_dir() / f"escape-{tag}.jsonl"
    link.symlink_to(outside)
    yield {"good": good, "link": link}
    good.unlink(missing_ok=True)
    link.unlink(missing_ok=True)


def refused_paths(files) -> list[str]:
    database = connection.settings_dict["NAME"] if connection.vendor == "sqlite" else settings.SQLITE_PATH
    return [
        "/etc/shadow",
        "../../etc/passwd",
        "../" * 30 + "etc/passwd",
        files["link"].name,  # a symlink inside pointing outside
        str(files["link"]),
        str(database),  # the platform's own database
        os.path.relpath(settings.DATA_DIR / "secret_key", dataset_dir()),  # Django's secret key
        f"missing-{uuid.uuid4().hex}.jsonl",
        str(dataset_dir()),  # the directory itself
    ]


def jsonl_config(train_path: str, eval_path: str | None = None) -> dict:
    """A valid small config reading prompts from JSONL files (paths as written)."""
    raw = tiny_config()
    raw["data"] = {
        "task": None,
        "train_path": train_path,
        "eval_path": eval_path,
        "train_prompts": 0,
        "eval_prompts": 0,
    }
    raw["rewards"] = [{"name": "exact_match", "weight": 1.0}]
    return raw


# --- the API ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["train_path", "eval_path"])
def test_api_refuses_every_path_outside_with_one_message(alice, files, field):
    client = token_client(alice)
    for path in refused_paths(files):
        config = jsonl_config(path) if field == "train_path" else jsonl_config(files["good"].name, eval_path=path)
        response = client.post(
            "/api/experiments", json.dumps({"name": "x", "config": config}), content_type="application/json"
        )
        assert response.status_code == 400, (path, response.content)
        assert response.json()["errors"] == {f"data.{field}": shown(REFUSED.format(path=path))}, path
    response = client.post(
        "/api/experiments",
        json.dumps(
            {
                "name": "x",
                "config_yaml": ("data: {task: null, train_path: /etc/passwd}\nrewards: [{name: exact_match}]\n"),
            }
        ),
        content_type="application/json",
    )
    assert response.json()["errors"] == {"data.train_path": REFUSED.format(path="/etc/passwd")}
    experiment = make_experiment(alice)
    response = client.patch(
        f"/api/experiments/{experiment.pk}",
        json.dumps({"config": jsonl_config("/etc/passwd")}),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert Experiment.objects.count() == 1 and experiment.versions.count() == 1


def test_api_accepts_a_file_in_the_dataset_dir_by_relative_path(alice, files):
    client = token_client(alice)
    response = client.post(
        "/api/experiments",
        json.dumps({"name": "jsonl", "config": jsonl_config(files["good"].name)}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    stored = Experiment.objects.get(pk=response.json()["id"]).config["data"]
    assert stored["train_path"] == files["good"].name  # resolved, stored relative to the (first) root


def test_default_task_with_a_train_path_means_jsonl(alice, files):
    config = jsonl_config(files["good"].name)
    del config["data"]["task"]
    response = token_client(alice).post(
        "/api/experiments", json.dumps({"name": "jsonl", "config": config}), content_type="application/json"
    )
    assert response.status_code == 201, response.content


# --- the web pages ---------------------------------------------------------------------------


def test_web_form_yaml_tab_and_preview_refuse_paths_outside(alice_client, files):
    for path in refused_paths(files):
        message = shown(REFUSED.format(path=path))  # server paths are shown relative to their root
        data = form_data(jsonl_config(path), name="x")
        response = alice_client.post(reverse("experiment-new"), data)
        assert response.status_code == 400 and response.context["form"].errors["data__train_path"] == [message], path
        yaml_text = f"data: {{task: null, train_path: '{path}'}}\nrewards: [{{name: exact_match}}]\n"
        response = alice_client.post(reverse("experiment-new"), {"name": "x", "mode": "yaml", "config_yaml": yaml_text})
        assert response.status_code == 400
        assert response.context["form"].errors["config_yaml"] == [f"data.train_path: {message}"], path
        body = alice_client.post(reverse("plan-preview"), data).json()
        assert body["ok"] is False and body["errors"] == {"data.train_path": message}, path
    assert Experiment.objects.count() == 0


def test_web_accepts_a_dataset_file_and_previews_its_plan(alice_client, alice, files):
    data = form_data(jsonl_config(files["good"].name), name="jsonl")
    body = alice_client.post(reverse("plan-preview"), data).json()
    assert body["ok"] is True and body["plan"]["epochs"] == 1.0  # 6 steps x 4 prompts / 24 lines
    assert alice_client.post(reverse("experiment-new"), data).status_code == 302
    assert alice.experiments.get(name="jsonl").config["data"]["train_path"] == files["good"].name


def _smuggle(experiment: Experiment, path: str) -> dict:
    """A stored config naming `path`, as a row written before the roots existed would hold."""
    config = {
        **experiment.config,
        "data": {**experiment.config["data"], "task": None, "train_path": path},
        "rewards": [{"name": "exact_match", "weight": 1.0}],
    }
    Experiment.objects.filter(pk=experiment.pk).update(config=config)
    return config


def test_clone_and_launch_revalidate_the_stored_config(alice_client, alice, sent_messages):
    experiment = make_experiment(alice, name="old")
    _smuggle(experiment, "/etc/passwd")
    response = alice_client.post(reverse("experiment-clone", args=[experiment.pk]), follow=True)
    assert escape(REFUSED.format(path="/etc/passwd")) in response.content.decode()
    assert Experiment.objects.count() == 1
    response = alice_client.post(reverse("experiment-launch", args=[experiment.pk]))
    assert response.status_code == 400 and sent_messages == []


def test_restore_revalidates_the_version(alice_client, alice):
    experiment = make_experiment(alice, name="old")
    experiment.set_config(tiny_config(seed=3), user=alice)
    bad = _smuggle(experiment, "../../etc/passwd")
    ConfigVersion.objects.filter(experiment=experiment, number=1).update(config=bad)
    Experiment.objects.filter(pk=experiment.pk).update(config=tiny_config(seed=3))
    response = alice_client.post(reverse("version-restore", args=[experiment.pk, 1]), follow=True)
    assert escape(REFUSED.format(path="../../etc/passwd")) in response.content.decode()
    experiment.refresh_from_db()
    assert experiment.versions.count() == 2 and experiment.config["seed"] == 3


def test_admin_add_validates_the_config(client, staff, files):
    client.force_login(staff)
    url = reverse("admin:experiments_experiment_add")
    response = client.post(
        url,
        {
            "owner": staff.pk,
            "name": "admin-made",
            "description": "",
            "config": json.dumps(jsonl_config("/etc/passwd")),
            "versions-TOTAL_FORMS": "0",
            "versions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200 and escape(REFUSED.format(path="/etc/passwd")) in response.content.decode()
    assert Experiment.objects.count() == 0
    response = client.post(
        url,
        {
            "owner": staff.pk,
            "name": "admin-made",
            "description": "",
            "config": json.dumps(jsonl_config(files["good"].name)),
            "versions-TOTAL_FORMS": "0",
            "versions-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    experiment = Experiment.objects.get(name="admin-made")
    assert experiment.config["data"]["train_path"] == files["good"].name
    assert experiment.versions.count() == 1

"""Security probe: another user's private upload must not be readable through `data.train_path` /
`data.eval_path`.

Uploads lie at the guessable `<dataset root>/users/<id>/<name>.jsonl`. Bob uploads `secret`; Alice,
the attacker, names its file by path through every route a config can take: the API (create, update,
`config_yaml`, `overrides`), the web form (create, edit), its YAML tab, the YAML import page, the plan
preview, fork (API and page), retry (API and page) and launch of a config stored before the fix, and
the `..` and symlink spellings of the path. Each is refused naming the field (400, or for a stored
config a 409 fork refusal / a run that fails at start), the victim's rows appear in no response, and
the victim's file is never opened (a spy on `open` / `os.open`). Uploaded files are reachable only by
`data.train_dataset` / `data.eval_dataset`, whose ownership-and-sharing check the worker applies
again at every start: a dataset unshared after a run used it fails that run's retry."""

from __future__ import annotations

import builtins
import io
import json
import os
from pathlib import Path

import pytest
import yaml
from api_testlib import make_experiment, make_run, token_client
from datasets_testlib import dataset_config, dataset_root, jsonl, upload  # noqa: F401 - fixture
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils.html import escape
from web_testlib import form_data

from experiments import configs
from experiments.models import Checkpoint, Experiment, Run, RunStatus

pytestmark = pytest.mark.django_db

SECRET_MARK = "VICTIM-SECRET-7Q2"
SECRET_ROWS = "".join(
    json.dumps({"prompt": f"{SECRET_MARK} prompt {i}", "answer": f"{SECRET_MARK} answer {i}"}) + "\n" for i in range(12)
).encode()
REFUSED = (
    "not allowed: {path} is in the uploaded datasets; name an uploaded dataset in data.{name_field} instead "
    "(your own by name, one shared with you as owner/name)"
)
NAME_FIELDS = {"train_path": "train_dataset", "eval_path": "eval_dataset"}


class Victim:
    """Bob's private upload, and every time a process opened its file since the fixture began."""

    def __init__(self, path: Path):
        self.path = path
        self.opened: list[str] = []

    def assert_safe(self, *responses) -> None:
        assert self.opened == [], f"the victim's file was opened: {self.opened}"
        for response in responses:
            assert SECRET_MARK not in response.content.decode(errors="replace")


@pytest.fixture
def victim(bob, alice, dataset_root, monkeypatch):
    dataset = upload(bob, "secret", SECRET_ROWS)
    upload(alice, "mine")  # the attacker's own dataset, for configs that need a train file
    spied = Victim(Path(dataset.absolute_path))
    real_path = os.path.realpath(dataset.absolute_path)

    def spy(real_open):
        def opening(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(file)) == real_path:
                spied.opened.append(os.fsdecode(file))
            return real_open(file, *args, **kwargs)

        return opening

    monkeypatch.setattr(builtins, "open", spy(builtins.open))
    monkeypatch.setattr(io, "open", builtins.open)
    monkeypatch.setattr(os, "open", spy(os.open))
    return spied


@pytest.fixture
def paths(victim, bob, alice, dataset_root) -> list[str]:
    """Every spelling of the victim's file (and of a missing one beside it: the same answer)."""
    (dataset_root / "shortcut.jsonl").symlink_to(victim.path)  # a file symlink to it
    (dataset_root / "linked").symlink_to(dataset_root / "users")  # a directory symlink to the tree
    return [
        f"users/{bob.pk}/secret.jsonl",
        str(victim.path),  # absolute
        f"nothere/../users/{bob.pk}/secret.jsonl",
        f"users/{alice.pk}/../{bob.pk}/secret.jsonl",
        f"./users//{bob.pk}/./secret.jsonl",
        "shortcut.jsonl",
        f"linked/{bob.pk}/secret.jsonl",
        f"{dataset_root}/linked/../users/{bob.pk}/secret.jsonl",
        f"users/{bob.pk}/missing.jsonl",  # no oracle: same message
    ]


def attack_config(tiny_config, path: str, field: str = "train_path") -> dict:
    """A tiny config whose `field` names `path` (for eval_path, it trains on the attacker's own dataset)."""
    config = dataset_config(tiny_config, train=None if field == "train_path" else "mine")
    config["data"][field] = path
    return config


def refused(path: str, field: str = "train_path") -> dict:
    return {f"data.{field}": REFUSED.format(path=path, name_field=NAME_FIELDS[field])}


def unshown(text: str) -> str:
    """`text` with a dataset root shown as `<datasets>` (answers show server paths relative to their
    root) written out again, so the messages compare with the paths the test wrote."""
    root = str(settings.PLATFORM_DATASET_DIRS[0])
    return text.replace("<datasets>", root).replace(escape("<datasets>"), root)


def answer(response) -> dict:
    return json.loads(unshown(response.content.decode()))


def store_config(run_or_experiment, config: dict) -> None:
    """A config stored before the fix: written straight into the row, no validation."""
    type(run_or_experiment).objects.filter(pk=run_or_experiment.pk).update(config=config)
    run_or_experiment.refresh_from_db()


def post_json(client, url: str, body: dict, method: str = "post"):
    return getattr(client, method)(url, json.dumps(body), content_type="application/json")


# --- the API ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["train_path", "eval_path"])
def test_api_create_refuses_every_spelling(alice, victim, paths, tiny_config, field):
    api = token_client(alice)
    for path in paths:
        response = post_json(api, "/api/experiments", {"name": "x", "config": attack_config(tiny_config, path, field)})
        assert response.status_code == 400, (path, response.content)
        assert answer(response) == {"errors": refused(path, field)}, path
        victim.assert_safe(response)
    assert not Experiment.objects.filter(owner=alice).exists()


def test_api_yaml_overrides_and_update_refuse_it(alice, bob, victim, paths, tiny_config):
    api = token_client(alice)
    path = paths[0]
    as_yaml = post_json(
        api, "/api/experiments", {"name": "x", "config_yaml": yaml.safe_dump(attack_config(tiny_config, path))}
    )
    overridden = post_json(
        api,
        "/api/experiments",
        {
            "name": "x",
            "config": dataset_config(tiny_config, train="mine"),
            "overrides": ["data.train_dataset=null", f"data.train_path={path}"],
        },
    )
    experiment = make_experiment(alice)
    patched = post_json(
        api, f"/api/experiments/{experiment.pk}", {"config": attack_config(tiny_config, path)}, method="patch"
    )
    for response in (as_yaml, overridden, patched):
        assert response.status_code == 400, response.content
        assert answer(response) == {"errors": refused(path)}
    experiment.refresh_from_db()
    assert experiment.versions.count() == 1 and Experiment.objects.filter(owner=alice).count() == 1
    victim.assert_safe(as_yaml, overridden, patched)


def test_api_launch_of_a_stored_config_is_refused(alice, victim, tiny_config, sent_messages):
    experiment = make_experiment(alice)
    store_config(experiment, attack_config(tiny_config, str(victim.path)))
    response = post_json(token_client(alice), f"/api/experiments/{experiment.pk}/runs", {})
    assert response.status_code == 400 and answer(response)["errors"] == refused(str(victim.path))
    assert sent_messages == [] and not Run.objects.exists()
    victim.assert_safe(response)


# --- the web pages ---------------------------------------------------------------------------------


def test_web_form_create_edit_yaml_tab_and_preview_refuse_it(alice_client, alice, victim, paths, tiny_config):
    experiment = make_experiment(alice)
    for path in paths:
        message = refused(path)["data.train_path"]
        data = form_data(attack_config(tiny_config, path), name="x")
        created = alice_client.post(reverse("experiment-new"), data)
        edited = alice_client.post(reverse("experiment-edit", args=[experiment.pk]), data)
        for response in (created, edited):
            assert response.status_code == 400, path
            assert [unshown(e) for e in response.context["form"].errors["data__train_path"]] == [message], path
        yaml_tab = alice_client.post(
            reverse("experiment-new"),
            {"name": "x", "mode": "yaml", "config_yaml": yaml.safe_dump(attack_config(tiny_config, path))},
        )
        assert yaml_tab.status_code == 400
        assert [unshown(e) for e in yaml_tab.context["form"].errors["config_yaml"]] == [f"data.train_path: {message}"]
        preview = alice_client.post(reverse("plan-preview"), data)  # would count the victim's rows
        assert answer(preview) == {"ok": False, "mode": "form", "errors": {"data.train_path": message}}, path
        victim.assert_safe(created, edited, yaml_tab, preview)
    experiment.refresh_from_db()
    assert experiment.versions.count() == 1 and Experiment.objects.filter(owner=alice).count() == 1


def test_web_yaml_import_refuses_it(alice_client, alice, victim, tiny_config):
    path = str(victim.path)
    text = yaml.safe_dump(attack_config(tiny_config, path)).encode()
    response = alice_client.post(
        reverse("experiment-import"), {"name": "imported", "file": SimpleUploadedFile("attack.yaml", text)}
    )
    assert response.status_code == 400
    assert [unshown(e) for e in response.context["form"].errors["config_yaml"]] == [
        f"data.train_path: {refused(path)['data.train_path']}"
    ]
    assert not Experiment.objects.filter(owner=alice).exists()
    victim.assert_safe(response)


def test_web_launch_and_clone_of_a_stored_config_are_refused(alice_client, alice, victim, tiny_config, sent_messages):
    experiment = make_experiment(alice, name="old")
    store_config(experiment, attack_config(tiny_config, str(victim.path)))
    launched = alice_client.post(reverse("experiment-launch", args=[experiment.pk]))
    cloned = alice_client.post(reverse("experiment-clone", args=[experiment.pk]), follow=True)
    assert launched.status_code == 400 and sent_messages == [] and not Run.objects.exists()
    assert escape(refused(str(victim.path))["data.train_path"]) in unshown(cloned.content.decode())
    assert Experiment.objects.filter(owner=alice).count() == 1
    victim.assert_safe(launched, cloned)


# --- fork, retry and the worker: configs stored before the fix --------------------------------------


@pytest.fixture
def artifacts(settings, tmp_path):
    settings.ARTIFACTS_DIR = tmp_path / "runs"
    return tmp_path / "runs"


def stored_run(user, config: dict, artifacts: Path | None = None, run_dir: str = "run-stored", **fields) -> Run:
    """A run of `user` whose config (and its experiment's) is `config`, stored unvalidated; with
    `artifacts`, its run directory holds a (fake) checkpoint at step 2 to fork from."""
    run = make_run(user, run_dir=run_dir, **fields)
    store_config(run.experiment, config)
    store_config(run, config)
    if artifacts is not None:
        folder = artifacts / run_dir / "checkpoints" / "2" / "params"
        folder.mkdir(parents=True)
        (folder / "weights").write_text("weights")
        Checkpoint.objects.create(run=run, step=2, path=f"{run_dir}/checkpoints/2", size_bytes=7)
    return run


def test_fork_of_a_stored_config_is_refused_and_the_body_cannot_name_a_path(
    alice, victim, tiny_config, artifacts, sent_messages, client
):
    path = str(victim.path)
    parent = stored_run(alice, attack_config(tiny_config, path), artifacts, status="succeeded", step=6)
    api = token_client(alice)
    forked = post_json(api, f"/api/runs/{parent.pk}/fork", {"step": 2})
    assert forked.status_code == 409
    assert answer(forked)["error"] == (
        f"run {parent.pk}'s config is not valid on this platform now "
        f"(data.train_path: {refused(path)['data.train_path']})"
    )
    client.force_login(alice)
    page = client.post(reverse("run-fork", args=[parent.pk]), {"step": "2"}, follow=True)
    assert escape(f"data.train_path: {refused(path)['data.train_path']}") in unshown(page.content.decode())
    assert not Run.objects.filter(forked_from=parent).exists() and sent_messages == []

    # a fork takes no config: a config or an override in its body changes nothing of what it reads
    clean = stored_run(
        alice, dataset_config(tiny_config, train="mine"), artifacts, run_dir="run-clean", status="succeeded", step=6
    )
    smuggled = post_json(
        api,
        f"/api/runs/{clean.pk}/fork",
        {
            "step": 2,
            "max_steps": 8,
            "config": attack_config(tiny_config, path),
            "overrides": [f"data.train_path={path}"],
        },
    )
    assert smuggled.status_code == 201, smuggled.content
    child = Run.objects.get(pk=smuggled.json()["id"])
    assert (child.config["data"]["train_dataset"], child.config["data"]["train_path"]) == ("mine", None)
    victim.assert_safe(forked, page, smuggled)


def start_as_the_worker(run: Run) -> int:
    """What a worker does with the queued run's message: claim the attempt (runner.supervisor), then
    run it (runner.attempt.run_attempt, which validates the stored config with the owner first)."""
    from runner.attempt import run_attempt

    run.refresh_from_db()
    assert run.transition(RunStatus.RUNNING, attempt=run.attempt)
    return run_attempt(run.pk, run.attempt)


def _spy_on_training(monkeypatch) -> list:
    """Record calls of trainers.train (the worker imports it at call time)."""
    import trainers

    calls = []
    monkeypatch.setattr(trainers, "train", lambda *args, **kwargs: calls.append(args))
    return calls


@pytest.mark.parametrize("route", ["api", "page"])
def test_retry_of_a_stored_config_is_refused_naming_the_field(
    alice, victim, tiny_config, sent_messages, client, route, django_capture_on_commit_callbacks
):
    """A retry checks the stored config for its owner on request: 400 naming the field
    (the page says so), nothing queued, nothing read. The worker's own check at start is the next test."""
    path = str(victim.path)
    run = stored_run(alice, attack_config(tiny_config, path), status="failed", error="worker lost")
    with django_capture_on_commit_callbacks(execute=True):
        if route == "api":
            response = post_json(token_client(alice), f"/api/runs/{run.pk}/retry", {})
            assert response.status_code == 400
            assert answer(response)["errors"]["data.train_path"].startswith(
                f"the run's config is no longer valid here (data.train_path: {refused(path)['data.train_path']})"
            )
        else:
            client.force_login(alice)
            response = client.post(reverse("run-control", args=[run.pk, "retry"]), follow=True)
            assert escape(f"data.train_path: {refused(path)['data.train_path']}") in unshown(response.content.decode())
    run.refresh_from_db()
    assert run.status == "failed" and sent_messages == []
    api = token_client(alice)
    shown = [
        api.get(f"/api/runs/{run.pk}"),
        api.get(f"/api/runs/{run.pk}/samples"),
        api.get(f"/api/runs/{run.pk}/events"),
    ]
    assert all(r.status_code == 200 for r in shown)
    victim.assert_safe(response, *shown)


def test_the_worker_refuses_a_stored_path_before_reading_it(alice, victim, tiny_config, monkeypatch, restore_signals):
    """(a) a run whose stored config names another user's upload by path, started as stored."""
    for path in (str(victim.path), f"users/{victim.path.parent.name}/secret.jsonl"):
        Run.objects.all().delete()
        run = stored_run(alice, attack_config(tiny_config, path), status="queued", attempt=1)
        trained = _spy_on_training(monkeypatch)
        assert start_as_the_worker(run) == 1
        run.refresh_from_db()
        assert run.status == "failed" and trained == []
        assert unshown(run.error) == (
            f"invalid config (1 problem(s)):\n  data.train_path: {refused(path)['data.train_path']}"
        )
    victim.assert_safe()


def test_a_dataset_unshared_after_a_run_used_it_fails_the_retry(
    alice, bob, victim, tiny_config, sent_messages, monkeypatch, restore_signals
):
    """(b) shared, named in a run, then unshared: the run's retry fails naming data.train_dataset."""
    bob_api, alice_api = token_client(bob), token_client(alice)
    secret_id = bob.datasets.get(name="secret").pk
    assert post_json(bob_api, f"/api/datasets/{secret_id}/share", {"users": ["alice"]}).status_code == 200
    created = post_json(
        alice_api, "/api/experiments", {"name": "on-bobs", "config": dataset_config(tiny_config, train="bob/secret")}
    )
    assert created.status_code == 201, created.content
    launched = post_json(alice_api, f"/api/experiments/{created.json()['id']}/runs", {})
    assert launched.status_code == 201, launched.content
    run = Run.objects.get(pk=launched.json()["id"])
    assert configs.parse(run.config, alice).data.train_path == str(victim.path)  # usable while shared
    Run.objects.filter(pk=run.pk).update(status="failed", error="worker lost")  # e.g. a lost worker

    assert post_json(bob_api, f"/api/datasets/{secret_id}/unshare", {"users": ["alice"]}).status_code == 200
    victim.opened.clear()  # from here on, nothing of alice's may open it
    retried = post_json(alice_api, f"/api/runs/{run.pk}/retry", {})  # refused on request
    assert retried.status_code == 400
    assert "no dataset named 'bob/secret' that you may use" in retried.json()["errors"]["data.train_dataset"]
    # a retry queued while it was still shared, started by a worker after the unshare
    Run.objects.filter(pk=run.pk).update(status="queued", attempt=run.attempt + 1)
    trained = _spy_on_training(monkeypatch)
    assert start_as_the_worker(run) == 1
    run.refresh_from_db()
    assert run.status == "failed" and trained == []
    assert "data.train_dataset: no dataset named 'bob/secret' that you may use" in run.error
    samples = alice_api.get(f"/api/runs/{run.pk}/samples")
    victim.assert_safe(retried, samples)


def test_a_dataset_name_still_reaches_the_owners_own_upload(alice, victim, tiny_config):
    """The fix closes paths, not names: the owner's dataset (and its file) trains as before."""
    config = configs.parse(dataset_config(tiny_config, train="mine"), alice)
    assert config.data.train_path.endswith(f"users/{alice.pk}/mine.jsonl")
    assert jsonl() == Path(config.data.train_path).read_bytes()


def test_an_evaluation_job_queued_while_shared_is_refused_once_unshared(
    alice, bob, victim, tiny_config, artifacts, monkeypatch, django_capture_on_commit_callbacks
):
    """A job's access is checked when it starts, not only when it was queued. Bob
    shares `secret`, Alice queues an evaluation on it, Bob unshares before the job runs: the job
    fails saying so, no child process starts, and its samples hold none of Bob's rows."""
    import subprocess

    from evaluations import jobs, services
    from evaluations.models import EvaluationJob

    monkeypatch.setattr(services, "send_when_committed", lambda job: None)
    children = []
    monkeypatch.setattr(subprocess, "Popen", lambda *args, **kwargs: children.append(args))
    bob_api, alice_api = token_client(bob), token_client(alice)
    secret_id = bob.datasets.get(name="secret").pk
    assert post_json(bob_api, f"/api/datasets/{secret_id}/share", {"users": ["alice"]}).status_code == 200
    run = stored_run(alice, dataset_config(tiny_config, train="mine"), artifacts, status="succeeded", step=6)
    queued = post_json(alice_api, "/api/evaluations", {"run": run.pk, "step": 2, "dataset": f"dataset:{secret_id}"})
    assert queued.status_code == 201, queued.content
    job_id = queued.json()["id"]
    assert post_json(bob_api, f"/api/datasets/{secret_id}/unshare", {"users": ["alice"]}).status_code == 200

    assert jobs.run_job(job_id) == "failed"
    job = EvaluationJob.objects.get(pk=job_id)
    assert (
        job.error == "dataset bob/secret is no longer one you may use (its owner stopped sharing it); choose "
        "another dataset"
    )
    assert children == [] and not job.samples.exists()
    samples = alice_api.get(f"/api/evaluations/{job_id}/samples")
    assert samples.status_code == 200
    victim.assert_safe(samples)

    # shared again, a new job runs as far as starting its child: the check refuses only what it must
    assert post_json(bob_api, f"/api/datasets/{secret_id}/share", {"users": ["alice"]}).status_code == 200
    jobs.check_access(EvaluationJob.objects.get(pk=job_id))

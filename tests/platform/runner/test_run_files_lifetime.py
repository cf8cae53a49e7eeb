"""Security probe: a deleted run's files go with it
(after the deletion commits); a fork's hard-linked checkpoint counts once against the storage quota;
an upload's quota check is taken inside the transaction that stores it (a concurrent upload that
committed meanwhile is seen); a retry or resume of a run whose config no longer validates answers
400 naming the field, like a launch, instead of 202 and a failure at start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from api_testlib import make_run, token_client
from datasets_testlib import jsonl
from test_storage_quota import QUOTA_BYTES, files_under, places, run_with_files, upload_request, write  # noqa: F401

from experiments.dataset_models import Dataset
from experiments.models import Run
from runner import storage

pytestmark = pytest.mark.django_db


def test_deleting_a_run_frees_its_directory_and_exports_once_committed(
    alice,
    places,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    run = run_with_files(alice, {"checkpoints/2/w.bin": 500, "logs/train.log": 20})
    kept = run_with_files(alice, {"checkpoints/2/w.bin": 300})
    write(storage.export_folder(run, 2) / "model.safetensors", 200)
    write(storage.export_folder(kept, 2) / "model.safetensors", 100)
    directory = Path(storage.run_directory(run))
    with django_capture_on_commit_callbacks(execute=False) as pending:
        Run.objects.filter(pk=run.pk).delete()
    assert directory.is_dir()  # not before the commit
    for callback in pending:
        callback()
    assert not directory.exists() and not storage.export_folder(run, 2).exists()
    assert Path(storage.run_directory(kept)).is_dir() and storage.export_folder(kept, 2).is_dir()
    assert storage.usage_for(alice).checkpoints_bytes == 300 and storage.usage_for(alice).exports_bytes == 100


def test_a_deleted_parent_leaves_its_forks_hard_linked_checkpoint(
    alice,
    places,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    parent = run_with_files(alice, {"checkpoints/2/w.bin": 1000})
    child = run_with_files(alice, {"own.log": 10}, forked_from=parent)
    linked = Path(storage.run_directory(child)) / "checkpoints/2/w.bin"
    linked.parent.mkdir(parents=True)
    os.link(Path(storage.run_directory(parent)) / "checkpoints/2/w.bin", linked)
    with django_capture_on_commit_callbacks(execute=True):
        parent.delete()
    assert linked.read_bytes() == b"x" * 1000


def test_a_forks_hard_linked_checkpoint_counts_once(alice, bob, places):  # noqa: F811
    parent = run_with_files(alice, {"checkpoints/2/w.bin": 1000})
    child = run_with_files(alice, {"own.log": 10}, forked_from=parent)
    linked = Path(storage.run_directory(child)) / "checkpoints/2/w.bin"
    linked.parent.mkdir(parents=True)
    os.link(Path(storage.run_directory(parent)) / "checkpoints/2/w.bin", linked)
    assert storage.usage_for(alice).checkpoints_bytes == 1010  # as on disk: one copy of the checkpoint
    assert storage.usage_for(alice).checkpoints_bytes == 1010  # the settled runs' cached sizes say the same
    assert token_client(alice).get("/api/account").json()["storage"]["checkpoints_bytes"] == 1010


def test_an_upload_that_a_concurrent_one_took_the_room_of_is_refused(alice, places, monkeypatch):  # noqa: F811
    """Both requests pass the first check (their usage read at the start); the one that stores second
    sees the first's dataset inside its transaction and is refused, storing nothing."""
    from experiments import dataset_files

    content = jsonl(40)
    assert 2 * len(content) > QUOTA_BYTES - 8000 > len(content)
    run_with_files(alice, {"checkpoints/2/w.bin": 8000})
    real_write_checked = dataset_files.write_checked

    def write_checked_while_another_upload_commits(*args, **kwargs):
        checked = real_write_checked(*args, **kwargs)
        Dataset.objects.create(
            owner=alice, name="other", path="users/other.jsonl", size_bytes=len(content), rows=40, sha256="0" * 64
        )  # the other upload, committed meanwhile
        return checked

    monkeypatch.setattr(dataset_files, "write_checked", write_checked_while_another_upload_commits)
    response = upload_request(token_client(alice), "mine", content)
    assert response.status_code == 413, response.content
    assert response.json()["error"].startswith("over your storage quota: you use ")
    assert list(Dataset.objects.values_list("name", flat=True)) == ["other"]
    assert not any(name.endswith((".jsonl", ".tmp")) for name in files_under(places / "datasets"))


@pytest.mark.parametrize("action, status", [("retry", "failed"), ("resume", "paused")])
def test_a_retry_of_a_run_whose_config_no_longer_validates_is_400_naming_the_field(
    alice, action, status, sent_messages
):
    run = make_run(alice, status=status, error="before")
    config = dict(run.config)
    config["model"] = {"path": "a-folder-deleted-since"}
    Run.objects.filter(pk=run.pk).update(config=config)
    response = token_client(alice).post(f"/api/runs/{run.pk}/{action}")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert list(errors) == ["model.path"] and "a-folder-deleted-since" in errors["model.path"]
    run.refresh_from_db()
    assert (run.status, run.attempt) == (status, 1) and sent_messages == []
    # a run whose status does not allow it is still 409
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    assert token_client(alice).post(f"/api/runs/{run.pk}/{action}").status_code == 409

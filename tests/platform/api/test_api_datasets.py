"""Datasets over the API (upload, list, detail, share, unshare, delete) and datasets named in configs:
resolution for the experiment's owner at create, update, launch, in Experiment.clean (the admin) and
in the worker; permissions (bob cannot see alice's unshared dataset: 404, nor use it: 400 naming the
field)."""

from __future__ import annotations

import os

import pytest
from api_testlib import token_client
from datasets_testlib import dataset_config, dataset_root, jsonl, upload  # noqa: F401 - fixture
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from experiments.dataset_models import Dataset
from experiments.models import Experiment, Run
from trainers.data.examples import MAX_EXAMPLE_NESTING, MAX_LINE_BYTES, read_jsonl

pytestmark = pytest.mark.django_db

LONG_LINE = b'{"prompt": "' + b"1" * MAX_LINE_BYTES + b'", "answer": "2"}'


def _upload(client, name, content: bytes, file_name: str = "x.jsonl", **extra):
    return client.post("/api/datasets", {"name": name, "file": SimpleUploadedFile(file_name, content), **extra})


def test_upload_answers_201_with_a_preview_and_stores_the_file(alice, dataset_root):
    response = _upload(token_client(alice), "arith", jsonl(8), description="sums")
    assert response.status_code == 201, response.content
    body = response.json()
    dataset = Dataset.objects.get(pk=body["id"])
    assert body["name"] == "arith" and body["reference"] == "arith"
    assert (body["rows"], body["size_bytes"]) == (8, len(jsonl(8)))
    assert body["preview"] == [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(5)]
    assert response["Location"] == f"/api/datasets/{dataset.pk}"
    assert dataset.absolute_path == str(dataset_root / "users" / str(alice.pk) / "arith.jsonl")
    assert len(read_jsonl(dataset.absolute_path)) == 8  # what was accepted, training reads
    assert [p.name for p in (dataset_root / "users" / str(alice.pk)).iterdir()] == ["arith.jsonl"]  # no temp file


@pytest.mark.parametrize(
    "content, message",
    [
        (jsonl(2) + b'{"prompt": "x", "answer": }\n', "x.jsonl:3: bad JSON: Expecting value (column 27)"),
        (jsonl(1) + b'{"answer": "1"}\n', "x.jsonl:2: missing 'prompt' (fields: ['answer'])"),
        (
            b'{"prompt": "\xff", "answer": "1"}\n',
            "x.jsonl:1: not UTF-8 text (invalid start byte at byte 13 of the line)",
        ),
        (b"", "x.jsonl: empty file, no examples"),
        (
            jsonl(1) + b"[" * 100_000 + b"]" * 100_000 + b"\n",
            f"x.jsonl:2: nested deeper than {MAX_EXAMPLE_NESTING} levels of lists and objects; an example is an object "
            "of text fields",
        ),
        (
            jsonl(2) + LONG_LINE + b"\n" + jsonl(1),
            f"x.jsonl:3: the line is {len(LONG_LINE)} bytes, over the limit of {MAX_LINE_BYTES} bytes a line; "
            "shorten it "
            "or split the example",
        ),
    ],
)
def test_a_bad_file_answers_400_naming_file_and_line(alice, dataset_root, content, message):
    response = _upload(token_client(alice), "bad", content)
    assert response.status_code == 400
    assert response.json()["errors"] == {"file": message}
    assert not Dataset.objects.exists() and not list(dataset_root.rglob("*.jsonl*"))


def test_many_bad_lines_show_20_then_a_count(alice, dataset_root):
    response = _upload(token_client(alice), "bad", b"[]\n" * 30)
    lines = response.json()["errors"]["file"].split("\n")
    assert len(lines) == 21 and lines[0] == "x.jsonl:1: expected a JSON object, got list" and lines[-1] == "and 10 more"


def test_too_big(alice, dataset_root, settings):
    settings.PLATFORM_DATASET_MAX_BYTES = 100
    response = _upload(token_client(alice), "big", jsonl(10))
    assert response.status_code == 400
    assert "larger than this server's limit of 100 bytes" in response.json()["errors"]["file"]
    settings.PLATFORM_DATASET_MAX_BYTES = 10
    huge = token_client(alice).post(
        "/api/datasets", b"x" * (2 * 1024 * 1024), content_type="multipart/form-data; boundary=zz"
    )
    assert huge.status_code == 413 and "limit of 10 bytes" in huge.json()["error"]


def test_names_taken_bad_or_missing(alice, bob, dataset_root):
    client = token_client(alice)
    assert _upload(client, "arith", jsonl()).status_code == 201
    taken = _upload(client, "arith", jsonl())
    assert taken.status_code == 409 and "you already have a dataset named 'arith'" in taken.json()["errors"]["name"]
    assert _upload(token_client(bob), "arith", jsonl()).status_code == 201  # unique per owner
    assert _upload(client, "../etc", jsonl()).json()["errors"]["name"].startswith("'../etc' is not a dataset name")
    assert client.post("/api/datasets", {"name": "x"}).json()["errors"] == {
        "file": "required: the JSONL file, as a multipart file field"
    }
    assert client.post("/api/datasets", {"name": "x"}, content_type="application/json").status_code == 400


def test_list_detail_and_sharing(alice, bob, dataset_root):
    mine = upload(alice, "arith", description="sums")
    upload(bob, "private")
    alice_api, bob_api = token_client(alice), token_client(bob)
    assert [d["name"] for d in alice_api.get("/api/datasets").json()["datasets"]] == ["arith"]
    assert bob_api.get(f"/api/datasets/{mine.pk}").status_code == 404
    assert bob_api.delete(f"/api/datasets/{mine.pk}").status_code == 404
    assert (
        bob_api.post(f"/api/datasets/{mine.pk}/share", {"users": ["bob"]}, content_type="application/json").status_code
        == 404
    )

    shared = alice_api.post(f"/api/datasets/{mine.pk}/share", {"users": ["bob"]}, content_type="application/json")
    assert shared.status_code == 200 and shared.json() == {"shared_with": ["bob"]}
    listed = bob_api.get("/api/datasets").json()["datasets"]
    assert [(d["reference"], d["shared_with"]) for d in listed] == [("alice/arith", None), ("private", [])]
    detail = bob_api.get(f"/api/datasets/{mine.pk}").json()
    assert detail["rows"] == 6 and detail["description"] == "sums" and len(detail["preview"]) == 5
    assert bob_api.delete(f"/api/datasets/{mine.pk}").status_code == 403
    assert (
        bob_api.post(
            f"/api/datasets/{mine.pk}/unshare", {"users": ["bob"]}, content_type="application/json"
        ).status_code
        == 403
    )

    unknown = alice_api.post(f"/api/datasets/{mine.pk}/share", {"users": ["nobody"]}, content_type="application/json")
    assert unknown.status_code == 400
    assert unknown.json()["errors"] == {
        "users": "cannot share with: nobody (no such user, or not one you can share with)"
    }
    assert (
        alice_api.post(f"/api/datasets/{mine.pk}/share", {"users": "bob"}, content_type="application/json").status_code
        == 400
    )
    unshared = alice_api.post(f"/api/datasets/{mine.pk}/unshare", {"users": ["bob"]}, content_type="application/json")
    assert unshared.json() == {"shared_with": []}
    assert bob_api.get(f"/api/datasets/{mine.pk}").status_code == 404


def test_share_answers_unknown_and_inactive_users_alike(alice, bob, dataset_root):
    """No username enumeration: an inactive user and a name nobody has get one and the same answer."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("sleeper", password="sleeper-pass-123", is_active=False)
    dataset = upload(alice, "arith")
    api = token_client(alice)
    for action in ("share", "unshare"):
        answers = {
            name: api.post(f"/api/datasets/{dataset.pk}/{action}", {"users": [name]}, content_type="application/json")
            for name in ("sleeper", "nobody")
        }
        for name, answer in answers.items():
            assert answer.status_code == 400
            assert answer.json() == {
                "errors": {"users": f"cannot share with: {name} (no such user, or not one you can share with)"}
            }
    both = api.post(
        f"/api/datasets/{dataset.pk}/share", {"users": ["bob", "sleeper", "nobody"]}, content_type="application/json"
    )
    assert both.json()["errors"]["users"].startswith("cannot share with: nobody, sleeper (")
    assert not dataset.shared_with.exists()  # nothing shared when one name is refused


def test_experiments_on_datasets_resolve_for_their_owner(alice, bob, dataset_root, tiny_config, sent_messages):
    mine = upload(alice, "arith", jsonl(12))
    upload(alice, "held-out", jsonl(3, start=50))
    alice_api, bob_api = token_client(alice), token_client(bob)
    config = dataset_config(tiny_config, train="arith", evaluation="held-out")
    created = alice_api.post(
        "/api/experiments", {"name": "on-arith", "config": config}, content_type="application/json"
    )
    assert created.status_code == 201, created.content
    experiment = Experiment.objects.get(pk=created.json()["id"])
    assert (experiment.config["data"]["train_dataset"], experiment.config["data"]["train_path"]) == ("arith", None)

    # bob: alice's unshared dataset is unknown to him, by either name
    for name in ("alice/arith", "arith"):
        refused = bob_api.post(
            "/api/experiments",
            {"name": "x", "config": dataset_config(tiny_config, train=name)},
            content_type="application/json",
        )
        assert refused.status_code == 400
        assert list(refused.json()["errors"]) == ["data.train_dataset"], refused.json()
    # shared: he names it owner/name; YAML works the same way
    mine.shared_with.add(bob)
    yaml_text = (
        "model: {preset: tiny}\ndata: {train_dataset: alice/arith, train_prompts: 8}\n"
        "rollout: {max_new_tokens: 4}\nrewards: [{name: exact_match}]\ntrain: {max_steps: 2}\n"
    )
    bobs = bob_api.post(
        "/api/experiments", {"name": "bob-on-alice", "config_yaml": yaml_text}, content_type="application/json"
    )
    assert bobs.status_code == 201, bobs.content

    # a path beside the name that names another file is refused; the same file is fine
    both = dict(config, data={**config["data"], "train_path": "users/999/x.jsonl"})
    patched = alice_api.patch(f"/api/experiments/{experiment.pk}", {"config": both}, content_type="application/json")
    assert patched.status_code == 400 and "data.train_dataset" in patched.json()["errors"]

    # launch validates again: once unshared, bob's experiment cannot launch
    mine.shared_with.remove(bob)
    launch = bob_api.post(f"/api/experiments/{bobs.json()['id']}/runs", {}, content_type="application/json")
    assert launch.status_code == 400 and list(launch.json()["errors"]) == ["data.train_dataset"]
    assert (
        alice_api.post(f"/api/experiments/{experiment.pk}/runs", {}, content_type="application/json").status_code == 201
    )


def test_delete_refused_while_named_then_removes_the_file(
    alice, bob, dataset_root, tiny_config, django_capture_on_commit_callbacks
):
    dataset = upload(alice, "arith")
    dataset.shared_with.add(bob)
    theirs = Experiment(owner=bob, name="bob-on-alice")
    theirs.set_config(dataset_config(tiny_config, train="alice/arith"), user=bob)
    api = token_client(alice)
    refused = api.delete(f"/api/datasets/{dataset.pk}")
    assert refused.status_code == 409 and "'bob-on-alice'" in refused.json()["error"]
    theirs.delete()
    path = dataset.absolute_path
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/datasets/{dataset.pk}").status_code == 204
    assert not Dataset.objects.exists() and not os.path.exists(path)


def test_experiment_clean_uses_the_owner_datasets(alice, bob, dataset_root, tiny_config):
    """The admin's add/change form validates through Experiment.clean, with the experiment's owner."""
    upload(alice, "arith")
    Experiment(owner=alice, name="ok", config=dataset_config(tiny_config)).full_clean()
    with pytest.raises(ValidationError) as info:
        Experiment(owner=bob, name="no", config=dataset_config(tiny_config)).full_clean()
    assert any(m.startswith("data.train_dataset: no dataset named 'arith'") for m in info.value.message_dict["config"])


def test_the_worker_validates_again_with_the_run_owner(alice, bob, dataset_root, tiny_config, restore_signals):
    from runner.attempt import run_attempt

    dataset = upload(bob, "theirs")
    dataset.shared_with.add(alice)
    experiment = Experiment(owner=alice, name="on-bobs")
    experiment.set_config(dataset_config(tiny_config, train="bob/theirs"), user=alice)
    run = Run.objects.create(experiment=experiment, config=experiment.config, status="running", attempt=1, max_steps=6)
    dataset.shared_with.remove(alice)
    assert run_attempt(run.pk, 1) == 1
    run.refresh_from_db()
    assert run.status == "failed" and "data.train_dataset: no dataset named 'bob/theirs'" in run.error

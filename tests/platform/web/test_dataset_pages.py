"""The dataset pages: /datasets/ (list, upload form with per-line problems), /datasets/<id>/ (preview,
sharing, delete), and the experiment form offering the user's datasets for data.train_dataset."""

from __future__ import annotations

import os

import pytest
from datasets_testlib import dataset_config, dataset_root, jsonl, upload  # noqa: F401 - fixture
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from web_testlib import form_data

from experiments.dataset_models import Dataset
from experiments.models import Experiment

pytestmark = pytest.mark.django_db


def _post_upload(client, name: str, content: bytes, file_name: str = "data.jsonl", **extra):
    return client.post(reverse("dataset-list"), {"name": name, "file": SimpleUploadedFile(file_name, content), **extra})


def test_upload_page_stores_the_file_and_opens_its_page(alice_client, alice, dataset_root):
    page = alice_client.get(reverse("dataset-list"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="dataset-upload-form"' in html and 'name="name"' in html and 'name="file"' in html
    assert ">Upload</button>" in html and 'id="nav-datasets"' in html

    response = _post_upload(alice_client, "arith", jsonl(7), description="sums")
    dataset = Dataset.objects.get(owner=alice, name="arith")
    assert response.status_code == 302 and response["Location"] == reverse("dataset-detail", args=[dataset.pk])
    assert (dataset.rows, dataset.size_bytes, dataset.description) == (7, len(jsonl(7)), "sums")
    assert (dataset_root / "users" / str(alice.pk) / "arith.jsonl").read_bytes() == jsonl(7)

    detail = alice_client.get(response["Location"]).content.decode()
    assert "data.train_dataset: arith" in detail
    assert detail.count("<tr>") == 1 + 5  # header + the first 5 rows
    assert "0+0=" in detail and "4+4=" in detail and "5+5=" not in detail


def test_upload_page_lists_each_bad_line(alice_client, alice, dataset_root):
    content = jsonl(2) + b'{"prompt": "x"\n' + b'{"answer": "1"}\n'
    response = _post_upload(alice_client, "bad", content, file_name="mine.jsonl")
    assert response.status_code == 400
    html = response.content.decode()
    assert "mine.jsonl:3: bad JSON: Expecting &#x27;,&#x27; delimiter" in html
    assert "mine.jsonl:4: missing &#x27;prompt&#x27;" in html
    assert "2 problem(s); nothing was stored" in html
    assert not Dataset.objects.exists() and not list(dataset_root.rglob("*.jsonl*"))


def test_upload_page_names_a_deep_or_long_line(alice_client, alice, dataset_root):
    from trainers.data.examples import MAX_EXAMPLE_NESTING, MAX_LINE_BYTES

    long_line = b'{"prompt": "' + b"1" * MAX_LINE_BYTES + b'", "answer": "2"}'
    content = jsonl(1) + b"[" * 100_000 + b"]" * 100_000 + b"\n" + long_line + b"\n"
    response = _post_upload(alice_client, "bad", content, file_name="mine.jsonl")
    assert response.status_code == 400
    html = response.content.decode()
    assert f"mine.jsonl:2: nested deeper than {MAX_EXAMPLE_NESTING} levels of lists and objects" in html
    assert f"mine.jsonl:3: the line is {len(long_line)} bytes, over the limit of {MAX_LINE_BYTES} bytes a line" in html
    assert not Dataset.objects.exists() and not list(dataset_root.rglob("*.jsonl*"))


def test_upload_page_refuses_a_taken_or_bad_name(alice_client, alice, dataset_root):
    upload(alice, "arith")
    taken = _post_upload(alice_client, "arith", jsonl())
    assert taken.status_code == 409 and "you already have a dataset named" in taken.content.decode()
    bad = _post_upload(alice_client, "../x", jsonl())
    assert bad.status_code == 400 and "is not a dataset name" in bad.content.decode()
    assert Dataset.objects.count() == 1


def test_list_shows_own_and_shared_not_others(client, alice, bob, dataset_root):
    upload(alice, "mine")
    shared = upload(bob, "theirs")
    upload(bob, "private")
    shared.shared_with.add(alice)
    client.force_login(alice)
    html = client.get(reverse("dataset-list")).content.decode()
    assert ">mine</a>" in html and ">bob/theirs</a>" in html and "private" not in html


def test_detail_sharing_and_delete_owner_only(client, alice, bob, dataset_root, django_capture_on_commit_callbacks):
    dataset = upload(alice, "arith")
    client.force_login(bob)
    assert client.get(reverse("dataset-detail", args=[dataset.pk])).status_code == 404
    client.force_login(alice)
    response = client.post(reverse("dataset-share", args=[dataset.pk]), {"users": "bob", "action": "share"})
    assert response.status_code == 302 and list(dataset.shared_with.all()) == [bob]
    unknown = client.post(reverse("dataset-share", args=[dataset.pk]), {"users": "bob, nobody", "action": "share"})
    assert unknown.status_code == 400
    assert "cannot share with: nobody (no such user, or not one you can share with)" in unknown.content.decode()

    client.force_login(bob)
    page = client.get(reverse("dataset-detail", args=[dataset.pk])).content.decode()
    assert "data.train_dataset: alice/arith" in page and 'id="dataset-delete"' not in page
    assert client.post(reverse("dataset-delete", args=[dataset.pk])).status_code == 403
    assert (
        client.post(reverse("dataset-share", args=[dataset.pk]), {"users": "bob", "action": "unshare"}).status_code
        == 403
    )

    client.force_login(alice)
    path = dataset.absolute_path
    with django_capture_on_commit_callbacks(execute=True):  # the file goes once the deletion commits
        response = client.post(reverse("dataset-delete", args=[dataset.pk]))
    assert response.status_code == 302 and not Dataset.objects.exists()
    assert not os.path.exists(path)


def test_delete_refused_while_an_experiment_names_it(alice_client, alice, dataset_root, tiny_config):
    dataset = upload(alice, "arith")
    experiment = Experiment(owner=alice, name="on-arith")
    experiment.set_config(dataset_config(tiny_config), user=alice)
    response = alice_client.post(reverse("dataset-delete", args=[dataset.pk]), follow=True)
    assert (
        "Cannot delete arith: experiments name this dataset in their config (&#x27;on-arith&#x27;)"
        in response.content.decode()
    )
    assert Dataset.objects.filter(pk=dataset.pk).exists()


def test_experiment_form_offers_datasets_and_creates_an_experiment_on_one(
    client, alice, bob, dataset_root, tiny_config
):
    upload(alice, "arith")
    theirs = upload(bob, "theirs")
    theirs.shared_with.add(alice)
    upload(bob, "private")
    client.force_login(alice)
    html = client.get(reverse("experiment-new")).content.decode()
    select = html[html.index('name="data__train_dataset"') :]
    select = select[: select.index("</select>")]
    assert '<option value="arith">' in select and '<option value="bob/theirs">' in select
    assert "private" not in select

    data = form_data(dataset_config(tiny_config), name="on-arith")
    response = client.post(reverse("experiment-new"), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    experiment = Experiment.objects.get(name="on-arith")
    assert experiment.config["data"]["train_dataset"] == "arith"
    assert experiment.config["data"]["train_path"] is None  # the name is stored, it resolves each time

    refused = client.post(reverse("experiment-new"), form_data(dataset_config(tiny_config, train="bob/private")))
    assert refused.status_code == 400
    assert "no dataset named &#x27;bob/private&#x27; that you may use" in refused.content.decode()


def test_admin_lists_datasets_by_the_visibility_rule(client, alice, bob, staff, dataset_root):
    from django.contrib.auth import get_user_model

    upload(alice, "arith")
    upload(bob, "private")
    client.force_login(staff)  # a superuser: every row
    html = client.get(reverse("admin:experiments_dataset_changelist")).content.decode()
    assert "arith" in html and "private" in html
    alice.is_staff = True
    alice.save()
    client.force_login(get_user_model().objects.get(pk=alice.pk))
    html = client.get(reverse("admin:experiments_dataset_changelist")).content.decode()
    assert "arith" in html and "private" not in html
    theirs = Dataset.objects.get(name="private")
    assert client.get(reverse("admin:experiments_dataset_change", args=[theirs.pk])).status_code in (302, 403, 404)


def test_share_form_answers_unknown_and_inactive_users_alike(client, alice, bob, dataset_root):
    """No username enumeration: a user who exists but is inactive gets the unknown name's message."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("sleeper", password="sleeper-pass-123", is_active=False)
    dataset = upload(alice, "arith")
    client.force_login(alice)
    pages = {
        name: client.post(reverse("dataset-share", args=[dataset.pk]), {"users": name, "action": "share"})
        for name in ("sleeper", "nobody")
    }
    for name, page in pages.items():
        html = page.content.decode()
        assert page.status_code == 400
        assert f"cannot share with: {name} (no such user, or not one you can share with)" in html
        assert "no such user:" not in html
    assert not dataset.shared_with.exists()

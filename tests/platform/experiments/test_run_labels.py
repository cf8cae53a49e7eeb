"""A run's tags and notes: experiments.run_labels' checks, PATCH /api/runs/<id> (validation naming
the field, who may label), and the run page's form."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_run, token_client
from django.urls import reverse

from experiments import run_labels
from experiments.models import Tag
from experiments.run_labels import LabelError


def _patch(user, run, body):
    return token_client(user).patch(f"/api/runs/{run.pk}", json.dumps(body), content_type="application/json")


def test_check_labels_accepts_and_normalises():
    assert run_labels.check_labels({"tags": ["b", "a.1", "b", "x:y/z_w-v"]}) == {"tags": ["b", "a.1", "x:y/z_w-v"]}
    assert run_labels.check_labels({"notes": None}) == {"notes": ""}
    assert run_labels.check_labels({"tags": [], "notes": "lr too high"}) == {"tags": [], "notes": "lr too high"}
    assert run_labels.split_tags(" a, b  c,,") == ["a", "b", "c"]


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"tags": "baseline"}, "tags", "a list of tag names"),
        ({"tags": ["ok", 3]}, "tags", "a list of tag names"),
        ({"tags": [""]}, "tags", "not a tag name"),
        ({"tags": ["has space"]}, "tags", "not a tag name"),
        ({"tags": ["x" * 65]}, "tags", "not a tag name"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags", "at most 20 tags"),
        ({"notes": 5}, "notes", "text"),
        ({"notes": "x" * 10_001}, "notes", "at most 10000 characters"),
        ({"notes": "\ud800"}, "notes", "lone surrogate"),
        ({"colour": "red"}, "colour", "unknown field"),
        ({}, "tags", "give tags"),
    ],
)
def test_check_labels_refuses_naming_the_field(body, field, words):
    with pytest.raises(LabelError) as caught:
        run_labels.check_labels(body)
    assert words in caught.value.errors[field]


def test_patch_sets_tags_and_notes(alice):
    run = make_run(alice)
    response = _patch(alice, run, {"tags": ["sweep:3", "baseline", "sweep:3"], "notes": "seed 2 diverged"})
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["baseline", "sweep:3"] and response.json()["notes"] == "seed 2 diverged"
    run.refresh_from_db()
    assert sorted(run.tags.values_list("name", flat=True)) == ["baseline", "sweep:3"] and run.notes == "seed 2 diverged"
    # tags replace; notes alone leave the tags; the shared Tag rows stay for other runs
    assert _patch(alice, run, {"tags": ["baseline"]}).json()["tags"] == ["baseline"]
    cleared = _patch(alice, run, {"notes": ""}).json()
    assert cleared["notes"] == "" and cleared["tags"] == ["baseline"]
    assert list(run.tags.values_list("name", flat=True)) == ["baseline"]
    assert set(Tag.objects.values_list("name", flat=True)) == {"baseline", "sweep:3"}
    assert token_client(alice).get(f"/api/runs/{run.pk}").json()["notes"] == ""


def test_patch_validation_is_a_400_naming_the_field(alice):
    run = make_run(alice)
    for body, field in (
        ({"tags": ["bad tag"]}, "tags"),
        ({"notes": "x" * 10_001}, "notes"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
    ):
        response = _patch(alice, run, body)
        assert response.status_code == 400 and field in response.json()["errors"], (body, response.content)
    response = token_client(alice).patch(f"/api/runs/{run.pk}", "[1]", content_type="application/json")
    assert response.status_code == 400
    assert not run.tags.exists() and Tag.objects.count() == 0


def test_only_who_may_steer_the_run_labels_it(alice, bob, viewer, changer):
    run = make_run(alice)
    assert _patch(bob, run, {"tags": ["mine"]}).status_code == 404  # cannot see it: like no run
    assert _patch(viewer, run, {"tags": ["mine"]}).status_code == 403  # may see, not steer
    assert not run.tags.exists()
    assert _patch(changer, run, {"tags": ["reviewed"]}).status_code == 200  # the change permission
    assert list(run.tags.values_list("name", flat=True)) == ["reviewed"]


def test_run_page_shows_labels_and_its_form_saves_them(client, alice, bob):
    run = make_run(alice)
    client.force_login(alice)
    url = reverse("run-labels", args=[run.pk])
    response = client.post(url, {"tags": "baseline, sweep:3  lr-high", "notes": "first try"})
    assert response.status_code == 302 and response["Location"] == reverse("run-detail", args=[run.pk])
    assert sorted(run.tags.values_list("name", flat=True)) == ["baseline", "lr-high", "sweep:3"]
    html = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="run-labels-form"' in html and "first try" in html
    assert f'href="{reverse("run-list")}?tag=sweep%3A3"' in html  # a tag links to the runs it marks
    refused = client.post(url, {"tags": "no!", "notes": ""}, follow=True)
    assert "not a tag name" in refused.content.decode()
    assert run.tags.count() == 3
    client.force_login(bob)
    assert client.post(url, {"tags": "bobs"}).status_code == 404
    assert run.tags.count() == 3

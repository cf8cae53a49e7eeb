"""Forking a run (runner.forks) through `POST /api/runs/<id>/fork` and the run page's Fork form,
without training: the parent's checkpoint is a directory of files made here. What is checked:
input validation (each refusal names its field), who may fork (someone else's run 404, one only
visible 403), the new run (queued, the parent's config, lineage fields, its task message), the
checkpoint copied where the trainer finds it (continued: the child's own checkpoints/N; fresh:
fork-start/N, handed to the trainer by runner.attempt), and the lineage shown on both pages.
Training from a fork is in test_run_fork_training.py."""

from __future__ import annotations

import json
import os

import pytest
from api_testlib import make_run, token_client
from django.contrib.auth.models import Permission
from django.urls import reverse

from experiments.models import Checkpoint, Run, RunEvent
from runner import forks

pytestmark = pytest.mark.django_db


@pytest.fixture
def artifacts(settings, tmp_path):
    settings.ARTIFACTS_DIR = tmp_path / "runs"
    return tmp_path / "runs"


def parent_with_checkpoints(user, artifacts, steps=(2, 4)) -> Run:
    """A succeeded run (max_steps 6) whose run directory holds checkpoints `steps` (fake files)."""
    run = make_run(user, status="succeeded", run_dir="run-parent", step=6)
    for step in steps:
        folder = artifacts / "run-parent" / "checkpoints" / str(step) / "params"
        folder.mkdir(parents=True)
        (folder / "weights").write_text(f"weights of step {step}")
        Checkpoint.objects.create(
            run=run,
            step=step,
            path=f"run-parent/checkpoints/{step}",
            size_bytes=100 + step,
            metrics={"reward/mean": step / 10},
        )
    (artifacts / "run-parent" / "checkpoints" / "4.orbax-checkpoint-tmp-7").mkdir()  # an unfinished save
    return run


def post_fork(user, run: Run, body: dict):
    return token_client(user).post(f"/api/runs/{run.pk}/fork", json.dumps(body), content_type="application/json")


def test_parse_fork_input_defaults_and_form_strings():
    assert forks.parse_fork_input({"step": 3}) == forks.ForkRequest(
        step=3, optimizer="fresh", max_steps=None, queue=None
    )
    assert forks.parse_fork_input(
        {"step": "3", "optimizer": "continued", "max_steps": "9", "queue": "gpu"}
    ) == forks.ForkRequest(step=3, optimizer="continued", max_steps=9, queue="gpu")
    assert forks.parse_fork_input({"step": "0", "max_steps": " ", "optimizer": ""}) == forks.ForkRequest(step=0)


@pytest.mark.parametrize(
    "body, field, message",
    [
        # the body's shape (api.checkpoint_shapes.ForkInput) answers first, then runner.forks
        ({}, "step", "required"),
        ({"step": "two"}, "step", "must be a whole number, got 'two'"),
        ({"step": -1}, "step", "must be at least 0, got -1"),
        ({"step": True}, "step", "must be a whole number, got True"),
        ({"step": 2**31}, "step", f"must be less than {2**31}, got {2**31}"),
        ({"step": "\u00b2"}, "step", "must be a whole number, got '\u00b2'"),
        ({"step": 2, "optimizer": "warm"}, "optimizer", "must be 'fresh' or 'continued', got 'warm'"),
        ({"step": 2, "max_steps": 0}, "max_steps", "must be at least 1, got 0"),
        ({"step": 2, "queue": "no spaces"}, "queue", "must match ^[A-Za-z0-9._-]{1,64}$, got 'no spaces'"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(alice, artifacts, body, field, message):
    parent = parent_with_checkpoints(alice, artifacts)
    response = post_fork(alice, parent, body)
    assert response.status_code == 400
    assert response.json() == {"errors": {field: message}}
    assert not Run.objects.filter(forked_from=parent).exists()


def test_a_step_without_a_checkpoint_is_a_400_listing_the_steps(alice, artifacts):
    parent = parent_with_checkpoints(alice, artifacts)
    response = post_fork(alice, parent, {"step": 3})
    assert response.status_code == 400
    assert response.json() == {"errors": {"step": f"run {parent.pk} has no checkpoint at step 3; it has steps 2, 4"}}
    bare = make_run(alice, status="running", run_dir="run-bare")
    response = post_fork(alice, bare, {"step": 0})
    assert response.json() == {
        "errors": {"step": f"run {bare.pk} has no checkpoint at step 0; it has no checkpoint yet"}
    }
    assert not (artifacts / "run-bare").exists()


def test_a_continued_fork_needs_steps_left(alice, artifacts):
    parent = parent_with_checkpoints(alice, artifacts, steps=(6,))
    response = post_fork(alice, parent, {"step": 6, "optimizer": "continued"})
    assert response.status_code == 400
    assert response.json()["errors"]["max_steps"].startswith(
        "a continued fork from step 6 trains until train.max_steps = 6: nothing is left; give max_steps above 6"
    )


def test_only_who_may_steer_the_parent_forks_it(alice, bob, artifacts):
    parent = parent_with_checkpoints(alice, artifacts)
    assert post_fork(bob, parent, {"step": 2}).status_code == 404
    bob.user_permissions.add(Permission.objects.get(codename="view_run"))
    response = post_fork(bob, parent, {"step": 2})
    assert response.status_code == 403
    assert not Run.objects.filter(forked_from=parent).exists()


def test_a_fresh_fork_is_a_queued_run_with_the_checkpoint_to_start_from(
    alice, artifacts, sent_messages, django_capture_on_commit_callbacks
):
    parent = parent_with_checkpoints(alice, artifacts)
    with django_capture_on_commit_callbacks(execute=True):
        response = post_fork(alice, parent, {"step": 2})
    assert response.status_code == 201, response.content
    child = Run.objects.get(pk=response.json()["id"])
    assert response.json() == {
        "id": child.pk,
        "status": "queued",
        "queue": parent.queue,
        "forked_from": parent.pk,
        "forked_from_step": 2,
        "fork_optimizer": "fresh",
    }
    assert response["Location"] == f"/api/runs/{child.pk}"
    assert (child.forked_from, child.forked_from_step, child.fork_optimizer) == (parent, 2, "fresh")
    assert (child.experiment, child.config, child.max_steps, child.step) == (parent.experiment, parent.config, 6, 0)
    assert sent_messages == [(child.pk, 1, child.queue)]
    # the checkpoint's files, beside the child's own checkpoints (which stay empty: it starts at step 0)
    child_dir = artifacts / child.run_dir
    start = child_dir / "fork-start" / "2"
    assert forks.start_checkpoint(child, str(child_dir)) == str(start)
    assert (start / "params" / "weights").read_text() == "weights of step 2"
    assert not (child_dir / "checkpoints").exists() and not child.checkpoints.exists()
    assert forks.start_checkpoint(parent, str(artifacts / "run-parent")) is None
    events = list(RunEvent.objects.filter(run__in=[parent, child]).values_list("run_id", "message"))
    assert (child.pk, f"forked from run {parent.pk}, step 2 (fresh optimizer)") in events
    assert (parent.pk, f"forked at step 2 into run {child.pk} (fresh optimizer)") in events
    # the API's run payloads carry the lineage
    body = token_client(alice).get(f"/api/runs/{child.pk}").json()
    assert (body["forked_from"], body["forked_from_step"], body["fork_optimizer"]) == (parent.pk, 2, "fresh")
    body = token_client(alice).get(f"/api/runs/{parent.pk}").json()
    assert (body["forked_from"], body["forked_from_step"], body["fork_optimizer"]) == (None, None, None)


def test_a_continued_fork_owns_a_copy_of_the_checkpoint_and_may_train_longer(alice, artifacts, sent_messages):
    parent = parent_with_checkpoints(alice, artifacts)
    response = post_fork(alice, parent, {"step": 4, "optimizer": "continued", "max_steps": 10})
    assert response.status_code == 201, response.content
    child = Run.objects.get(pk=response.json()["id"])
    assert (child.fork_optimizer, child.step, child.max_steps) == ("continued", 4, 10)
    assert child.config["train"]["max_steps"] == 10 and parent.config["train"]["max_steps"] == 6
    assert {k: v for k, v in child.config.items() if k != "train"} == {
        k: v for k, v in parent.config.items() if k != "train"
    }
    copied = artifacts / child.run_dir / "checkpoints" / "4" / "params" / "weights"
    assert copied.read_text() == "weights of step 4"
    assert forks.start_checkpoint(child, str(artifacts / child.run_dir)) is None  # it resumes instead
    # a copy that outlives the parent's: the trainer's retention deleting the parent's leaves it
    (artifacts / "run-parent" / "checkpoints" / "4" / "params" / "weights").unlink()
    assert copied.read_text() == "weights of step 4"
    row = child.checkpoints.get()
    assert (row.step, row.path, row.size_bytes, row.metrics) == (
        4,
        f"{child.run_dir}/checkpoints/4",
        104,
        {"reward/mean": 0.4},
    )
    assert RunEvent.objects.filter(
        run=child, message=f"forked from run {parent.pk}, step 4 (continued optimizer); train.max_steps 6 -> 10"
    ).exists()


def test_a_refused_launch_leaves_no_run_and_no_files(alice, artifacts, sent_messages, settings):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 0
    parent = parent_with_checkpoints(alice, artifacts)
    response = post_fork(alice, parent, {"step": 2})
    assert response.status_code == 429, response.content
    assert not Run.objects.filter(forked_from=parent).exists() and sent_messages == []
    assert sorted(os.listdir(artifacts)) == ["run-parent"]


def test_the_pages_show_the_fork_form_and_the_lineage_both_ways(alice, alice_client, artifacts, sent_messages):
    parent = parent_with_checkpoints(alice, artifacts)
    html = alice_client.get(reverse("run-detail", args=[parent.pk])).content.decode()
    assert 'id="fork-form"' in html and '<option value="4">4</option>' in html
    assert 'id="forked-from"' not in html and 'id="fork-list"' not in html
    assert "checkpoint-download" not in html  # a toy preset: forkable, not downloadable as a HF folder
    response = alice_client.post(reverse("run-fork", args=[parent.pk]), {"step": "4", "optimizer": "fresh"})
    child = Run.objects.get(forked_from=parent)
    assert response.status_code == 302 and response["Location"] == reverse("run-detail", args=[child.pk])
    html = alice_client.get(response["Location"]).content.decode()
    assert f"Run {child.pk} forked from run {parent.pk}, step 4 (fresh optimizer); it is queued." in html
    link = f'<a href="/runs/{parent.pk}/" id="forked-from-link">run {parent.pk}</a>'
    assert f"Forked from\n    {link},\n    step 4 (fresh optimizer: the checkpoint's weights" in html
    html = alice_client.get(reverse("run-detail", args=[parent.pk])).content.decode()
    link = f'<a href="/runs/{child.pk}/" data-fork-id="{child.pk}">run {child.pk}</a>'
    assert f"{link}\n      from step 4 (fresh optimizer)" in html
    # refused: back to the parent, saying why
    response = alice_client.post(reverse("run-fork", args=[parent.pk]), {"step": "3"}, follow=True)
    assert (
        f"Cannot fork run {parent.pk}: step: run {parent.pk} has no checkpoint at step 3; it has steps 2, 4"
        in response.content.decode()
    )
    assert Run.objects.filter(forked_from=parent).count() == 1


def test_someone_elses_run_page_fork_is_a_404(alice, bob, client, artifacts):
    parent = parent_with_checkpoints(alice, artifacts)
    client.force_login(bob)
    assert client.post(reverse("run-fork", args=[parent.pk]), {"step": "2"}).status_code == 404
    assert not Run.objects.filter(forked_from=parent).exists()

"""The admin: every page renders for staff, the run actions go through experiments.models (and
say how many runs changed), workers show what they run, tokens are generated."""

from __future__ import annotations

import datetime
import json
import re

import pytest
from api_testlib import add_points, make_run  # noqa: F401 (fixtures)
from django.urls import reverse
from django.utils import timezone

from api.models import ApiToken
from experiments.models import Checkpoint, RolloutSample, Run
from runner.models import Worker


@pytest.fixture
def admin_client(client, staff):
    client.force_login(staff)
    return client


@pytest.fixture
def populated(alice, bob):
    run = make_run(alice, status="running", worker_host="w1@box", step=2)
    add_points(run, {"reward/mean": [(0, 0.1), (1, 0.2)]})
    RolloutSample.objects.create(run=run, step=1, prompt="1+1=", completion="2", answer="2", reward=1.0)
    Checkpoint.objects.create(run=run, step=2, path="run-1/checkpoints/2", size_bytes=10)
    run.add_event("hello")
    make_run(bob, status="failed")
    Worker.objects.create(hostname="w1@box", pid=123, queues="runs", concurrency=1)
    Worker.objects.create(hostname="old@box", heartbeat_at=timezone.now() - datetime.timedelta(hours=1))
    ApiToken.for_user(alice)
    return run


MODELS = [
    "experiments.experiment",
    "experiments.run",
    "experiments.metricpoint",
    "experiments.rolloutsample",
    "experiments.checkpoint",
    "experiments.runevent",
    "runner.worker",
    "api.apitoken",
]


@pytest.mark.parametrize("model", MODELS)
def test_changelists_and_change_pages_render(admin_client, populated, model):
    app, name = model.split(".")
    response = admin_client.get(reverse(f"admin:{app}_{name}_changelist"))
    assert response.status_code == 200, model
    from django.apps import apps

    obj = apps.get_model(app, name).objects.first()
    response = admin_client.get(reverse(f"admin:{app}_{name}_change", args=[obj.pk]))
    assert response.status_code == 200, model


def test_run_list_columns_and_filters(admin_client, populated, alice):
    url = reverse("admin:experiments_run_changelist")
    page = admin_client.get(url).content.decode()
    assert "w1@box" in page and "2/6" in page and "alice" in page
    assert admin_client.get(url, {"status__exact": "failed"}).context["cl"].result_count == 1
    assert admin_client.get(url, {"experiment__owner__id__exact": alice.pk}).context["cl"].result_count == 1
    change = admin_client.get(reverse("admin:experiments_run_change", args=[populated.pk])).content.decode()
    assert "hello" in change and f"run__id__exact={populated.pk}" in change
    points = admin_client.get(reverse("admin:experiments_metricpoint_changelist"), {"run__id__exact": populated.pk})
    assert points.status_code == 200 and points.context["cl"].result_count == 2


def test_run_actions_report_how_many_changed(admin_client, alice, sent_messages):  # noqa: F811
    running = make_run(alice, status="running")
    queued = make_run(alice, status="queued")
    done = make_run(alice, status="succeeded")
    url = reverse("admin:experiments_run_changelist")

    def act(action, runs):
        response = admin_client.post(url, {"action": action, "_selected_action": [r.pk for r in runs]}, follow=True)
        assert response.status_code == 200
        return [str(m) for m in response.context["messages"]]

    assert act("pause_runs", [running, queued]) == [
        "Pause: 1 of 2 run(s) pausing; the others were in a status that does not allow it"
    ]
    assert Run.objects.get(pk=running.pk).status == "pausing" and Run.objects.get(pk=queued.pk).status == "queued"
    assert "2 of 3" in act("cancel_runs", [queued, done, running])[0]  # succeeded stays
    assert Run.objects.get(pk=queued.pk).status == "cancelled" and Run.objects.get(pk=running.pk).status == "cancelling"
    assert (
        "2 of 2"
        in act(
            "requeue_runs",
            [queued, Run.objects.create(experiment=done.experiment, config=done.config, status="failed")],
        )[0]
    )
    assert Run.objects.get(pk=queued.pk).status == "queued"
    Run.objects.filter(pk=done.pk).update(status="paused")
    assert "1 of 1" in act("resume_runs", [done])[0]
    assert Run.objects.get(pk=done.pk).status == "queued"


def test_workers_page_shows_liveness_and_current_runs(admin_client, populated):
    url = reverse("admin:runner_worker_changelist")
    page = admin_client.get(url).content.decode()
    assert "w1@box" in page and f"run {populated.pk}" in page and "old@box" in page
    assert [w.hostname for w in admin_client.get(url, {"alive": "yes"}).context["cl"].result_list] == ["w1@box"]
    assert [w.hostname for w in admin_client.get(url, {"alive": "no"}).context["cl"].result_list] == ["old@box"]


def test_api_token_admin_generates_and_regenerates(admin_client, bob):
    """The admin issues a key and shows it once in a message; only its hash is stored."""
    response = admin_client.post(reverse("admin:api_apitoken_add"), {"user": bob.pk, "name": "ci"}, follow=True)
    assert response.status_code == 200
    token = ApiToken.objects.get(user=bob)
    key = re.search(r"The new key for bob: ([0-9a-f]{40})", response.content.decode()).group(1)
    assert ApiToken.find(key) == token and token.prefix == key[:8]
    response = admin_client.post(
        reverse("admin:api_apitoken_changelist"), {"action": "regenerate", "_selected_action": [token.pk]}, follow=True
    )
    new_key = re.search(r"token ci: ([0-9a-f]{40})", response.content.decode()).group(1)
    assert new_key != key and ApiToken.find(new_key) == token and ApiToken.find(key) is None


def test_non_staff_cannot_reach_the_admin(client, alice):
    client.force_login(alice)
    assert client.get(reverse("admin:experiments_run_changelist")).status_code == 302


@pytest.mark.parametrize(
    "model, query",
    [
        ("run", "abc"),
        ("run", "alice"),
        ("experiment", "exp"),
        ("runevent", "hello"),
        ("metricpoint", "reward/mean"),
        ("runner.worker", "w1"),
    ],
)
def test_searches(admin_client, populated, model, query):
    app, _, name = model.rpartition(".")
    response = admin_client.get(reverse(f"admin:{app or 'experiments'}_{name}_changelist"), {"q": query})
    assert response.status_code == 200


# --- the same permission rule as the web pages and the API ------------------------------------


def test_staff_without_permissions_sees_and_steers_only_their_own(client, plain_staff, alice, sent_messages):  # noqa: F811
    theirs = make_run(alice, status="running")
    own = make_run(plain_staff, status="running")
    client.force_login(plain_staff)
    url = reverse("admin:experiments_run_changelist")
    response = client.get(url)
    assert response.status_code == 200
    assert [r.pk for r in response.context["cl"].result_list] == [own.pk]
    listed = client.get(reverse("admin:experiments_experiment_changelist")).context["cl"].result_list
    assert [e.pk for e in listed] == [own.experiment_id]
    assert client.get(reverse("admin:experiments_run_change", args=[theirs.pk])).status_code != 200
    assert client.get(reverse("admin:experiments_experiment_change", args=[theirs.experiment_id])).status_code != 200
    client.post(url, {"action": "pause_runs", "_selected_action": [theirs.pk, own.pk]})
    assert Run.objects.get(pk=theirs.pk).status == "running"
    assert Run.objects.get(pk=own.pk).status == "pausing"


def test_view_permission_cannot_steer_or_edit_in_the_admin(client, viewer, alice, sent_messages):  # noqa: F811
    theirs = make_run(alice, status="running")
    client.force_login(viewer)
    url = reverse("admin:experiments_run_changelist")
    assert [r.pk for r in client.get(url).context["cl"].result_list] == [theirs.pk]
    client.post(url, {"action": "pause_runs", "_selected_action": [theirs.pk]})
    client.post(url, {"action": "cancel_runs", "_selected_action": [theirs.pk]})
    assert Run.objects.get(pk=theirs.pk).status == "running"
    change = reverse("admin:experiments_experiment_change", args=[theirs.experiment_id])
    assert client.get(change).status_code == 200  # read-only view
    response = client.post(
        change, {"owner": viewer.pk, "name": "taken over", "description": "", "config": json.dumps(theirs.config)}
    )
    assert response.status_code == 403
    assert Run.objects.get(pk=theirs.pk).experiment.name == "exp"


def test_change_permission_steers_others_runs_in_the_admin(client, changer, alice, sent_messages):  # noqa: F811
    theirs = make_run(alice, status="running")
    client.force_login(changer)
    client.post(reverse("admin:experiments_run_changelist"), {"action": "pause_runs", "_selected_action": [theirs.pk]})
    assert Run.objects.get(pk=theirs.pk).status == "pausing"

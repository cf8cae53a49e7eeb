"""Runs in the web UI: the list, the live dashboard's page, and the controls."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    make_experiment,
    make_run,
)

from experiments.models import Checkpoint, Run
from trainers.config.metric_names import METRIC_NAMES
from web.dashboard import chart_panels

pytestmark = pytest.mark.django_db


def test_run_list_shows_visible_runs_with_status_and_progress(client, alice, bob, staff):
    mine = make_run(make_experiment(alice, "alice-exp"), status="running", step=3, latest_reward=0.25)
    theirs = make_run(make_experiment(bob, "bob-exp"))
    client.force_login(alice)
    response = client.get(reverse("run-list"))
    html = response.content.decode()
    assert f'data-run-id="{mine.pk}"' in html and f'data-run-id="{theirs.pk}"' not in html
    assert '<span class="badge status-running" data-status="running">running</span>' in html
    assert 'style="width: 50.0%"' in html and "3/6" in html and "0.25" in html
    assert list(client.get(reverse("run-list"), {"status": "queued"}).context["page"].object_list) == []
    assert client.get(reverse("run-list"), {"status": "bogus"}).status_code == 400
    assert client.get(reverse("run-list"), {"experiment": "x"}).status_code == 400
    client.force_login(staff)
    html = client.get(reverse("run-list")).content.decode()
    assert f'data-run-id="{mine.pk}"' in html and f'data-run-id="{theirs.pk}"' in html


def test_run_page_has_the_dashboard_elements(alice_client, alice):
    run = make_run(make_experiment(alice), status="running")
    response = alice_client.get(reverse("run-detail", args=[run.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-api="/api/runs/{run.pk}"' in html
    for element in (
        "run-status",
        "run-step",
        "run-max-steps",
        "run-progress",
        "run-reward",
        "run-attempt",
        "run-restarts",
        "run-worker",
        "run-duration",
        "run-error",
        "charts",
        "sample-step",
        "samples-table",
        "checkpoints-table",
        "run-log",
        "run-config",
    ):
        assert f'id="{element}"' in html, element
    assert '<div class="chart" id="chart-reward/mean" data-metric="reward/mean" data-points="0"></div>' in html
    assert "/static/plotly/plotly.min.js" in html and "/static/web/run.js" in html
    # every metric the trainer reports has a chart (reward/std as the band around reward/mean)
    charted = {m for p in chart_panels() for m in p["metrics"] + ([p["band"]] if p["band"] else [])}
    assert charted == set(METRIC_NAMES)
    # controls by status: a running run can be paused or cancelled, not resumed or retried
    assert 'id="run-pause"' in html and 'id="run-cancel"' in html
    tags = {
        name: re.search(rf'<form[^>]*data-control="{name}"[^>]*>', html).group(0)
        for name in ("cancel", "pause", "resume", "retry")
    }
    assert {name: " hidden" not in tag for name, tag in tags.items()} == {
        "cancel": True,
        "pause": True,
        "resume": False,
        "retry": False,
    }
    assert html.count("csrfmiddlewaretoken") >= 4


def test_static_files_are_served(alice_client):
    response = alice_client.get("/static/web/run.js")
    assert response.status_code == 200
    response = alice_client.get("/static/plotly/plotly.min.js")
    assert response.status_code == 200


@pytest.mark.parametrize(
    "status, action, expected",
    [
        ("running", "pause", "pausing"),
        ("running", "cancel", "cancelling"),
        ("queued", "cancel", "cancelled"),
        ("paused", "resume", "queued"),
        ("failed", "retry", "queued"),
        ("cancelled", "retry", "queued"),
    ],
)
def test_controls_change_status(alice_client, alice, sent_messages, status, action, expected):
    run = make_run(make_experiment(alice), status=status)
    response = alice_client.post(reverse("run-control", args=[run.pk, action]), {"confirm": "yes"})
    assert response.status_code == 302 and response["Location"] == reverse("run-detail", args=[run.pk])
    assert Run.objects.get(pk=run.pk).status == expected


@pytest.mark.parametrize("status", ["running", "paused"])
def test_cancel_asks_first_and_names_the_checkpoint_it_keeps(alice_client, alice, status):
    """Cancel's button leads to a confirmation page (the run is untouched); its own button posts
    confirm=yes and cancels. The page names the newest checkpoint, which the cancelled run keeps."""
    run = make_run(make_experiment(alice), status=status, step=7)
    for step in (4, 6):
        Checkpoint.objects.create(run=run, step=step, path=f"run-{run.pk}/checkpoints/{step}")
    url = reverse("run-control", args=[run.pk, "cancel"])
    page = alice_client.post(url)
    assert page.status_code == 200 and Run.objects.get(pk=run.pk).status == status
    html = page.content.decode()
    assert f'<form method="post" action="{url}" class="inline" id="run-cancel-confirm-form">' in html
    assert '<input type="hidden" name="confirm" value="yes">' in html and 'id="run-cancel-keep"' in html
    kept = " ".join(re.search(r'<p id="run-cancel-kept">(.*?)</p>', html, re.S).group(1).split())
    assert "the newest is <b>step 6</b>" in kept and "a retry resumes from step 6" in kept
    response = alice_client.post(url, {"confirm": "yes"})
    assert response.status_code == 302
    assert Run.objects.get(pk=run.pk).status == {"running": "cancelling", "paused": "cancelled"}[status]
    assert Checkpoint.objects.filter(run=run).count() == 2


def test_refused_control_leaves_the_run_and_says_so(alice_client, alice, sent_messages):
    run = make_run(make_experiment(alice), status="succeeded")
    response = alice_client.post(reverse("run-control", args=[run.pk, "pause"]), follow=True)
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    assert "cannot pause" in response.content.decode()
    assert alice_client.post(reverse("run-control", args=[run.pk, "explode"])).status_code == 404
    assert alice_client.get(reverse("run-control", args=[run.pk, "pause"])).status_code == 405


def test_the_mismatch_figures_have_their_charts():
    """The sampler/trainer gap: mean and max on one chart, the KL on its own, both every step; the
    corrected fraction only once a run with grpo.mismatch.correction reports it."""
    panels = {p["metric"]: p for p in chart_panels()}
    diff = panels["mismatch/logprob_diff_mean"]
    assert diff["metrics"] == ["mismatch/logprob_diff_mean", "mismatch/logprob_diff_max"]
    assert diff["title"] == "mismatch/logprob_diff_*" and not diff["lazy"]
    assert panels["mismatch/kl"]["metrics"] == ["mismatch/kl"] and not panels["mismatch/kl"]["lazy"]
    assert panels["mismatch/corrected_fraction"]["lazy"]

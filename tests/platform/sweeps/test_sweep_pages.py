"""The sweep pages without a browser: the form from the experiment page (errors named by field,
nothing started), a started sweep's page (trials table, compare checkboxes, the plots' JSON), the
list and the nav link, Cancel, and another user's sweep answering 404."""

from __future__ import annotations

import json
import re

import pytest
from api_testlib import make_experiment

from experiments.models import Run, RunStatus
from sweeps.models import Sweep

LR = "optimizer.learning_rate"
pytestmark = pytest.mark.django_db


def form(**fields) -> dict:
    return {
        "name": "lr-web",
        "space": json.dumps({LR: {"type": "categorical", "choices": [0.001, 0.002, 0.003]}}),
        "metric": "reward/mean",
        "direction": "maximize",
        "sampler": "grid",
        "pruner": "median",
        "max_trials": "3",
        "max_concurrent_trials": "2",
        "seed": "0",
        "pruner_startup_trials": "2",
        "pruner_warmup_steps": "1",
        **fields,
    }


def test_the_experiment_page_links_the_form_and_the_nav_links_the_list(alice_client, alice):
    experiment = make_experiment(alice)
    page = alice_client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert f'href="/experiments/{experiment.pk}/sweeps/new/" id="sweep-experiment"' in page
    assert 'href="/sweeps/" id="nav-sweeps"' in page
    form_page = alice_client.get(f"/experiments/{experiment.pk}/sweeps/new/")
    assert form_page.status_code == 200 and b'id="sweep-form"' in form_page.content


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"space": json.dumps({"optimizer.lr": {"type": "float", "low": 0.1, "high": 0.2}})}, "space.optimizer.lr"),
        ({"space": "{not json"}, "space"),
        ({"max_trials": "many"}, "max_trials"),
        ({"metric": "nope"}, "metric"),
    ],
)
def test_a_bad_form_is_shown_again_naming_the_field(alice_client, alice, sent_messages, fields, named):
    experiment = make_experiment(alice)
    response = alice_client.post(f"/experiments/{experiment.pk}/sweeps/new/", form(**fields))
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="sweep-errors"' in page and f"<code>{named}</code>" in page
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_a_started_sweep_has_its_page_the_list_and_cancel(alice_client, alice, sent_messages):
    experiment = make_experiment(alice)
    response = alice_client.post(f"/experiments/{experiment.pk}/sweeps/new/", form())
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/sweeps/{sweep.pk}/"
    page = alice_client.get(f"/sweeps/{sweep.pk}/").content.decode()
    runs = list(Run.objects.order_by("pk"))
    assert len(runs) == 2
    for number, run in enumerate(runs):
        assert f'<tr data-trial="{number}" data-status="queued">' in page
        assert f'<input type="checkbox" name="run" value="{run.pk}"' in page
        assert f'<a href="/runs/{run.pk}/">lr-web #{number}</a>' in page
    assert 'action="/runs/compare/" id="sweep-compare-form"' in page
    data = json.loads(page.split('<script id="sweep-data" type="application/json">')[1].split("</script>")[0])
    assert data["metric"] == "reward/mean" and [t["params"][LR] for t in data["trials"]] == [0.001, 0.002]
    assert '<script src="/static/web/sweep.js">' in page and "<script>" not in page  # no inline script

    experiment_page = alice_client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert f'<a href="/sweeps/{sweep.pk}/">lr-web</a>' in experiment_page.split('id="experiment-sweeps"')[1]
    listing = alice_client.get("/sweeps/").content.decode()
    assert f'<a href="/sweeps/{sweep.pk}/">lr-web</a>' in listing and "2/3" in listing

    response = alice_client.post(f"/sweeps/{sweep.pk}/cancel/")
    assert response.status_code == 302
    assert Sweep.objects.get().status == "cancelled"
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.CANCELLED}
    assert 'id="sweep-cancel"' not in alice_client.get(f"/sweeps/{sweep.pk}/").content.decode()


def test_another_users_sweep_is_404(client, alice, bob, sent_messages):
    experiment = make_experiment(alice)
    client.force_login(alice)
    client.post(f"/experiments/{experiment.pk}/sweeps/new/", form())
    sweep = Sweep.objects.get()
    client.force_login(bob)
    assert client.get(f"/sweeps/{sweep.pk}/").status_code == 404
    assert client.post(f"/sweeps/{sweep.pk}/cancel/").status_code == 404
    assert client.get(f"/experiments/{experiment.pk}/sweeps/new/").status_code == 404
    assert b"lr-web" not in client.get("/sweeps/").content
    assert Sweep.objects.get().status == "running"


def test_the_admin_lists_sweeps_with_their_trials_and_cancels_them(client, staff, alice, sent_messages):
    experiment = make_experiment(alice)
    client.force_login(alice)
    client.post(f"/experiments/{experiment.pk}/sweeps/new/", form())
    sweep = Sweep.objects.get()
    client.force_login(staff)
    listing = client.get("/admin/sweeps/sweep/").content.decode()
    assert "lr-web" in listing and "2 / 3" in listing
    page = client.get(f"/admin/sweeps/sweep/{sweep.pk}/change/").content.decode()
    run = Run.objects.order_by("pk").first()
    assert f'href="/admin/experiments/run/{run.pk}/change/">lr-web #0</a>' in page
    response = client.post("/admin/sweeps/sweep/", {"action": "cancel", "_selected_action": [sweep.pk]})
    assert response.status_code == 302
    assert Sweep.objects.get().status == "cancelled" and Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


@pytest.mark.parametrize(
    "experiment_name, suggested",
    [
        ("demo: arithmetic", "demo-arithmetic-sweep"),
        ("demo: SmolLM2 arithmetic", "demo-smollm2-arithmetic-sweep"),
        ("Ünïcode  lr test", "unicode-lr-test-sweep"),
        ("実験", "sweep"),
    ],
)
def test_the_suggested_name_is_a_clean_slug(alice_client, alice, experiment_name, suggested):
    experiment = make_experiment(alice, name=experiment_name)
    page = alice_client.get(f"/experiments/{experiment.pk}/sweeps/new/").content.decode()
    assert f'id="sweep-name" value="{suggested}"' in page


def test_each_label_sits_with_its_own_field(alice_client, alice):
    """A label is on its own line before its field: none follows a select on the select's line (the
    "trials" label used to sit beside the sampler's select, its input on the next line)."""
    experiment = make_experiment(alice)
    page = alice_client.get(f"/experiments/{experiment.pk}/sweeps/new/").content.decode()
    form_html = page.split('id="sweep-form"', 1)[1].split("</form>", 1)[0]
    assert re.search(r"</select></label>\s*<label>", form_html) is None
    assert '<label>trials in all <input name="max_trials"' in form_html
    assert '<label>trials at once <input name="max_concurrent_trials"' in form_html
    assert '<label>sampler seed <input name="seed"' in form_html

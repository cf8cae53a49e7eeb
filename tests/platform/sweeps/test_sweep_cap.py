"""A per-user cap on running sweeps (PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER): one more is
refused with 429 and a message naming the limit, through the API and the page; the account page and
GET /api/account show the limit like the others."""

from __future__ import annotations

import json

from api_testlib import make_experiment, token_client
from django.urls import reverse

from sweeps import services
from sweeps.models import Sweep

SPACE = {"optimizer.learning_rate": {"type": "categorical", "choices": [0.001, 0.002]}}


def body(name: str) -> dict:
    return {"name": name, "space": SPACE, "sampler": "grid", "metric": "reward/mean", "max_trials": 2}


def test_a_sweep_over_the_owners_cap_is_refused_with_429_naming_the_limit(alice, client, sent_messages, settings):
    settings.PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER = 2
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 100
    experiment = make_experiment(alice)
    api = token_client(alice)
    url = f"/api/experiments/{experiment.pk}/sweeps"
    for name in ("one", "two"):
        assert api.post(url, json.dumps(body(name)), content_type="application/json").status_code == 201
    refused = api.post(url, json.dumps(body("three")), content_type="application/json")
    assert refused.status_code == 429, refused.content
    message = refused.json()["error"]
    assert "2 running sweeps, the limit is 2" in message and "PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER" in message
    assert Sweep.objects.count() == 2
    client.force_login(alice)
    page = client.post(
        reverse("sweep-new", args=[experiment.pk]),
        {
            "name": "four",
            "metric": "reward/mean",
            "direction": "maximize",
            "sampler": "grid",
            "pruner": "none",
            "max_trials": "2",
            "max_concurrent_trials": "2",
            "seed": "0",
            "pruner_startup_trials": "2",
            "pruner_warmup_steps": "1",
            "space": json.dumps(SPACE),
        },
    )
    assert page.status_code == 429
    assert "the limit is 2" in page.content.decode()
    assert Sweep.objects.count() == 2
    # one ends: there is room again
    services.cancel_sweep(Sweep.objects.get(name="one"))
    assert api.post(url, json.dumps(body("five")), content_type="application/json").status_code == 201


def test_the_account_shows_the_sweep_cap(alice, client, settings):
    settings.PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER = 3
    got = token_client(alice).get("/api/account")
    assert got.status_code == 200
    assert got.json()["limits"]["max_active_sweeps"] == {"value": 3, "source": "default"}
    client.force_login(alice)
    page = client.get(reverse("account")).content.decode()
    assert 'data-limit="max_active_sweeps"' in page and "Active sweeps" in page

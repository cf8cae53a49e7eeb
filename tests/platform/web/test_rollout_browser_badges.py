"""The rollout browser's per-sample badges for the trainer's optional sample keys (trainers.loop.
rollout.Rollout.samples, stored by runner.db_hooks in RolloutSample.extra): "truncated" when
truncated is True, "out of the loss" when in_loss is False, "overlong penalty <p>" with p to 3
significant digits; nothing when the keys are absent."""

from __future__ import annotations

import re

import pytest
from api_testlib import make_run
from samples_testlib import prompt_hash

from experiments.models import RolloutSample
from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db

FLAGGED = {"truncated": True, "overlong_penalty": -0.123456, "in_loss": False}


def badges_of(html: str, completion: str) -> list[str]:
    """The badge texts in the table row (or group card) that shows `completion`."""
    blocks = re.split(r"<tr data-sample-id=|<section class=\"card sample-card\"", html)
    (block,) = [b for b in blocks if f">{completion}<" in b]
    return re.findall(r'<span class="badge sample-badge [a-z-]+">([^<]*)</span>', block)


@pytest.fixture
def flagged_run(alice):
    """Step 1, one group: a plain sample, a fully flagged one, and one with only a small penalty,
    written through runner.db_hooks as the trainer reports them."""
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    base = {"prompt": "p", "reward": 1.0, "advantage": 0.0, "group": 0, "correct": True}
    hooks.on_samples(
        1,
        [
            {**base, "completion": "plain", "generation": 0},
            {**base, "completion": "flagged", "generation": 1, **FLAGGED},
            {**base, "completion": "penalised", "generation": 2, "overlong_penalty": 0.00625},
        ],
    )
    hooks.flush()
    return run


def test_db_hooks_keep_the_keys_in_extra(flagged_run):
    flagged = RolloutSample.objects.get(run=flagged_run, completion="flagged")
    assert flagged.extra == {"generation": 1, "correct": True, **FLAGGED}


def test_browse_table_shows_the_badges_only_where_the_keys_are(flagged_run, alice_client):
    html = alice_client.get(f"/runs/{flagged_run.pk}/samples/").content.decode()
    assert badges_of(html, "plain") == []
    assert badges_of(html, "flagged") == ["truncated", "out of the loss", "overlong penalty -0.123"]
    assert badges_of(html, "penalised") == ["overlong penalty 0.00625"]


def test_group_view_shows_the_badges(flagged_run, alice_client):
    html = alice_client.get(f"/runs/{flagged_run.pk}/samples/", {"step": 1, "group": 0}).content.decode()
    assert html.count('class="card sample-card"') == 3
    assert badges_of(html, "plain") == []
    assert badges_of(html, "flagged") == ["truncated", "out of the loss", "overlong penalty -0.123"]
    assert badges_of(html, "penalised") == ["overlong penalty 0.00625"]


def test_other_values_give_no_badge(alice, alice_client):
    """in_loss True, truncated False and a penalty that is not a number are not flags."""
    run = make_run(alice)
    RolloutSample.objects.create(
        run=run,
        step=1,
        prompt="p",
        prompt_hash=prompt_hash("p"),
        completion="odd",
        extra={"truncated": False, "in_loss": True, "overlong_penalty": "x"},
    )
    html = alice_client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert badges_of(html, "odd") == [] and "sample-badge" not in html


def test_samples_api_returns_the_keys(flagged_run, alice_client):
    """The JSON API carries the same three keys: their values where the trainer wrote them, null
    where it wrote none."""
    for params in ({"step": 1}, {"kind": "train"}):  # the run page's step view and the browse view
        samples = alice_client.get(f"/api/runs/{flagged_run.pk}/samples", params).json()["samples"]
        by_completion = {s["completion"]: s for s in samples}
        flagged, plain = by_completion["flagged"], by_completion["plain"]
        assert (flagged["truncated"], flagged["in_loss"], flagged["overlong_penalty"]) == (True, False, -0.123456)
        assert (plain["truncated"], plain["in_loss"], plain["overlong_penalty"]) == (None, None, None)
        assert by_completion["penalised"]["overlong_penalty"] == 0.00625

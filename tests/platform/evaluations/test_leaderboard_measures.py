"""The leaderboard never mixes jobs of different prompt counts or k. A later
8-prompt k=1 job does not hide an earlier 16-prompt k=2 one on the same checkpoint; each row says
what it measured and ranks only against rows of the same (prompts, k); a job without a value never
hides a measured one."""

from __future__ import annotations

import datetime as dt

import pytest
from api_testlib import make_run, token_client
from django.urls import reverse
from django.utils import timezone

from evaluations.leaderboard import ranked
from evaluations.models import EvaluationJob
from experiments.models import Checkpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice):
    run = make_run(alice, status="succeeded", run_dir="run-board")
    for step in (2, 4):
        Checkpoint.objects.create(run=run, step=step, path=f"run-board/checkpoints/{step}", size_bytes=1)
    return run


def done(owner, run, step, prompts, k, accuracy, minutes_ago, pass_k=None):
    return EvaluationJob.objects.create(
        owner=owner,
        run=run,
        step=step,
        dataset_kind="task",
        task="reverse",
        dataset_key="task:reverse",
        dataset_label="task reverse",
        prompts=prompts,
        k=k,
        status="succeeded",
        accuracy=accuracy,
        pass_at_k=pass_k,
        reward_mean=accuracy,
        finished_at=timezone.now() - dt.timedelta(minutes=minutes_ago),
    )


def test_the_issues_later_8_prompt_job_does_not_hide_the_16_prompt_one(alice, run):
    wide = done(alice, run, 2, 16, 2, 0.5, 10, pass_k=0.75)  # earlier: 16 prompts, k=2
    narrow = done(alice, run, 2, 8, 1, 0.25, 1, pass_k=None)  # later: 8 prompts, k=1, no pass@k
    other = done(alice, run, 4, 8, 1, 0.375, 2)
    body = token_client(alice).get("/api/evaluations/leaderboard?dataset=task:reverse").json()
    rows = [(r["id"], r["prompts"], r["k"], r["rank"]) for r in body["rows"]]
    assert rows == [(wide.pk, 16, 2, 1), (other.pk, 8, 1, 1), (narrow.pk, 8, 1, 2)]
    assert body["boards"] == [
        {
            "key": "task:reverse",
            "label": "task reverse",
            "jobs": 3,
            "measures": [{"prompts": 16, "k": 2}, {"prompts": 8, "k": 1}],
        }
    ]
    one = token_client(alice).get("/api/evaluations/leaderboard?dataset=task:reverse&prompts=8&k=1").json()
    assert [r["id"] for r in one["rows"]] == [other.pk, narrow.pk]
    from django.test import Client

    browser = Client()
    browser.force_login(alice)
    html = browser.get(reverse("leaderboard") + "?dataset=task:reverse").content.decode()
    assert f'data-job="{wide.pk}" data-prompts="16" data-k="2"' in html and "16 prompts, k=2" in html
    assert f'data-job="{narrow.pk}" data-prompts="8" data-k="1"' in html and "8 prompts, k=1" in html


def test_a_newer_job_without_an_accuracy_never_hides_a_measured_one(alice, run):
    measured = done(alice, run, 2, 16, 2, 0.5, 10, pass_k=0.75)
    done(alice, run, 2, 16, 2, None, 1)  # newer, same measure, nothing measured
    jobs = list(EvaluationJob.objects.order_by("-finished_at"))
    assert [j.pk for j in ranked(jobs)] == [measured.pk]


def test_null_values_rank_below_measured_ones_within_a_measure(alice, run):
    with_pass = done(alice, run, 2, 16, 2, 0.5, 3, pass_k=0.75)
    without = done(alice, run, 4, 16, 2, 0.5, 1, pass_k=None)
    assert [(j.pk, j.rank) for j in ranked(EvaluationJob.objects.order_by("-finished_at"))] == [
        (with_pass.pk, 1),
        (without.pk, 2),
    ]

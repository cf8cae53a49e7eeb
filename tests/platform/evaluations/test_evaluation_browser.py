"""The evaluation pages and the run page's compact checkpoint rows in a real browser (Chromium through
Playwright) against the live test server. Rows are written straight into the database (no worker):
this tests the pages and their scripts, not the runner."""

from __future__ import annotations

import re

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from evaluations import services
from evaluations.models import EvaluationJob
from experiments.models import Checkpoint

pytestmark = pytest.mark.django_db(transaction=True)


def finished_job(owner, run, step, accuracy, key="task:reverse", label="task reverse", **fields):
    return EvaluationJob.objects.create(
        owner=owner,
        run=run,
        step=step,
        checkpoint=run.checkpoints.get(step=step),
        dataset_kind="task",
        task=key.split(":")[1],
        dataset_key=key,
        dataset_label=label,
        status="succeeded",
        accuracy=accuracy,
        pass_at_1=accuracy,
        pass_at_k=fields.pop("pass_at_k", None),
        reward_mean=0.2,
        k=2,
        finished_at=timezone.now(),
        **fields,
    )


def test_compact_checkpoint_rows_and_the_leaderboard(logged_in_page, alice, monkeypatch):  # noqa: F811
    page = logged_in_page
    monkeypatch.setattr(services, "send_when_committed", lambda job: None)  # no worker here
    run = make_run(make_experiment(alice), status="succeeded", max_steps=4)
    Checkpoint.objects.create(
        run=run, step=2, path="run/checkpoints/2", size_bytes=2048, metrics={"reward/mean": 0.4, "loss/policy": 0.1}
    )
    Checkpoint.objects.create(
        run=run,
        step=4,
        path="run/checkpoints/4",
        size_bytes=3 * 1024 * 1024,
        metrics={"reward/mean": 0.9, "eval/accuracy": 0.75},
    )
    worse = finished_job(alice, run, 4, 0.5)
    best = finished_job(alice, run, 4, 0.625, key="task:copy", label="task copy")
    first = finished_job(alice, run, 2, 0.25, pass_at_k=0.5)

    page.goto(reverse("run-detail", args=[run.pk]))
    rows = page.locator("#checkpoints-table tbody tr")
    expect(rows).to_have_count(2)
    step4 = page.locator("#checkpoints-table tr[data-step='4']")
    expect(step4.locator(".checkpoint-key")).to_have_text("0.750")  # eval/accuracy wins over reward/mean
    expect(step4.locator(".checkpoint-key")).to_have_attribute("title", "eval/accuracy")
    expect(step4.locator("td").nth(2)).to_have_text("3.0 MiB")
    expect(step4.locator(".checkpoint-evaluation")).to_have_text("0.625")  # the best job on any dataset
    expect(step4.locator(".checkpoint-evaluation")).to_have_attribute("href", f"/evaluations/{best.pk}/")
    step2 = page.locator("#checkpoints-table tr[data-step='2']")
    expect(step2.locator(".checkpoint-key")).to_have_text("0.400")
    expect(step2.locator(".checkpoint-key")).to_have_attribute("title", "reward/mean")
    expect(step2.locator("td").nth(2)).to_have_text("2.0 KiB")
    expect(step2.locator(".checkpoint-evaluation")).to_have_attribute("href", f"/evaluations/{first.pk}/")
    expect(page.locator("#checkpoints-table")).not_to_contain_text("loss/policy")  # no metric dump
    expect(page.locator("#checkpoints-table")).not_to_contain_text("run/checkpoints")  # no server path
    expect(page.locator(".checkpoint-download-row")).to_have_count(0)  # a toy preset: no Hugging Face zip
    step2.locator(".checkpoint-fork").click()
    expect(page.locator("#fork-step")).to_have_value("2")

    # evaluate checkpoint 2 from its row: the form comes prefilled, the job page polls
    step2.locator(".checkpoint-evaluate").click()
    expect(page.locator("#id_run")).to_have_value(str(run.pk))
    expect(page.locator("#id_step")).to_have_value("2")
    page.select_option("#id_dataset", "task:reverse")
    page.fill("#id_k", "1")
    page.click("#evaluation-submit")
    job = EvaluationJob.objects.get(status="queued")
    expect(page).to_have_url(f"{page.url.split('/evaluations/')[0]}/evaluations/{job.pk}/")
    expect(page.locator("#evaluation-job")).to_have_attribute("data-poll", "1")
    expect(page.locator("#job-progress-text")).to_have_text("0 / ? prompts")

    # the leaderboard, from the nav: the first dataset listed, then another picked
    page.click("#nav-evaluations")
    page.click("#leaderboard-link")
    expect(page.locator("#leaderboard-dataset")).to_have_value("task:copy")
    expect(page.locator("#leaderboard tbody tr")).to_have_count(1)
    page.wait_for_load_state("load")  # autosubmit.js has bound the select: picking a dataset submits
    page.select_option("#leaderboard-dataset", "task:reverse")
    expect(page).to_have_url(re.compile(r"dataset=task%3Areverse"))
    expect(page.locator("#leaderboard-dataset")).to_have_value("task:reverse")
    board = page.locator("#leaderboard tbody tr")
    expect(board).to_have_count(2)  # the queued job is not on it
    expect(board.nth(0)).to_have_attribute("data-job", str(worse.pk))  # 0.5 before 0.25
    expect(board.nth(1)).to_have_attribute("data-job", str(first.pk))
    expect(board.nth(1)).to_contain_text("0.500")  # pass@k
    board.nth(0).locator(".job-accuracy").click()
    expect(page.locator("#job-results")).to_contain_text("0.500")

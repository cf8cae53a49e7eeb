"""A sweep of 6 trials with a median pruner in a real browser (Chromium through Playwright)
against the live test server: started from the experiment page's form, its page follows it as it
runs (the table gains rows, statuses change, the page reloads when trials are added) until it
finishes with pruned trials; the parallel-coordinates plot and the scatter are drawn from the
trials; two ticked trials open the compare page. Training is played by the test (statuses and
metric points written, the scheduler's tick called), so the browser part stays quick; the real
workers run a sweep in test_sweep_e2e.py."""

from __future__ import annotations

import json
import re

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run, RunStatus
from sweeps import scheduler
from sweeps.models import Sweep, SweepStatus

pytestmark = pytest.mark.django_db(transaction=True)
S = RunStatus
LEARNING_RATES = [0.004, 0.003, 0.002, 0.001, 0.0005, 0.0002]
SPACE = {"optimizer.learning_rate": {"type": "categorical", "choices": LEARNING_RATES}}


def play_training(sweep: Sweep) -> None:
    """One round of pretend workers, then the scheduler's tick: queued runs start and report the
    learning rate at steps 1-3, running ones succeed, cancelling (pruned) ones end as pruned."""
    for trial in sweep.trials.select_related("run"):
        run = trial.run
        if run is None:
            continue
        if run.status == S.QUEUED:
            Run.objects.filter(pk=run.pk).update(status=S.RUNNING, step=3)
            MetricPoint.objects.bulk_create(
                [
                    MetricPoint(run=run, step=s, name="learning_rate", value=run.config["optimizer"]["learning_rate"])
                    for s in (1, 2, 3)
                ]
            )
        elif run.status == S.CANCELLING:
            Run.objects.filter(pk=run.pk).update(status=S.PRUNED)
        elif run.status == S.RUNNING:
            Run.objects.filter(pk=run.pk).update(status=S.SUCCEEDED)
    scheduler.tick()


def test_a_sweep_with_a_pruner_from_the_form_to_the_compare_page(logged_in_page, alice, sent_messages):  # noqa: F811
    page = logged_in_page
    csp_violations: list[str] = []
    page.on("console", lambda msg: csp_violations.append(msg.text) if "Content Security Policy" in msg.text else None)
    experiment = make_experiment(alice, name="sweepme")
    page.goto(f"/experiments/{experiment.pk}/")
    page.click("#sweep-experiment")
    page.fill("#sweep-name", "lr-browser")
    page.fill("#sweep-space", json.dumps(SPACE))
    page.fill("#sweep-metric", "learning_rate")
    page.select_option("#sweep-sampler", "grid")
    page.select_option("#sweep-pruner", "median")
    page.fill("#sweep-max-trials", "6")
    page.fill("#sweep-concurrent", "2")
    page.fill("#sweep-startup", "2")
    page.fill("#sweep-warmup", "0")
    page.click("#sweep-submit")
    sweep = Sweep.objects.get()
    expect(page).to_have_url(re.compile(rf"/sweeps/{sweep.pk}/$"))
    expect(page.locator("#trial-table tbody tr")).to_have_count(2)
    expect(page.locator('#trial-table tr[data-trial="0"] .badge')).to_have_text("queued")

    play_training(sweep)  # trials 0 and 1 start
    expect(page.locator('#trial-table tr[data-trial="0"] .badge')).to_have_text("running", timeout=15_000)
    for _ in range(12):
        play_training(sweep)
        if Sweep.objects.get(pk=sweep.pk).status != SweepStatus.RUNNING:
            break
    statuses = list(sweep.trials.order_by("number").values_list("status", flat=True))
    assert statuses == [S.SUCCEEDED] * 2 + [S.PRUNED] * 4, statuses

    expect(page.locator("#sweep-status .badge")).to_have_text("finished", timeout=15_000)  # the page reloaded
    expect(page.locator("#trial-table tbody tr")).to_have_count(6)
    expect(page.locator('#trial-table tr[data-status="pruned"]')).to_have_count(4)
    expect(page.locator('#trial-table tr[data-trial="0"] [data-col="value"]')).to_have_text("0.0040")
    expect(page.locator("#sweep-plots")).to_have_attribute("data-parcoords-lines", "6")
    lines = page.locator("#sweep-parcoords").evaluate("d => d.data.map(t => [t.name, Array.from(t.y)])")
    # two axes (the learning rate, then the metric), each scaled to [0, 1] between its ends
    expected = {f"trial {n}": [(lr - 0.0002) / (0.004 - 0.0002)] * 2 for n, lr in enumerate(LEARNING_RATES)}
    assert {name: pytest.approx(y) for name, y in lines} == expected
    expect(page.locator("#sweep-parcoords .scatterlayer .trace")).to_have_count(6)
    traces = page.locator("#sweep-scatter").evaluate("d => d.data.map(t => [t.name, Array.from(t.x), Array.from(t.y)])")
    assert {name: x for name, x, _y in traces} == {"pruned": LEARNING_RATES[2:], "succeeded": LEARNING_RATES[:2]}
    expect(page.locator("#sweep-scatter .scatterlayer .point")).to_have_count(6)

    assert csp_violations == []  # the plots and the page's script run under the site's CSP
    runs = list(sweep.trials.order_by("number").values_list("run_id", flat=True))
    page.check(f"#pick-{runs[0]}")
    page.check(f"#pick-{runs[2]}")
    page.click("#sweep-compare")
    expect(page).to_have_url(re.compile(rf"/runs/compare/\?runs={runs[0]}(%2C|,){runs[2]}$"))
    expect(page.locator("#compare-runs-table tbody tr")).to_have_count(2)

"""The algorithm metrics (of GSPO, CISPO, DAPO, Dr. GRPO) on the run page and the compare page: a metric not in
METRIC_NAMES (eval/pass@4: its k is in the name) still gets a chart, and two runs that report
different metric sets (GRPO: reward only; DAPO: dynamic/*, eval/pass@1 and eval/pass@4) compare
side by side, each chart holding the runs that reported it. The pages run in Chromium against the
live test server; metrics are written straight into the database (no worker)."""

from __future__ import annotations

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run
from trainers.config.metric_names import METRIC_NAMES, is_metric_name
from web.dashboard import chart_panels

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
T0 = 1_700_000_000.0
STEPS = range(1, 5)  # 4 steps
DAPO_METRICS = (
    "reward/mean",
    "dynamic/dropped_group_fraction",
    "dynamic/refill_rounds",
    "loss/entropy_bonus",
    "rollout/truncated_fraction",
    "rollout/overlong_penalty_mean",
    "eval/pass@1",
    "eval/pass@4",
)


def finished_run(user, name: str, metrics: tuple[str, ...]) -> Run:
    """A succeeded run reporting each of `metrics` at every step (value = step / 10)."""
    run = make_run(make_experiment(user, name=name), status="succeeded", step=STEPS[-1])
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, name=m, value=s / 10, wall_time=T0 + s) for s in STEPS for m in metrics]
    )
    return run


def test_pass_at_4_is_a_metric_the_page_does_not_list():
    """The premise of the page tests: eval/pass@4 reaches the page as an unknown name."""
    assert is_metric_name("eval/pass@4") and "eval/pass@4" not in METRIC_NAMES
    assert not any("eval/pass@4" in panel["metrics"] for panel in chart_panels())


def test_run_page_charts_the_new_metrics_and_pass_at_4(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = finished_run(alice, "dapo", DAPO_METRICS)
    page.goto(reverse("run-detail", args=[run.pk]))
    for metric in (
        "reward/mean",
        "dynamic/dropped_group_fraction",
        "loss/entropy_bonus",
        "rollout/overlong_penalty_mean",
        "eval/pass@4",
    ):
        chart = page.locator(f".chart[data-metric='{metric}']")
        expect(chart).to_be_visible()
        expect(chart).to_have_attribute("data-points", str(len(STEPS)))
    # eval/pass@1 is drawn in the eval/* chart (its panel's primary metric is the first eval name),
    # named without the prefix its caption gives
    eval_traces = page.locator(".chart[data-metric='eval/reward_mean']").evaluate(
        "div => div.data.map(t => [t.name, t.y.length])"
    )
    assert ["pass@1", len(STEPS)] in eval_traces
    assert page.locator("figure[data-panel='eval/pass@4'] figcaption").inner_text() == "eval/pass@4"


def test_compare_two_runs_with_different_metric_sets(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    grpo = finished_run(alice, "grpo", ("reward/mean",))
    dapo = finished_run(alice, "dapo", DAPO_METRICS)
    page.goto(f"{reverse('run-compare')}?runs={grpo.pk},{dapo.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    expect(page.locator(".chart[data-metric]")).to_have_count(len(DAPO_METRICS))
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-traces", "2")
    for metric in DAPO_METRICS[1:]:
        expect(page.locator(f".chart[data-metric='{metric}']")).to_have_attribute("data-traces", "1")
    # the run that reported eval/pass@4 is the second trace (the address's order), with its 4 points
    traces = page.locator(".chart[data-metric='eval/pass@4']").evaluate(
        "div => div.data.map(t => [t.name, Array.from(t.y)])"
    )
    assert traces == [[f"#{grpo.pk} grpo", []], [f"#{dapo.pk} dapo", [0.1, 0.2, 0.3, 0.4]]]


def test_api_compare_lists_the_union_of_the_metric_sets(alice):
    from api_testlib import token_client

    grpo = finished_run(alice, "grpo", ("reward/mean",))
    dapo = finished_run(alice, "dapo", DAPO_METRICS)
    body = token_client(alice).get(f"/api/runs/compare?runs={grpo.pk},{dapo.pk}").json()
    assert body["metrics"] == sorted(DAPO_METRICS)
    assert list(body["runs"][0]["series"]) == ["reward/mean"]
    assert sorted(body["runs"][1]["series"]) == sorted(DAPO_METRICS)
    assert body["runs"][1]["series"]["eval/pass@4"]["values"] == [0.1, 0.2, 0.3, 0.4]

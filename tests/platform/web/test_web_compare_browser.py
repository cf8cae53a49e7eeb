"""The compare page and the run page's charts in a real browser (Chromium through Playwright)
against the live test server: two finished runs overlaid (both traces), the diff-only config
table, smoothing, log-y, the wall-time axis and the shared zoom; tick labels that keep a
learning rate's magnitude and a timing chart not flattened by its first step."""

from __future__ import annotations

import re

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from platform_testlib import tiny_config
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
T0 = 1_700_000_000.0


def finished_run(user, name: str, learning_rate: float, steps: int = 6, step_s: float = 2.0) -> Run:
    """A succeeded run whose config's learning rate is `learning_rate`, with its metrics: reward
    rising, the learning rate, and step times whose first (compilation) is 30 s."""
    run = make_run(
        make_experiment(user, name=name, config=tiny_config(optimizer__learning_rate=learning_rate)),
        status="succeeded",
        step=steps,
    )
    points = []
    for s in range(1, steps + 1):
        wall = T0 + s * step_s
        points += [
            MetricPoint(run=run, step=s, name="reward/mean", value=s / 10, wall_time=wall),
            MetricPoint(run=run, step=s, name="learning_rate", value=learning_rate, wall_time=wall),
            MetricPoint(run=run, step=s, name="timing/step_s", value=30.0 if s == 1 else 0.5 + s / 100, wall_time=wall),
        ]
    MetricPoint.objects.bulk_create(points)
    return run


def chart_data(page, metric: str):
    """[(name, x, y)] of the chart's traces, as drawn."""
    return page.locator(f".chart[data-metric='{metric}']").evaluate(
        "div => div.data.map(t => [t.name, Array.from(t.x), Array.from(t.y)])"
    )


def y_ticks(page, metric: str) -> list[str]:
    """The y-axis tick labels as drawn (SVG text)."""
    return page.locator(f".chart[data-metric='{metric}'] .ytick text").evaluate_all(
        "nodes => nodes.map(n => n.textContent)"
    )


def y_range(page, metric: str) -> list[float]:
    return page.locator(f".chart[data-metric='{metric}']").evaluate("div => div.layout.yaxis.range")


def test_compare_two_finished_runs(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    a = finished_run(alice, "lr 1e-3", 1e-3, step_s=2.0)
    b = finished_run(alice, "lr 2.5e-5", 2.5e-5, step_s=10.0)
    # picked on the runs list (its checkboxes and button are the runs page's); the address is shareable
    page.goto(reverse("run-list"))
    page.check(f"#run-table input[name='run'][value='{a.pk}']")
    page.check(f"#run-table input[name='run'][value='{b.pk}']")
    page.click("#compare-selected")
    expect(page).to_have_url(re.compile(rf"/runs/compare/\?runs={b.pk},{a.pk}$"))  # the table's order: newest first
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-traces", "2")
    # typed by hand, in another order: one colour per run in the address's order
    page.goto(f"{reverse('run-compare')}?runs={a.pk},{b.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    reward = page.locator(".chart[data-metric='reward/mean']")
    expect(reward).to_have_attribute("data-traces", "2")
    traces = chart_data(page, "reward/mean")
    assert [t[0] for t in traces] == [f"#{a.pk} lr 1e-3", f"#{b.pk} lr 2.5e-5"]
    assert traces[0][1] == [1, 2, 3, 4, 5, 6] and traces[1][2] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    # the learning-rate chart names its magnitudes (not a row of zeros)
    assert y_ticks(page, "learning_rate") == ["0", "5e-4", "1e-3"]  # 2.5e-5 .. 1e-3, padded
    # the timing chart's range is the steady steps', not the 30 s compile step's
    assert y_range(page, "timing/step_s")[1] < 1.0

    # the configs: only the learning rate differs; the diff-only box shows just that row
    rows = page.locator("#config-table tbody tr")
    expect(page.locator("#config-diff-only")).to_be_checked()
    visible = rows.filter(has=page.locator("td:visible"))
    expect(visible).to_have_count(1)
    expect(visible.first).to_have_attribute("data-field", "optimizer.learning_rate")
    expect(visible.first).to_contain_text("0.001")
    expect(visible.first).to_contain_text("2.5e-05")
    page.uncheck("#config-diff-only")
    assert rows.filter(has=page.locator("td:visible")).count() == rows.count() > 10

    # smoothing redraws from the raw points: EMA 0.5 of 0.1, 0.2 -> 0.1, 0.1667 (debiased)
    page.locator("#chart-smoothing").fill("0.5")
    expect(reward).to_have_attribute("data-smoothing", "0.5")
    smoothed = chart_data(page, "reward/mean")[0][2]
    assert smoothed[0] == pytest.approx(0.1) and smoothed[1] == pytest.approx(0.5 / 3)
    # log y, then wall time on the x axis (seconds since each run's first step)
    page.check("#chart-log-y")
    expect(reward).to_have_attribute("data-log", "1")
    page.select_option("#chart-x", "elapsed_s")
    expect(reward).to_have_attribute("data-x", "elapsed_s")
    traces = chart_data(page, "reward/mean")
    assert traces[0][1] == [0, 2, 4, 6, 8, 10] and traces[1][1] == [0, 10, 20, 30, 40, 50]
    # zooming one chart's x zooms them all
    page.locator(".chart[data-metric='reward/mean']").evaluate(
        "div => Plotly.relayout(div, {'xaxis.range[0]': 4, 'xaxis.range[1]': 20})"
    )
    assert page.locator(".chart[data-metric='timing/step_s']").evaluate("div => div.layout.xaxis.range") == [4, 20]


def test_run_page_charts_read_right(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = finished_run(alice, "lr", 1e-3)
    page.goto(reverse("run-detail", args=[run.pk]))
    lr = page.locator(".chart[data-metric='learning_rate']")
    expect(lr).to_have_attribute("data-points", "6")
    # 1e-3 padded by 5 %: ticks 2e-5 apart, drawn with their exponent
    assert y_ticks(page, "learning_rate") == ["9.6e-4", "9.8e-4", "1e-3", "1.02e-3", "1.04e-3"]
    timing = page.locator(".chart[data-metric='timing/step_s']")
    expect(timing).to_have_attribute("data-points", "6")
    assert y_range(page, "timing/step_s")[1] < 1.0  # 30 s of compilation does not flatten the chart
    page.check("#chart-log-y")
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-log", "1")
    page.locator("#chart-smoothing").fill("0.9")
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-smoothing", "0.9")

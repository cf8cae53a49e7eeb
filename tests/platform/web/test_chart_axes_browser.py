"""The charts of the run page and the compare page as a new user reads them, in Chromium against the
live test server (metrics written straight into the database): a short run beside a long one is
drawn whole on the compare page (not cut to the long run's axis), a point left above the axis is
said so under the chart, an eval/* axis of a flat series read back from float32 has round ticks, and
at 390 and 1280 px the mode bar (Plotly's toolbar) covers no legend and the timing/* legend is
compact."""

from __future__ import annotations

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
TIMING = (
    "timing/step_s",
    "timing/rollout_s",
    "timing/train_s",
    "timing/reward_s",
    "timing/generation_prefill_s",
    "timing/generation_decode_s",
)
F32_019 = 0.1899999976158142  # 0.19 as a float32, read back


def run_with(user, name: str, series: dict[str, dict[int, float]]):
    run = make_run(make_experiment(user, name=name), status="succeeded", step=max(max(s) for s in series.values()))
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, step=step, name=metric, value=value, wall_time=1e9 + step)
            for metric, points in series.items()
            for step, value in points.items()
        ]
    )
    return run


def test_a_short_run_is_drawn_whole_beside_a_long_one_and_a_clipped_point_is_said(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    # 60 steps near 0.1 with one spike (50 at step 30), and a run of 3 steps at 6, 7, 8
    long = run_with(alice, "long", {"reward/mean": {s: 50.0 if s == 30 else 0.1 + s / 1000 for s in range(1, 61)}})
    short = run_with(alice, "short", {"reward/mean": {1: 6.0, 2: 7.0, 3: 8.0}})
    page.goto(f"{reverse('run-compare')}?runs={long.pk},{short.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    chart = page.locator(".chart[data-metric='reward/mean']")
    top = chart.evaluate("div => div.layout.yaxis.range[1]")
    assert 8 < top < 50  # the short run whole (it was drawn as triangles on a 0.19 top edge) ...
    expect(chart).to_have_attribute("data-clipped", "1")  # ... the long run's spike still above it
    note = page.locator("figure[data-panel='reward/mean'] .chart-note")
    expect(note).to_be_visible()
    expect(note).to_have_text("1 point above the axis (\u25b2 on its top edge; hover for the values)")
    # a chart with nothing above its axis says nothing
    twin = run_with(alice, "twin", {"reward/mean": {1: 5.0, 2: 6.0, 3: 7.0}})
    page.goto(f"{reverse('run-compare')}?runs={short.pk},{twin.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-clipped", "0")
    expect(page.locator("figure[data-panel='reward/mean'] .chart-note")).to_have_count(0)


def test_an_eval_axis_of_float32_noise_has_round_ticks(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = run_with(
        alice,
        "eval",
        {"reward/mean": {s: s / 100 for s in range(1, 31)}, "eval/accuracy": {10: 0.19, 20: F32_019, 30: 0.19}},
    )
    page.goto(reverse("run-detail", args=[run.pk]))
    chart = page.locator(".chart[data-metric='eval/reward_mean']")  # the eval/* chart
    expect(chart).to_be_visible()
    expect(chart).to_have_attribute("data-y-ticks", "0.185 0.19 0.195")  # it read 0.189999998 0.189999999 0.19
    drawn = chart.locator(".ytick text").evaluate_all("nodes => nodes.map(n => n.textContent)")
    assert drawn == ["0.185", "0.19", "0.195"]


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


@pytest.mark.parametrize("width", [390, 1280])
def test_the_mode_bar_covers_no_legend_and_the_timing_legend_is_compact(logged_in_page, alice, width):  # noqa: F811
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    series = {m: {s: 0.01 * (i + 1) + s / 1000 for s in range(1, 31)} for i, m in enumerate(TIMING)}
    run = run_with(alice, "demo: SmolLM2 arithmetic", {**series, "reward/mean": {s: s / 100 for s in range(1, 31)}})
    other = run_with(alice, "demo: SmolLM2 arithmetic", {"reward/mean": {s: s / 90 for s in range(1, 31)}})
    page.goto(reverse("run-detail", args=[run.pk]))
    timing = page.locator(".chart[data-metric='timing/step_s']")
    expect(timing).to_have_attribute("data-points", "30")
    timing.hover()
    legend, bar = timing.locator(".infolayer .legend").bounding_box(), timing.locator(".modebar").bounding_box()
    assert not overlap(legend, bar), (legend, bar)
    # the legend names what the caption (timing/*) does not already say, in at most a third of the chart
    names = timing.locator(".infolayer .legendtext").evaluate_all("nodes => nodes.map(n => n.textContent)")
    assert names == [m.removeprefix("timing/") for m in TIMING]
    assert legend["height"] <= 0.3 * timing.bounding_box()["height"], legend  # it was half the chart
    page.goto(f"{reverse('run-compare')}?runs={run.pk},{other.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    reward = page.locator(".chart[data-metric='reward/mean']")
    reward.hover()
    legend, bar = reward.locator(".infolayer .legend").bounding_box(), reward.locator(".modebar").bounding_box()
    assert not overlap(legend, bar), (legend, bar)

"""The run page and the compare page after the new-user findings, in Chromium against the live test
server (metrics written straight into the database, no worker): accuracy beside the reward, no
"live" on a finished run, a chart per reward function, a timing chart whose second compile step
neither flattens it nor goes unmarked, "no data" instead of made-up axes, no KL charts at beta = 0;
on the compare page legends with the run names, the key metrics first, a fresh fork drawn from its
fork step and the run picker filtered as one types."""

from __future__ import annotations

import re

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
T0 = 1_700_000_000.0
STEPS = 20


def step_time_s(step: int) -> float:
    return {1: 13.0, 3: 6.8}.get(step, 0.5)


def finished_run(user, experiment_name: str, steps: int = STEPS, **fields) -> Run:
    """A succeeded run (tiny config: the arithmetic task's three rewards, beta 0) with reward/mean,
    accuracy, each reward function's mean and step times compiling at steps 1 and 3."""
    run = make_run(make_experiment(user, name=experiment_name), status="succeeded", step=steps, **fields)
    points = []
    for s in range(1, steps + 1):
        wall = T0 + s
        values = {
            "reward/mean": s / 100,
            "accuracy": s / 200,
            "reward/exact_match": 0.0,
            "reward/prefix_match": s / 40,
            "reward/alphabet_match": 0.5,
            "timing/step_s": step_time_s(s),
        }
        points += [MetricPoint(run=run, step=s, name=n, value=v, wall_time=wall) for n, v in values.items()]
    MetricPoint.objects.bulk_create(points)
    return run


def test_run_page_reads_right_for_a_new_user(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = finished_run(alice, "toy")
    page.goto(reverse("run-detail", args=[run.pk]))
    timing = page.locator(".chart[data-metric='timing/step_s']")
    expect(timing).to_have_attribute("data-points", str(STEPS))
    # accuracy beside the reward, from the newest step; a finished run is not "live"
    expect(page.locator("#run-accuracy")).to_have_text("0.1")  # 20 / 200
    expect(page.locator("#run-live")).to_be_hidden()
    # one chart of the reward functions, a series each
    functions = page.locator(".chart[data-metric='reward/exact_match']")
    expect(functions).to_have_attribute("data-points", str(STEPS))
    expect(page.locator("figure[data-panel='reward/exact_match'] figcaption")).to_have_text(
        "reward per function (mean raw score)"
    )
    names = functions.evaluate("div => div.data.map(t => t.name)")
    assert names[:3] == ["reward/exact_match", "reward/prefix_match", "reward/alphabet_match"]
    # the timing chart: step 3's 6.8 s does not flatten it; steps 1 and 3 are marked
    expect(timing).to_have_attribute("data-compile-steps", "1 3")
    top = timing.evaluate("div => div.layout.yaxis.range[1]")
    assert top < 1.0
    assert int(timing.get_attribute("data-clipped")) == 2
    hover = timing.evaluate("div => div.data.filter(t => t.mode === 'markers').flatMap(t => t.text)")
    assert "step 3: 6.8 (slow: likely compilation)" in hover
    # a chart with nothing to show says so, without axes
    entropy = page.locator(".chart[data-metric='entropy']")
    expect(entropy).to_have_attribute("data-empty", "1")
    expect(entropy).to_contain_text("no data yet")
    assert entropy.locator(".xtick").count() == 0
    # beta = 0: no KL charts, and a line says why
    expect(page.locator("figure[data-panel='kl']")).to_be_hidden()
    expect(page.locator("figure[data-panel='loss/kl']")).to_be_hidden()
    expect(page.locator("#kl-note")).to_contain_text("grpo.beta = 0")


def test_live_shows_on_a_running_run(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = make_run(make_experiment(alice), status="running")
    page.goto(reverse("run-detail", args=[run.pk]))
    expect(page.locator("#run-live")).to_be_visible()
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-empty", "1")
    # the run ends: live goes after the last polls
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    expect(page.locator("#run-live")).to_be_hidden(timeout=15_000)


def test_compare_page_legends_order_fork_offset_and_picker(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    base = finished_run(alice, "base exp", name="baseline")
    fork = finished_run(alice, "fork exp", steps=6, forked_from=base, forked_from_step=10, fork_optimizer="fresh")
    other = finished_run(alice, "unrelated", steps=2)

    page.goto(reverse("run-compare"))
    # the picker: every run listed; typing filters; ticking two and Compare opens the comparison
    rows = page.locator("#picker-table tbody tr")
    expect(rows).to_have_count(3)
    page.fill("#picker-filter", "exp")
    expect(page.locator("#picker-table tbody tr:visible")).to_have_count(2)
    expect(page.locator(f"#picker-table tr[data-run-id='{other.pk}']")).to_be_hidden()
    page.fill("#picker-filter", "baseline")
    expect(page.locator("#picker-table tbody tr:visible")).to_have_count(1)
    page.check(f"#pick-{base.pk}")
    page.fill("#picker-filter", "fork")
    page.check(f"#pick-{fork.pk}")
    expect(page.locator(f"#picker-table tr[data-run-id='{base.pk}']")).to_be_visible()  # ticked rows stay
    page.click("#picker-submit")
    expect(page).to_have_url(
        re.compile(rf"/runs/compare/\?runs={fork.pk}%2C{base.pk}$|/runs/compare/\?runs={base.pk}%2C{fork.pk}$")
    )
    page.goto(f"{reverse('run-compare')}?runs={base.pk},{fork.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")

    # the key metrics first, then grouped by prefix
    panels = page.locator("#charts figure").evaluate_all("figures => figures.map(f => f.dataset.panel)")
    assert panels[:2] == ["reward/mean", "accuracy"]
    assert panels[2:6] == ["reward/alphabet_match", "reward/exact_match", "reward/prefix_match", "timing/step_s"]
    # a legend with the run labels on every chart
    reward = page.locator(".chart[data-metric='reward/mean']")
    expect(reward.locator(".legendtext").first).to_have_text(f"baseline #{base.pk}")
    expect(reward.locator(".legendtext").nth(1)).to_have_text(f"#{fork.pk} fork exp")
    assert page.locator(".chart[data-metric='timing/step_s'] .legend").count() == 1
    # the fresh fork at step 10 is drawn from x = 11 (its step 1)
    xs = reward.evaluate("div => div.data.slice(0, 2).map(t => Array.from(t.x))")
    assert xs[0] == list(range(1, STEPS + 1)) and xs[1] == list(range(11, 17))
    expect(page.locator(f"#compare-runs-table tr[data-run-id='{fork.pk}'] td[data-col='offset']")).to_contain_text(
        "fresh fork"
    )
    # the wall-time axis keeps each run's own clock
    page.select_option("#chart-x", "elapsed_s")
    expect(reward).to_have_attribute("data-x", "elapsed_s")
    assert reward.evaluate("div => Array.from(div.data[1].x)")[0] == 0

"""User strings handed to Plotly show as text, never as markup: a run named
`<a href=x>link</a><div style="width:500px">blob</div>` is that text in the compare page's legend,
the run page's chart and the sweep page's plots (Plotly reads <a href>, <b>, <span style> in
legend names, hover text, titles and annotations; charts.js's GrpoCharts.plotText escapes them)."""

from __future__ import annotations

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run
from sweeps.models import Sweep, SweepStatus, Trial

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
HOSTILE = '<a href=x>link</a><div style="width:500px">blob</div>'


def reported(run: Run, steps: int = 3) -> Run:
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, name="reward/mean", value=s / 10, wall_time=1e9 + s) for s in range(1, steps + 1)]
    )
    return run


def svg_texts(page, selector: str) -> list[str]:
    return page.locator(selector).evaluate_all("nodes => nodes.map(n => n.textContent)")


def no_markup(page, root: str) -> None:
    """Plotly turned nothing of the hostile name into a link or a styled span."""
    assert page.locator(f"{root} svg a").count() == 0
    assert page.locator(f"{root} svg tspan[style*='width']").count() == 0


def test_a_run_named_with_html_is_text_in_the_compare_legend(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    a = reported(make_run(make_experiment(alice, name="plain"), status="succeeded", step=3, name=HOSTILE))
    b = reported(make_run(make_experiment(alice, name=HOSTILE), status="succeeded", step=3))
    page.goto(f"{reverse('run-compare')}?runs={a.pk},{b.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    chart = ".chart[data-metric='reward/mean']"
    expect(page.locator(f"{chart} .legendtext")).to_have_count(2)
    assert svg_texts(page, f"{chart} .legendtext") == [f"{HOSTILE} #{a.pk}", f"#{b.pk} {HOSTILE}"]
    no_markup(page, chart)


def test_a_metric_named_with_html_is_text_on_the_run_page(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = reported(make_run(make_experiment(alice), status="succeeded", step=3))
    # a metric the page does not know gets a chart of its own, named by the metric
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, name="env/<b>x</b>", value=1.0, wall_time=1e9 + s) for s in (1, 2)]
    )
    page.goto(reverse("run-detail", args=[run.pk]))
    chart = page.locator(".chart[data-metric='env/<b>x</b>']")
    expect(chart).to_have_attribute("data-points", "2")
    names = chart.evaluate("div => div.data.map(t => t.name)")
    assert names[0] == "env/&lt;b&gt;x&lt;/b&gt;"  # Plotly shows the entities as the characters
    assert page.locator(".chart[data-metric='env/<b>x</b>'] svg b").count() == 0


def test_sweep_plots_show_param_choices_metric_and_run_labels_as_text(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    experiment = make_experiment(alice, name="sweepme")
    space = {"data.system_prompt": {"type": "categorical", "choices": [HOSTILE, "plain"]}}
    sweep = Sweep.objects.create(
        experiment=experiment,
        name="s",
        space=space,
        base_config=experiment.config,
        sampler="grid",
        metric="reward/mean",
        max_trials=2,
        status=SweepStatus.FINISHED,
    )
    for number, choice in enumerate([HOSTILE, "plain"]):
        run = make_run(experiment, status="succeeded", step=3, name=HOSTILE)
        Trial.objects.create(
            sweep=sweep,
            number=number,
            params={"data.system_prompt": choice},
            run=run,
            status="succeeded",
            value=0.5 + number / 10,
            value_step=3,
        )
    page.goto(reverse("sweep-detail", args=[sweep.pk]))
    expect(page.locator("#sweep-parcoords .annotation-text").first).to_be_visible()
    assert HOSTILE in svg_texts(page, "#sweep-parcoords .annotation-text")
    assert HOSTILE in svg_texts(page, "#sweep-scatter .xtick text")
    no_markup(page, "#sweep-parcoords")
    no_markup(page, "#sweep-scatter")
    hover = page.locator("#sweep-scatter").evaluate("div => div.data[0].text")
    assert all("&lt;a href=x&gt;" in t for t in hover), hover

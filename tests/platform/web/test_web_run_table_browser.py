"""The runs page in a real browser (Chromium through Playwright) against the live test server: its
cells follow the database without a reload (status, progress, metric columns, tags; a new run
appears), and ticking runs opens the compare page with their ids. Run data is written straight into
the database (no worker)."""

from __future__ import annotations

import re

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run, Tag

pytestmark = pytest.mark.django_db(transaction=True)
POLL_WAIT_MS = 12_000  # the page polls every 5 s


def test_cells_follow_the_database_without_a_reload(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    experiment = make_experiment(alice, "live-exp")
    run = make_run(experiment, status="running", step=1)
    MetricPoint.objects.create(run=run, step=1, name="reward/mean", value=0.125)
    page.goto(reverse("run-list") + "?metrics=reward/mean&status=running,succeeded")
    row = page.locator(f"tr[data-run-id='{run.pk}']")
    metric_cell = row.locator("td[data-metric='reward/mean']")
    expect(metric_cell).to_have_text("0.125")
    page.evaluate("window.__notReloaded = true")

    Run.objects.filter(pk=run.pk).update(status="succeeded", step=6, latest_reward=0.5)
    MetricPoint.objects.create(run=run, step=6, name="reward/mean", value=0.75)
    run.tags.add(Tag.objects.create(name="baseline"))
    expect(metric_cell).to_have_text("0.75", timeout=POLL_WAIT_MS)
    expect(row.locator("td[data-col='status'] .badge")).to_have_text("succeeded")
    expect(row.locator("td[data-col='progress']")).to_contain_text("6/6")
    expect(row.locator("td[data-col='progress'] .progress-bar")).to_have_attribute("style", re.compile(r"width: 100%"))
    expect(row.locator("td[data-col='reward']")).to_have_text("0.5")
    expect(row.locator("td[data-col='tags'] a.tag")).to_have_text("baseline")

    newer = make_run(experiment, status="running", step=2)  # newest first: a new first row
    expect(page.locator("#run-table tbody tr").first).to_have_attribute(
        "data-run-id", str(newer.pk), timeout=POLL_WAIT_MS
    )
    expect(page.locator(f"tr[data-run-id='{newer.pk}'] td[data-metric='reward/mean']")).to_have_text("-")
    expect(page.locator("#runs-count")).to_have_text("2 runs")
    assert page.evaluate("window.__notReloaded") is True


def test_compare_selected_opens_the_compare_page(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    experiment = make_experiment(alice, "cmp-exp")
    first, second, _ = (make_run(experiment, status="succeeded") for _ in range(3))
    page.goto(reverse("run-list"))
    button = page.locator("#compare-selected")
    expect(button).to_be_disabled()
    page.check(f"input[name=run][value='{first.pk}']")
    expect(button).to_be_disabled()  # one run is nothing to compare
    page.check(f"input[name=run][value='{second.pk}']")
    expect(button).to_be_enabled()
    button.click()
    page.wait_for_url(re.compile(r"/runs/compare/\?runs="))
    assert page.url.endswith(f"/runs/compare/?runs={second.pk},{first.pk}")  # in the table's order

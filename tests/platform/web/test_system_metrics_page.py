"""System metrics on the run page: the memory metrics (system/*_bytes: host, process, accelerator in
use and peak) share one "System memory (bytes)" chart, CPU has its own, and a run that reports them
shows them in Chromium (metrics written straight into the database, as the trainer's hooks do)."""

from __future__ import annotations

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments import metric_series
from experiments.models import MetricPoint
from web.dashboard import chart_panels

pytestmark = pytest.mark.django_db(transaction=True)
GIB = 1024**3
MEMORY = [
    "system/host_memory_used_bytes",
    "system/process_rss_bytes",
    "system/device_memory_bytes",
    "system/device_memory_peak_bytes",
]


def test_memory_metrics_share_one_lazy_panel():
    panels = {p["metric"]: p for p in chart_panels()}
    memory = panels["system/host_memory_used_bytes"]
    assert memory["metrics"] == MEMORY and memory["title"] == "System memory (bytes)" and memory["lazy"]
    assert panels["system/cpu_percent"]["metrics"] == ["system/cpu_percent"]
    assert not any(m in p["metrics"] for p in panels.values() if p is not memory for m in MEMORY)


def test_the_run_page_charts_memory(logged_in_page, alice):  # noqa: F811
    metric_series.SERIES_CACHE.clear()
    run = make_run(make_experiment(alice, name="mem"), status="succeeded", step=3)
    values = {
        "system/host_memory_used_bytes": 6 * GIB,
        "system/process_rss_bytes": 2 * GIB,
        "system/device_memory_bytes": 1 * GIB,
        "system/device_memory_peak_bytes": 3 * GIB,
        "system/cpu_percent": 40.0,
        "reward/mean": 0.5,
    }
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, name=name, value=value + s) for s in (1, 2, 3) for name, value in values.items()]
    )
    page = logged_in_page
    page.goto(reverse("run-detail", args=[run.pk]))
    memory = page.locator(".chart[data-metric='system/host_memory_used_bytes']")
    expect(memory).to_be_visible()
    expect(memory).to_have_attribute("data-points", "3")
    assert (
        page.locator("figure[data-panel='system/host_memory_used_bytes'] figcaption").inner_text()
        == "System memory (bytes)"
    )
    traces = memory.evaluate("div => div.data.map(t => [t.name, t.y.length])")
    assert [[name, 3] for name in MEMORY] == [t for t in traces if t[0] in MEMORY]
    cpu = page.locator(".chart[data-metric='system/cpu_percent']")
    expect(cpu).to_be_visible()
    expect(cpu).to_have_attribute("data-points", "3")
    metric_series.SERIES_CACHE.clear()

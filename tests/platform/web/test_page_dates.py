"""Dates and times on the pages in one format, "2026-12-02 07:29:41 UTC": every template writes them
with the `when` filter (web/templatetags/web_tags.py) and every script with formatWhen
(static/web/run_table_format.js, checked against the filter in test_run_table_js.py), never with
Django's own date formats, "3 minutes ago" or the browser's locale."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.urls import reverse
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from alerts.models import AlertDelivery, AlertRule
from experiments.models import Experiment, Run

ROOT = Path(__file__).resolve().parents[3]
AT = dt.datetime(2026, 12, 2, 7, 29, 41, tzinfo=dt.UTC)
SHOWN = "2026-12-02 07:29:41 UTC"


def test_templates_and_scripts_write_dates_one_way():
    found = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            # |date:'c' (ISO 8601) only in attributes, for machines; what people read goes through |when
            shown = re.sub(r"""title="\{\{[^}]*\|date:'c' \}\}\"""", "", line)
            if re.search(r"\|date\b|\|time\b|\|timesince|\|timeuntil|naturaltime", shown):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    for path in sorted((ROOT / "platform" / "static" / "web").glob("*.js")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"toLocale(String|DateString|TimeString)|\.get(Hours|Minutes|Date|FullYear)\(", line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "dates written another way than |when / formatWhen:\n" + "\n".join(found)


@pytest.mark.django_db
def test_the_pages_show_the_one_format(alice_client, alice):
    experiment = make_experiment(alice, "dated")
    Experiment.objects.filter(pk=experiment.pk).update(updated_at=AT)
    run = make_run(experiment, status="running")
    Run.objects.filter(pk=run.pk).update(created_at=AT, heartbeat_at=AT)
    rule = AlertRule.objects.create(owner=alice, events=["failed"], channel="email", target="a@example.com")
    delivery = AlertDelivery.objects.create(rule=rule, run=run, event="failed", key="failed:1", message="m")
    AlertDelivery.objects.filter(pk=delivery.pk).update(created_at=AT, status="sent", sent_at=AT)

    listed = alice_client.get(reverse("experiment-list")).content.decode()
    assert f"<td>{SHOWN}</td>" in listed and " ago<" not in listed
    detail = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert f"updated {SHOWN}" in detail
    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert f'<b id="run-created">{SHOWN}</b>' in page and f'<b id="run-heartbeat">{SHOWN}</b>' in page
    assert "web/run_table_format.js" in page  # formatWhen, for the cells the scripts fill
    runs = alice_client.get(reverse("run-list")).content.decode()
    assert f">{SHOWN}</td>" in runs
    alerts = alice_client.get(reverse("alert-list")).content.decode()
    assert f"<td>{SHOWN}</td>" in alerts and f"sent {SHOWN}" in alerts
    # no other shape of a date on these pages
    for html in (listed, detail, page, runs, alerts):
        text = re.sub(r'title="[^"]*"', "", html)
        assert re.findall(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?(?! UTC)(?!:\d)", text) == []

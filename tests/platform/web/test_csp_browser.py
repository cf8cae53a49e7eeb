"""The Content-Security-Policy in a real browser (Debian's Chromium through Playwright): the pages
load and work under it (charts drawn by Plotly, the run filter's auto-submit, the forms' scripts)
and the browser reports no violation."""

from __future__ import annotations

import re

import pytest
from browser_testlib import CHROMIUM, CHROMIUM_ARGS
from django.db import connections
from django.urls import reverse
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    make_experiment,
    make_run,
)

from experiments.models import MetricPoint

pytestmark = pytest.mark.django_db(transaction=True)


def test_pages_work_under_the_csp_without_violations(live_server, client, alice, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    experiment = make_experiment(alice, "csp-exp")
    run = make_run(experiment, status="running", step=3)
    MetricPoint.objects.bulk_create([MetricPoint(run=run, name="reward/mean", step=s, value=s / 10) for s in range(4)])
    make_run(experiment, status="failed")
    violations: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(base_url=live_server.url).new_page()
        set_browser_waits(page)
        page.on("console", lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None)
        page.on("pageerror", lambda exc: violations.append(str(exc)))
        try:
            page.goto(reverse("login"))
            page.fill("[name=username]", "alice")
            page.fill("[name=password]", "alice-pass-123")
            page.click("#login-submit")
            expect(page.locator("#nav-api-tokens")).to_be_visible()
            response = page.goto(reverse("run-detail", args=[run.pk]))
            assert "script-src 'self'" in response.headers["content-security-policy"]
            expect(page.locator("[data-metric='reward/mean'] .main-svg").first).to_be_visible()  # Plotly drew it
            page.goto(reverse("run-list"))
            page.select_option("select[name=status]", "failed")  # autosubmit.js, no inline handler
            page.wait_for_url("**status=failed**")
            page.goto(reverse("experiment-new"))
            expect(page.locator("#plan-sequences_per_step")).to_have_text("128")  # experiment_form.js ran
            page.goto(reverse("api-tokens"))
            page.fill("[name=name]", "browser")
            page.click("#create-token")
            expect(page.locator("#new-token-key")).to_have_text(re.compile(r"^[0-9a-f]{40}$"))
        finally:
            connections.close_all()
            browser.close()
    assert violations == []

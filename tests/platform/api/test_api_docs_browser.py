"""/api/docs/ in a real browser (Debian's Chromium through Playwright): Swagger UI renders every
operation of the generated schema from this site's own files, with no request to another host and
no Content-Security-Policy violation."""

from __future__ import annotations

import pytest
from browser_testlib import CHROMIUM, CHROMIUM_ARGS
from django.db import connections
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright

from api import openapi

pytestmark = pytest.mark.django_db(transaction=True)


def test_docs_render_every_operation_from_local_files(live_server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    operation_count = sum(len(item) for item in openapi.build()["paths"].values())
    requested: list[str] = []
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(base_url=live_server.url).new_page()
        set_browser_waits(page)
        page.on("request", lambda request: requested.append(request.url))
        page.on("console", lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None)
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        try:
            page.goto("/api/docs/")
            expect(page.locator(".opblock-summary-path[data-path='/api/runs/{pk}']").first).to_be_visible()
            expect(page.locator(".opblock")).to_have_count(operation_count)
        finally:
            connections.close_all()
            browser.close()
    assert problems == []
    outside = [url for url in requested if not url.startswith(live_server.url) and not url.startswith("data:")]
    assert outside == []
    assert f"{live_server.url}/api/schema" in requested

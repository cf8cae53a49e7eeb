"""A Chromium page (Playwright, Debian's /usr/bin/chromium) logged in to the live test server:
the `logged_in_page` fixture (import it), as alice. Script errors on the page fail the test.
`script_evaluator(path)`: a blank page with one script loaded, for tests of a script's pure
functions."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connections
from platform_testlib import set_browser_waits
from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@pytest.fixture
def logged_in_page(live_server, client, alice, monkeypatch):
    """A Chromium page logged in as alice (her session cookie), base URL = the live server."""
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    client.force_login(alice)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(base_url=live_server.url)
        context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
        page = context.new_page()
        set_browser_waits(page)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page
        # The test's own ORM calls ran beside Playwright's event loop, on a connection of that
        # context: close it, or PostgreSQL cannot drop the test database at the end.
        connections.close_all()
        browser.close()
    assert errors == [], f"script errors: {errors}"


@contextlib.contextmanager
def script_evaluator(script: Path) -> Iterator[Callable[[str], object]]:
    """evaluate(expression) -> its value, in a blank Chromium page with `script` loaded."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_script_tag(path=str(script))
        yield lambda expression: page.evaluate(expression)
        browser.close()

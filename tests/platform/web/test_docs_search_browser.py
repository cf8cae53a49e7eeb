"""The docs site's search in a real browser (Debian's Chromium through Playwright) under the platform's
Content-Security-Policy: a folder-style address (/docs/quickstart/) opens the page, a word typed in
the search box lists the pages that hold it, the browser reports no CSP violation and nothing is
fetched from another host (fonts included); at 1280 px and at 390 px (a phone: Chromium's mobile
emulation, where the search box opens from the header's search button)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from browser_testlib import CHROMIUM, CHROMIUM_ARGS
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("width", [390, 1280])
def test_the_docs_search_finds_pages_under_the_csp(live_server, width):
    problems: list[str] = []
    outside: list[str] = []
    here = urlsplit(live_server.url).netloc
    phone = width < 800
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context(
            base_url=live_server.url,
            viewport={"width": width, "height": 844 if phone else 900},
            is_mobile=phone,
            has_touch=phone,
            device_scale_factor=3 if phone else 1,
        )
        page = context.new_page()
        set_browser_waits(page)
        page.on("console", lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None)
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        page.on("request", lambda r: outside.append(r.url) if urlsplit(r.url).netloc not in (here, "") else None)
        try:
            response = page.goto("/docs/quickstart/", timeout=120_000)  # the first visit builds the site
            assert response.ok and page.url.endswith("/docs/quickstart.html")
            assert "script-src 'self'" in response.headers["content-security-policy"]
            assert page.evaluate("innerWidth") == width
            query = page.locator("input[data-md-component='search-query']")
            if phone:  # the box is folded away under the header: the header's search button opens it
                page.locator("label.md-header__button[for='__search']").click()
            query.click()
            query.press_sequentially("checkpoint")  # keys, as typed: the search reads the box on keyup
            results = page.locator(".md-search-result__item")
            expect(results.first).to_be_visible()
            assert results.count() >= 2
            expect(page.locator(".md-search-result__meta")).to_contain_text("matching documents")
            expect(page.locator(".md-search-result mark").first).to_have_text(re.compile("^checkpoint", re.IGNORECASE))
        finally:
            browser.close()
    assert problems == []
    assert outside == []

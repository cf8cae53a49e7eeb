"""The navigation (an API docs link; no horizontal overflow on a 390 px phone) and the API docs
grouped by resource (OpenAPI tags from the URL, not from the Python module)."""

from __future__ import annotations

import pytest
from browser_testlib import CHROMIUM, CHROMIUM_ARGS, logged_in_page  # noqa: F401 (fixture)
from django.db import connections
from django.urls import reverse
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright
from web_testlib import fast_passwords  # noqa: F401 (autouse)

from api import openapi

RESOURCES = {"experiments", "runs", "samples", "checkpoints", "datasets", "models", "account"}


@pytest.mark.parametrize(
    "template, tag",
    [
        ("experiments", "experiments"),
        ("experiments/{pk}", "experiments"),
        ("experiments/{pk}/runs", "runs"),
        ("runs/compare", "runs"),
        ("runs/{pk}/metrics", "runs"),
        ("runs/{pk}/{action}", "runs"),
        ("runs/{pk}/samples", "samples"),
        ("runs/{pk}/samples.jsonl", "samples"),
        ("runs/{pk}/checkpoints/{step}/hf.zip", "checkpoints"),
        ("datasets/{pk}/{action}", "datasets"),
        ("widgets/{pk}/parts", "widgets"),  # a new resource is grouped by its first segment
    ],
)
def test_resource_tag(template, tag):
    assert openapi.resource_tag(template, RESOURCES) == tag


@pytest.mark.django_db
def test_every_operation_is_tagged_by_its_resource():
    document = openapi.build()
    tags = {tag for item in document["paths"].values() for op in item.values() for tag in op["tags"]}
    assert RESOURCES <= tags
    assert not tags & {"views", "compare_views", "sample_views", "checkpoint_views", "dataset_views"}
    order = [t["name"] for t in document["tags"]]  # as api/urls.py lists them
    assert order.index("experiments") < order.index("runs") < order.index("samples") < order.index("account")
    assert sorted(t["name"] for t in document["tags"]) == sorted(tags)
    assert document["paths"]["/api/runs/{pk}/samples.jsonl"]["get"]["tags"] == ["samples"]
    assert document["paths"]["/api/experiments/{pk}/runs"]["post"]["tags"] == ["runs"]


@pytest.mark.django_db
def test_nav_links_the_api_docs(alice_client):
    html = alice_client.get(reverse("experiment-list")).content.decode()
    assert f'href="{reverse("api-docs")}" id="nav-api-docs"' in html


@pytest.mark.django_db(transaction=True)
def test_nav_fits_a_390_px_phone(logged_in_page):  # noqa: F811
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    for url in (reverse("experiment-list"), reverse("experiment-new"), reverse("run-list")):
        page.goto(url)
        header = page.locator("header.topbar")
        assert header.evaluate("el => el.scrollWidth <= el.clientWidth"), url
        links = header.locator("a:visible, button:visible")
        assert links.count() >= 8
        for i in range(links.count()):
            box = links.nth(i).bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (url, links.nth(i).inner_text(), box)
        if url != reverse("run-list"):  # (the runs table itself is wider than a phone: only the bar is checked there)
            assert page.evaluate("document.documentElement.scrollWidth") <= 390, url
    expect(page.locator("#nav-api-docs")).to_be_visible()
    page.click("#nav-api-docs")
    page.wait_for_url("**/api/docs*")


@pytest.mark.django_db(transaction=True)
def test_docs_group_operations_by_resource(live_server, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(base_url=live_server.url).new_page()
        set_browser_waits(page)
        try:
            page.goto("/api/docs/")
            expect(page.locator(".opblock-tag-section").first).to_be_visible()
            names = page.locator(".opblock-tag").evaluate_all("els => els.map(el => el.getAttribute('data-tag'))")
            runs_paths = (
                page.locator("#operations-tag-runs")
                .locator("xpath=..")
                .locator(".opblock-summary-path")
                .all_inner_texts()
            )
            samples_paths = (
                page.locator("#operations-tag-samples")
                .locator("xpath=..")
                .locator(".opblock-summary-path")
                .all_inner_texts()
            )
            expect(page.locator("#docs-home")).to_have_attribute("href", "/")
        finally:
            connections.close_all()
            browser.close()
    assert names[0] == "experiments" and names.index("runs") < names.index("samples") and RESOURCES <= set(names)
    assert "views" not in names and "compare_views" not in names
    assert any(path.endswith("/compare") for path in runs_paths)
    assert samples_paths and all("/samples" in path for path in samples_paths)

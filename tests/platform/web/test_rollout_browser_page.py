"""The rollout browser in Chromium: from the run page's link to the samples, a group's completions
side by side, the same prompt across steps, the eval switch and the next page."""

from __future__ import annotations

from api_testlib import make_run
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from samples_testlib import fill


def test_browse_samples_from_the_run_page(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = make_run(alice, status="succeeded")
    fill(run)
    page.goto(f"/runs/{run.pk}/")
    page.click("#run-samples-link")
    page.wait_for_selector("#samples-browse")
    assert page.locator("#samples-browse tbody tr").count() == 12
    page.fill("input[name=step_min]", "3")
    page.click("#samples-apply")
    page.wait_for_url("**step_min=3**")
    rows = page.locator("#samples-browse tbody tr")
    assert rows.count() == 4 and "s3g0n0" in rows.first.inner_text()
    rows.nth(2).locator(".group-link").click()
    page.wait_for_selector("#sample-group")
    cards = page.locator(".sample-card")
    assert cards.count() == 2
    assert [cards.nth(i).locator(".sample-reward").inner_text() for i in range(2)] == ["0.0", "1.0"]
    page.go_back()
    page.locator("#samples-browse tbody tr").first.locator(".across-link").click()
    page.wait_for_url("**prompt_hash=**")
    across = page.locator("#samples-browse tbody tr")
    assert [across.nth(i).locator("td").first.inner_text() for i in range(across.count())] == [
        "1",
        "1",
        "2",
        "2",
        "3",
        "3",
    ]
    page.click("#sample-kinds [data-kind=eval]")
    page.wait_for_url("**kind=eval**")
    assert page.locator("#samples-browse tbody tr").count() == 3
    page.goto(f"/runs/{run.pk}/samples/?limit=5")  # opens at the newest step: s2g1n1, then step 3
    assert "s2g1n1" in page.locator("#samples-browse tbody tr").first.inner_text()
    page.click("#samples-prev")
    page.wait_for_selector("#samples-next")
    assert "s1g1n0" in page.locator("#samples-browse tbody tr").first.inner_text()
    assert page.get_attribute("#samples-export", "href").startswith(f"/api/runs/{run.pk}/samples.jsonl")

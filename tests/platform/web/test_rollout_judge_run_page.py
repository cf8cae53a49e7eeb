"""The run page's live samples in Chromium show a sample's judge verdict (run.js, from the API's
`judge`): what the judge said, the score, the mode and the reason, all as text nodes (a <script> in
a verdict stays text)."""

from __future__ import annotations

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "<script>window.pwned = 1</script>"


def test_the_run_page_shows_a_samples_judge_verdict(logged_in_page, alice):  # noqa: F811
    run = make_run(make_experiment(alice, name="judged"), status="succeeded", step=1)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    base = {"prompt": "What is 2 + 3?", "answer": "5", "reward": 0.5, "advantage": 0.1}
    yes = {"mode": "yes_no", "score": 0.84, "verdict": "yes", "logprob_yes": -0.2, "logprob_no": -1.7}
    hostile = {"mode": "number", "score": 0.0, "verdict": HOSTILE, "output": HOSTILE, "reason": "no number"}
    hooks.on_samples(
        1,
        [
            {**base, "completion": "5", "reward_details": {"judge": yes}},
            {**base, "completion": "seven", "reward_details": {"judge": hostile}},
            {**base, "completion": "odd details", "reward_details": {"judge": "yes"}},
        ],
    )
    hooks.flush()
    page = logged_in_page
    page.goto(reverse("run-detail", args=[run.pk]))
    blocks = page.locator("#samples-table .judge-verdict")
    expect(blocks).to_have_count(2)  # the odd sample shows none, and the table still renders
    expect(page.locator("#samples-table td", has_text="odd details")).to_have_count(1)
    assert blocks.nth(0).inner_text() == "judge: yes score 0.840 (yes_no)"
    assert "judge-verdict-high" in blocks.nth(0).get_attribute("class")
    assert blocks.nth(1).locator("b").inner_text() == f"judge: {HOSTILE}"
    assert blocks.nth(1).locator(".judge-reason").inner_text() == "no number"
    assert "judge-verdict-high" not in blocks.nth(1).get_attribute("class")
    assert page.evaluate("window.pwned") is None

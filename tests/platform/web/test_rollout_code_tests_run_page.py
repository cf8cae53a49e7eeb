"""The run page's live samples in Chromium show a sample's unit test results (run.js, from the API's
`code_tests`): the summary, a mark per test (✓ / ✗, not colour alone), the statement and the
failure reason, all as text nodes (a <script> in a test stays text)."""

from __future__ import annotations

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_TEST = "assert f('<script>window.pwned = 1</script>') == 1"
TESTS = [
    {"test": "assert clamp(0) == 0", "passed": True, "reason": ""},
    {"test": "assert clamp(-10) == -3", "passed": False, "reason": "AssertionError"},
    {"test": HOSTILE_TEST, "passed": True, "reason": ""},
]


def test_the_run_page_shows_a_samples_test_results(logged_in_page, alice):  # noqa: F811
    run = make_run(make_experiment(alice, name="code"), status="succeeded", step=1)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    base = {"prompt": "Write clamp.", "answer": "", "reward": 0.5, "advantage": 0.1}
    hooks.on_samples(
        1,
        [
            {
                **base,
                "completion": "def clamp(x): ...",
                "reward_details": {"code_tests": TESTS, "other_reward": "OTHER-TEXT"},
            },
            {**base, "completion": "odd details", "reward_details": {"code_tests": "not a list"}},
        ],
    )
    hooks.flush()
    page = logged_in_page
    page.goto(reverse("run-detail", args=[run.pk]))
    block = page.locator("#samples-table .code-tests")
    expect(block).to_have_count(1)  # the odd sample shows none, and the table still renders
    expect(page.locator("#samples-table td", has_text="odd details")).to_have_count(1)
    assert block.locator(".code-tests-summary").inner_text() == "2/3 tests passed"
    assert block.locator(".code-test-mark").all_text_contents() == ["✓", "✗", "✓"]
    assert [c.split()[-1] for c in block.locator(".code-test").evaluate_all("els => els.map(e => e.className)")] == [
        "code-test-passed",
        "code-test-failed",
        "code-test-passed",
    ]
    assert block.locator(".code-test-text").all_text_contents() == [t["test"] for t in TESTS]
    assert block.locator(".code-test-reason").all_text_contents() == ["AssertionError"]
    assert page.evaluate("window.pwned") is None
    assert "OTHER-TEXT" not in page.content()

"""A multi-turn run on its run page in Chromium: the samples table shows an episode turn by
turn (run.js, from the API's `episode`, text nodes only: a <script> in a tool response stays text),
and the env/* metrics are charted together in their lazy charts."""

from __future__ import annotations

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments import metric_series
from experiments.models import MetricPoint
from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = [
    {
        "role": "assistant",
        "text": '<tool_call>{"name": "calculator", "arguments": {"expression": "39 - 28"}}</tool_call>',
        "tokens": 17,
    },
    {"role": "tool", "text": "<tool_response><script>window.pwned = 1</script>11</tool_response>", "tokens": 1},
    {"role": "assistant", "text": "The answer is 11.", "tokens": 6},
]


def test_the_run_page_shows_an_episode_and_charts_env_metrics(logged_in_page, alice):  # noqa: F811
    metric_series.SERIES_CACHE.clear()
    run = make_run(make_experiment(alice, name="calc"), status="succeeded", step=2)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_samples(
        2,
        [
            {
                "prompt": "What is 39 - 28?",
                "completion": "episode text",
                "answer": "11",
                "reward": 1.0,
                "advantage": 0.5,
                "env": "calculator",
                "turns": TURNS,
                "reward_parts": {"math_answer": 1.0, "env/solved": 0.833333},
                "end_reason": "done",
                "tool_calls": 1,
                "tool_errors": 0,
            },
            {"prompt": "What is 2 + 2?", "completion": "plain four", "answer": "4", "reward": 0.0, "advantage": -0.5},
        ],
    )
    hooks.flush()
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, step=s, name=name, value=value)
            for s in (1, 2)
            for name, value in {
                "reward/mean": 0.5,
                "env/turns_mean": 2.0 + s,
                "env/tool_calls_mean": 1.0,
                "env/tool_errors_mean": 0.0,
                "env/tool_use_fraction": 0.5,
            }.items()
        ]
    )
    page = logged_in_page
    page.goto(reverse("run-detail", args=[run.pk]))
    episode = page.locator("#samples-table .episode")
    expect(episode).to_have_count(1)
    assert episode.locator(".turn-role").all_text_contents() == ["tool call", "tool response", "assistant"]
    assert episode.locator(".turn-tokens").all_text_contents() == ["17 tokens", "1 token", "6 tokens"]
    assert episode.locator(".turn-text").nth(1).text_content() == TURNS[1]["text"]  # shown as text, not run
    assert page.evaluate("window.pwned") is None
    assert episode.locator(".turn").nth(1).get_attribute("class") == "turn turn-tool-response"
    summary = episode.locator(".episode-summary").inner_text()
    assert "reward parts: env/solved 0.833, math_answer 1" in summary and "ended by done" in summary
    assert "1 tool call" in summary
    expect(page.locator("#samples-table td", has_text="plain four")).to_have_count(1)  # single-turn: as before
    chart = page.locator(".chart[data-metric='env/turns_mean']")
    expect(chart).to_be_visible()
    expect(chart).to_have_attribute("data-points", "2")
    traces = chart.evaluate("div => div.data.map(t => [t.name, t.y.length])")
    assert traces == [["env/turns_mean", 2], ["env/tool_calls_mean", 2], ["env/tool_errors_mean", 2]]
    expect(page.locator(".chart[data-metric='env/tool_use_fraction']")).to_be_visible()
    expect(page.locator(".chart[data-metric='eval/env/turns_mean']")).to_be_hidden()  # not reported: lazy
    metric_series.SERIES_CACHE.clear()

"""The rollout browser page, /runs/<id>/samples/: server-rendered from the same filters and keyset
pages as the API (experiments.sample_query). With `step` + `group` it shows one group's
completions side by side; with `prompt_hash`, one prompt across steps. A multi-turn sample shows
its episode turn by turn (episode_view), a sample the code_tests reward scored its unit tests
(code_tests_view), and one a judge model scored its verdict (judge_view). No script: the filter
form is a GET form, model text reaches the page only through the template's escaping."""

from __future__ import annotations

import dataclasses
import math
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from experiments import reward_details, sample_episodes, sample_query, sample_text
from experiments.access import get_for_user
from experiments.models import RolloutSample, Run, SampleKind
from experiments.shown_paths import shown

FILTER_FIELDS = (
    "step_min",
    "step_max",
    "reward_min",
    "reward_max",
    "advantage_min",
    "advantage_max",
    "q",
    "end_reason",
    "tool",
)


def sample_badges(extra: dict[str, Any]) -> list[tuple[str, str]]:
    """(css class, text) of the small badges a sample's extra keys call for, from the trainer's
    Rollout.samples: "truncated" when `truncated` is True (the completion ran into max_new_tokens),
    "out of the loss" when `in_loss` is False (overlong filter, or a capped dynamic-sampling step),
    "overlong penalty <p>" with p to 3 significant digits when `overlong_penalty` is a number. An
    absent key (the trainer only writes them when they apply) gives no badge."""
    badges = []
    if extra.get("truncated") is True:
        badges.append(("sample-truncated", "truncated"))
    if extra.get("in_loss") is False:
        badges.append(("sample-out-of-loss", "out of the loss"))
    penalty = extra.get("overlong_penalty")
    if isinstance(penalty, (int, float)) and not isinstance(penalty, bool):
        badges.append(("sample-overlong-penalty", f"overlong penalty {penalty:.3g}"))
    return badges


SHOWN_DIGITS = 3  # significant digits of a reward or an advantage on the page (the API keeps them all)


def short_number(value: Any, digits: int = SHOWN_DIGITS) -> str:
    """A reward or advantage as the page shows it: `digits` significant digits, trailing zeros
    dropped but one decimal kept for a float (0.8333333333333334 -> "0.833", -0.70710678 -> "-0.707",
    1.0 -> "1.0"); no exponent from 0.001 up to 10^(digits+1), where the whole part stays whole
    (1234.5 -> "1234"); an exponent outside (1.234e-05 -> "1.23e-05"); None -> "–"; an int or a
    non-finite float as Python writes it."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0.0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude < -3 or magnitude >= digits + 1:
        return f"{value:.{digits - 1}e}"
    decimals = max(digits - 1 - magnitude, 0)
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0")
        text = text + "0" if text.endswith(".") else text
    return text


TURN_CLASSES = {"assistant": "assistant", "tool call": "tool-call", "tool response": "tool-response", "user": "user"}


def episode_view(extra: dict[str, Any]) -> dict[str, Any] | None:
    """What the page shows of a multi-turn sample's episode (experiments.sample_episodes), or None
    for a single-turn one: its turns in order, each with its label (assistant, tool call, tool
    response, or the environment's own role), css class, text segments and token count; the reward
    parts by name as (name, value to 3 significant digits, the raw value); the end reason, the error (server
    paths shown relative to their root), and the tool calls and errors. Model and environment text is
    left to the template's escaping."""
    episode = sample_episodes.episode(extra)
    if episode is None:
        return None
    turns = []
    for turn in episode["turns"]:
        label = turn["label"]
        turns.append(
            {
                "label": label,
                "css": TURN_CLASSES.get(label, "other"),
                "tokens": turn["tokens"],
                "segments": sample_text.segments(turn["text"]),
            }
        )
    return {
        "env": episode["env"],
        "turns": turns,
        "reward_parts": [
            (name, short_number(value), "" if value is None else value)
            for name, value in sorted(episode["reward_parts"].items())
        ],  # jsonb keeps no order
        "end_reason": episode["end_reason"],
        "error": shown(episode["error"]) if episode["error"] is not None else None,
        "tool_calls": episode["tool_calls"],
        "tool_errors": episode["tool_errors"],
    }


TEST_MARKS = {True: ("passed", "✓"), False: ("failed", "✗"), None: ("unknown", "?")}


def code_tests_view(extra: dict[str, Any]) -> dict[str, Any] | None:
    """What the page shows of a sample's unit test results (experiments.reward_details.code_tests),
    or None when it has none: the summary ("3/5 tests passed"), whether every test passed, and each
    test with its state ("passed", "failed", or "unknown" where the stored value is no bool), its mark
    (✓, ✗, ?: the state is shown by more than colour), its statement, its failure reason, and whether
    it was checked inside the sandbox (a statement, not a value compared outside). Test and
    reason text is left to the template's escaping."""
    tests = reward_details.code_tests(extra)
    if tests is None:
        return None
    shown_tests = []
    for test in tests:
        state, mark = TEST_MARKS[test["passed"]]
        shown_tests.append(
            {
                "state": state,
                "mark": mark,
                "test": test["test"],
                "reason": test["reason"],
                "inside": test["checked"] == "inside",
            }
        )
    return {
        "summary": reward_details.tests_summary(tests),
        "all_passed": all(t["passed"] is True for t in tests),
        "tests": shown_tests,
    }


def judge_view(extra: dict[str, Any]) -> dict[str, Any] | None:
    """What the page shows of a sample's judge verdict (experiments.reward_details.judge), or None when
    it has none: the verdict ("yes", "no", or the number the judge wrote), the score it gave (3
    decimals; "?" when none was stored), the mode and the reason a score is 0 or clipped. Text is
    left to the template's escaping."""
    verdict = reward_details.judge(extra)
    if verdict is None:
        return None
    score = verdict["score"]
    return {**verdict, "score": "?" if score is None else f"{score:.3f}", "high": score is not None and score >= 0.5}


def _row(sample: RolloutSample) -> dict[str, Any]:
    extra = sample.extra if isinstance(sample.extra, dict) else {}
    return {
        "episode": episode_view(extra),
        "code_tests": code_tests_view(extra),
        "judge": judge_view(extra),
        "sample": sample,
        "reward": short_number(sample.reward),
        "advantage": short_number(sample.advantage),
        "generation": extra.get("generation"),
        "badges": sample_badges(extra),
        "prompt_segments": sample_text.prompt_segments(sample.prompt, extra),
        "completion_segments": sample_text.segments(sample.completion),
    }


def multi_turn(run: Run) -> bool:
    """Whether the run's config names an environment other than single_turn (its samples are
    episodes: the page offers the "ended by" and "tool" filters)."""
    env = run.config.get("env") if isinstance(run.config, dict) else None
    name = env.get("name") if isinstance(env, dict) else None
    return isinstance(name, str) and name not in ("", "single_turn")


def _query(params: dict[str, Any]) -> str:
    """`?a=1&b=2` of the parameters that are set."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


def opens_at_newest(filters: sample_query.SampleFilters) -> bool:
    """Whether the browser opens at the newest steps (a page asked for with no cursor): a plain
    browse, not one group, one step, one prompt across steps or a value search (which reads the
    run forward in windows)."""
    return (
        filters.group is None
        and filters.step is None
        and not filters.prompt_hash
        and not sample_query.filters_values(filters)
    )


def group_count(run: Run, filters: sample_query.SampleFilters, shown_count: int, all_query: str) -> dict | None:
    """The group view's "N of G shown": G is the group's size (grpo.num_generations, for training
    samples), `stored` how many the run kept (train.samples_per_step keeps a step's first
    sequences, so a group may be cut short), `needed` the samples_per_step that keeps it whole, and
    `all_query` the address that shows every stored one when a page holds fewer."""
    if filters.group is None or filters.step is None:
        return None
    stored = RolloutSample.objects.filter(run=run, kind=filters.kind, step=filters.step, group=filters.group).count()
    config = run.config if isinstance(run.config, dict) else {}
    size = (config.get("grpo") or {}).get("num_generations") if filters.kind == SampleKind.TRAIN else None
    size = size if isinstance(size, int) and size >= stored else stored
    return {
        "shown": shown_count,
        "size": size,
        "stored": stored,
        "cut": stored < size,
        "needed": size * (filters.group + 1),
        "all_query": all_query if shown_count < stored else None,
    }


@login_required
@require_GET
def run_samples(request, pk: int):
    run = get_for_user(Run.objects.select_related("experiment"), request.user, pk)
    error = None
    try:
        filters = sample_query.parse_filters(request.GET)
        page_request = sample_query.parse_page(request.GET)
        if opens_at_newest(filters):
            page_request = dataclasses.replace(page_request, newest=True)
        page = sample_query.page(run, filters, page_request)
    except sample_query.BadParameter as exc:
        error = str(exc)
        filters, page_request = sample_query.SampleFilters(), sample_query.PageRequest()
        page = sample_query.Page([], None, None)
    current = {name: request.GET.get(name, "") for name in ("kind", "step", "group", "prompt_hash", *FILTER_FIELDS)}
    current["kind"] = filters.kind
    limit = request.GET.get("limit", "")
    rows = [_row(s) for s in page.samples]
    context = {
        "run": run,
        "error": error,
        "filters": filters,
        "current": current,
        "rows": rows,
        "group_view": filters.group is not None,
        "episode_filters": multi_turn(run) or bool(filters.end_reason or filters.tool),
        "end_reasons": sample_episodes.END_REASONS,
        "scanned_to_step": page.scanned_to_step,
        "kinds": [
            (kind, _query({**current, "kind": kind, "step": "", "group": "", "prompt_hash": ""}))
            for kind in SampleKind.values
        ],
        "next_query": _query({**current, "limit": limit, "after": page.next_after}) if page.next_after else None,
        "prev_query": _query({**current, "limit": limit, "before": page.prev_before}) if page.prev_before else None,
        "export_url": reverse("api-run-samples-export", args=[run.pk]) + _query(current),
        "all_query": _query({"kind": filters.kind}),
        "group_count": group_count(run, filters, len(rows), _query({**current, "limit": sample_query.MAX_LIMIT})),
    }
    return render(request, "web/run_samples.html", context)

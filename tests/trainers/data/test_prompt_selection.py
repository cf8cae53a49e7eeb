"""Prompt selection's pure core against hand-computed values: the skip probability of a flat streak,
the per-prompt history and its JSON, the seeded draws, the walk over data positions, and the stream's
dataset indices it walks by."""

from __future__ import annotations

import json

import pytest

from trainers.data.prompt_selection import (
    PromptHistory,
    SkipRule,
    group_outcome,
    history_walk,
    skip_draw,
    walk,
)
from trainers.data.prompt_stream import PromptStream


def test_skip_probability_grows_with_the_streak_up_to_the_cap():
    rule = SkipRule(base_skip_probability=0.5, max_skip_probability=0.9)
    # 1 - 0.5^k: 0.5, 0.75, 0.875, then 0.9375 capped at 0.9
    assert [rule.skip_probability(k) for k in range(5)] == [0.0, 0.5, 0.75, 0.875, 0.9]
    slow = SkipRule(base_skip_probability=0.3, max_skip_probability=0.6)
    # 1 - 0.7 = 0.3, 1 - 0.49 = 0.51, 1 - 0.343 = 0.657 -> 0.6
    assert [slow.skip_probability(k) for k in (1, 2, 3)] == pytest.approx([0.3, 0.51, 0.6])


def test_a_rule_that_could_skip_a_prompt_for_ever_is_refused():
    with pytest.raises(ValueError):
        SkipRule(base_skip_probability=0.5, max_skip_probability=1.0)


def test_group_outcome():
    assert group_outcome(True, [True, False]) == "mixed"
    assert group_outcome(False, [True, True]) == "all_right"
    assert group_outcome(False, [False, False]) == "all_wrong"


def test_history_counts_outcomes_and_the_flat_streak_and_survives_json():
    history = PromptHistory()
    for outcome in ("mixed", "all_wrong", "all_wrong"):
        history.record(7, outcome)
    history.record(3, "all_right")
    assert history.records == {7: [0, 2, 1, 2], 3: [1, 0, 0, 1]}
    assert history.flat_streak(7) == 2 and history.flat_streak(99) == 0
    history.record(7, "mixed")  # a mixed group ends the streak
    assert history.flat_streak(7) == 0 and history.records[7] == [0, 2, 2, 0]
    assert history.counts() == {"all_right": 1, "all_wrong": 2, "mixed": 2}
    back = PromptHistory.from_state(json.loads(json.dumps(history.state())))
    assert back.records == {7: [0, 2, 2, 0], 3: [1, 0, 0, 1]}


def test_draws_depend_only_on_seed_and_position():
    assert skip_draw(0, 5) == skip_draw(0, 5)
    assert skip_draw(0, 5) != skip_draw(1, 5) and skip_draw(0, 5) != skip_draw(0, 6)
    draws = [skip_draw(3, p) for p in range(4000)]
    assert all(0.0 <= d < 1.0 for d in draws)
    assert sum(d < 0.25 for d in draws) / 4000 == pytest.approx(0.25, abs=0.03)


def _index_at(order):
    return lambda position, n: [order[p % len(order)] for p in range(position, position + n)]


def test_walk_skips_where_the_draw_falls_under_the_probability():
    # positions 10.. hold indices 0, 1, 2, 3, 4, 5; index 1's probability 0.5, index 2's 0.875, the rest 0
    probability = {1: 0.5, 2: 0.875}
    draws = {10: 0.1, 11: 0.4, 12: 0.9, 13: 0.0, 14: 0.3, 15: 0.2}
    chosen = walk(10, 3, lambda p, n: [p - 10 + k for k in range(n)], lambda i: probability.get(i, 0.0), draws.get, 100)
    # 10 (index 0, p 0) kept; 11 (0.4 < 0.5) skipped; 12 (0.9 >= 0.875) kept; 13 (p 0) kept
    assert chosen.kept == (10, 12, 13) and chosen.indices == (0, 2, 3)
    assert [chosen.consumed(k) for k in range(4)] == [0, 1, 3, 4]
    assert [chosen.skipped(k) for k in range(4)] == [0, 0, 1, 1]


def test_walk_stops_skipping_after_max_skipped():
    # every prompt would be skipped: the first two are, then the rest are kept
    chosen = walk(0, 3, _index_at([0, 1, 2, 3, 4]), lambda i: 1.0, lambda p: 0.5, 2)
    assert chosen.kept == (2, 3, 4) and chosen.skipped(3) == 2


def test_history_walk_skips_only_prompts_with_a_flat_streak():
    history = PromptHistory()
    for _ in range(10):  # streak 10: p = 0.9, the cap
        history.record(1, "all_wrong")
    history.record(2, "mixed")
    rule = SkipRule(0.5, 0.9)
    order = [1, 2, 3]
    chosen = history_walk(0, 60, _index_at(order), history, rule, seed=0, max_skipped=1000)
    assert set(chosen.indices) == {1, 2, 3}  # index 1 still comes back now and then
    walked = range(chosen.kept[-1] + 1)
    assert all(p in chosen.kept for p in walked if order[p % 3] != 1)  # 2 and 3 are never skipped
    skipped = [p for p in walked if p not in chosen.kept]
    assert skipped == [p for p in walked if p % 3 == 0 and skip_draw(0, p) < 0.9]
    assert len(skipped) > 0.8 * len(walked) / 3  # most of index 1's visits


def test_stream_indices_name_the_examples_it_takes():
    examples = [{"prompt": f"p{i}"} for i in range(7)]
    stream = PromptStream(examples, seed=4)
    indices = stream.indices(5, 10)  # crosses the first epoch's end
    assert sorted(indices[2:9]) == list(range(7))  # positions 7..13: the whole second epoch
    assert [e["prompt"] for e in stream.take(5, 10)] == [f"p{i}" for i in indices]
    assert stream.examples(indices) == stream.take(5, 10)

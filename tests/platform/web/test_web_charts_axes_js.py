"""charts.js's y-axis over several series and its float noise (tests of the pure functions in a real
browser, like test_web_charts_js.py), against hand-computed values: one run's series is never cut to
another's scale, a flat series read back from float32 gets round ticks instead of 9-digit ones, and
the note that says what a chart's edge marks stand for."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from browser_testlib import script_evaluator

CHARTS_JS = Path(__file__).resolve().parents[3] / "platform" / "static" / "web" / "charts.js"
# 0.19 as a float32 read back as a double: what a metric written by the trainer can come back as
F32_019 = 0.1899999976158142


@pytest.fixture(scope="module")
def js():
    with script_evaluator(CHARTS_JS) as evaluate:
        yield evaluate


def close(a, b):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b))


def test_a_short_series_beside_a_long_one_is_not_cut_to_the_long_ones_scale(js):
    # run A: 60 points 0.1 .. 0.159; run B: 3 points 6, 7, 8. Pooled, B's points were 3 of 63, above
    # the 0.95-quantile (0.1589), and the axis stopped at 0.19 (B drawn as triangles on its top edge).
    # Each trace on its own: A is not clipped (spread out), B has fewer than 5 points; the range spans
    # 0.1 .. 8, padded by 5 % of 7.9.
    a = f"{{x: {list(range(1, 61))}, y: {[round(0.1 + i / 1000, 3) for i in range(60)]}}}"
    b = "{x: [1, 2, 3], y: [6, 7, 8]}"
    expression = f"GrpoCharts.robustRange([{a}, {b}])"
    assert close(js(expression), [0.1 - 0.395, 8 + 0.395])
    assert js(f"{expression}.clipped") is False


def test_an_outlier_is_still_clipped_within_its_own_series(js):
    # run A: 19 steps of 0.5 and one of 6.8 (a recompilation): clipped to 0.6 within A, as with one
    # trace; run B: 5 points 0.2 .. 0.3 under it. The range: 0.2 .. 0.6 padded by 0.02, and clipped.
    a = f"{{x: {list(range(1, 21))}, y: {[0.5, 6.8] + [0.5] * 18}}}"
    b = "{x: [1, 2, 3, 4, 5], y: [0.2, 0.22, 0.25, 0.28, 0.3]}"
    expression = f"GrpoCharts.robustRange([{a}, {b}])"
    assert close(js(expression), [0.18, 0.62])
    assert js(f"{expression}.clipped") is True
    # ... but a second run that reaches 7 lifts the top: nothing of A is above it any more
    c = "{x: [1, 2, 3], y: [5, 6, 7]}"
    assert js(f"GrpoCharts.robustRange([{a}, {c}]).clipped") is False


def test_float_noise_is_one_value_with_round_ticks(js):
    # eval/accuracy 0.19 at three steps, one read back from float32: the span (2.4e-9) is noise, so
    # the range is 0.19 +- 5 % as for a flat series, and its ticks are round (they were 0.189999998,
    # 0.189999999, 0.19)
    series = f"{{x: [10, 20, 30], y: [0.19, {F32_019}, 0.19]}}"
    lo, hi = js(f"GrpoCharts.robustRange([{series}])")
    middle = (0.19 + F32_019) / 2
    assert close([lo, hi], [middle * 0.95, middle * 1.05])
    ticks = js(f"GrpoCharts.niceTicks({lo}, {hi}, 5)")
    assert ticks == [0.185, 0.19, 0.195]
    assert js(f"GrpoCharts.tickLabels({ticks})") == ["0.185", "0.19", "0.195"]
    # the same on a log axis (log10 units, +-0.5 as for one value)
    lo, hi = js(f"GrpoCharts.robustRange([{series}], {{log: true}})")
    assert close([lo, hi], [math.log10(middle) - 0.5, math.log10(middle) + 0.5])
    # a real difference of a thousandth stays a range of its own
    assert close(js("GrpoCharts.robustRange([{x: [1, 2], y: [0.19, 0.191]}])"), [0.18995, 0.19105])


def test_the_edge_note_says_what_the_marks_stand_for(js):
    assert js("GrpoCharts.edgeNote(0, 0)") == ""
    assert js("GrpoCharts.edgeNote(1, 0)") == "1 point above the axis (\u25b2 on its top edge; hover for the values)"
    assert js("GrpoCharts.edgeNote(3, 2)") == (
        "3 points above the axis (\u25b2 on its top edge; hover for the values); "
        "2 non-finite points (NaN or inf: red, at the edge)"
    )

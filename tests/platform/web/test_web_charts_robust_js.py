"""charts.js's y-axis (tests of the pure functions in a real browser, like test_web_charts_js.py),
against hand-computed values: the outlier-proof y-range, compile-step marks and metric order; over
several series, one run's series is never cut to another's scale; a flat series read back from
float32 gets round ticks instead of 9-digit ones; and the note that says what a chart's edge marks
stand for."""

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


def test_quantile(js):
    # numpy's linear definition: position (n - 1) q in the sorted values
    assert js("GrpoCharts.quantile([5, 1, 4, 2, 3], 0.95)") == pytest.approx(4.8)  # 4 + 0.8 x (5 - 4)
    assert js("GrpoCharts.quantile([3, 1, 2], 0.5)") == 2
    assert js("GrpoCharts.quantile([], 0.5)") is None


def test_a_second_compile_step_does_not_flatten_a_timing_chart(js):
    # 20 steps: step 1 compiles (13 s, left out by skipFirst), step 3 again (6.8 s), the rest 0.5 s.
    # 19 points: q = the min(0.95, 1 - 1.5/19) = 0.921-quantile = 0.5; 6.8 - 0.5 > 4 x 0 -> clipped:
    # top = 0.5 + 0.2 x max(0, 0.5) = 0.6; range 0.5..0.6 padded by 5 % of 0.1.
    y = [13, 0.5, 6.8] + [0.5] * 17
    expression = f"GrpoCharts.robustRange([{{x: {list(range(1, 21))}, y: {y}, skipFirst: true}}])"
    assert close(js(expression), [0.495, 0.605])
    assert js(f"{expression}.clipped") is True


def test_spread_out_values_are_not_clipped(js):
    # a rising reward: max - min = 0.9 is not above 4 x (q - min)
    expression = (
        "GrpoCharts.robustRange([{x: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "
        "y: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]}])"
    )
    assert close(js(expression), [0.055, 1.045])
    assert js(f"{expression}.clipped") is False
    # fewer than 5 points: never clipped (the first of 4 is the top)
    assert close(js("GrpoCharts.robustRange([{x: [0, 1, 2, 3], y: [30, 0.5, 0.7, 0.6]}])"), [-0.975, 31.475])
    # log axes are not clipped either (log already shows orders of magnitude)
    assert (
        js("GrpoCharts.robustRange([{x: [1, 2, 3, 4, 5, 6], y: [1, 1, 1, 1, 1, 100]}], {log: true}).clipped") is False
    )


def test_compile_steps_and_their_marks(js):
    # median of [13, 0.5, 6.8, 0.5, 0.5, 0.6] = 0.55; above 3 x 0.55 = 1.65: indices 0 and 2
    assert js("GrpoCharts.compileSteps([13, 0.5, 6.8, 0.5, 0.5, 0.6])") == [0, 2]
    assert js("GrpoCharts.compileSteps([13, 0.5])") == []  # too few to tell
    assert js("GrpoCharts.compileSteps([null, NaN, 1, 1, 1])") == []
    assert js("[GrpoCharts.marksCompile('timing/step_s'), GrpoCharts.marksCompile('throughput/tokens_per_s')]") == [
        True,
        False,
    ]
    # marks: step 1 above the axis top (0.6) sits on it; step 3 (under the top) is a compile mark at its value
    marks = js("GrpoCharts.outlierMarks([1, 2, 3, 4], [13, 0.5, 0.59, 0.5], 0.6, [0, 2], 'step')")
    assert marks["x"] == [1, 3] and marks["y"] == [0.6, 0.59]
    assert marks["text"] == ["step 1: 13 (slow: likely compilation)", "step 3: 0.59 (slow: likely compilation)"]
    assert marks["symbol"] == ["triangle-up", "diamond-open"]
    # without compile steps, only the points above the axis
    marks = js("GrpoCharts.outlierMarks([1, 2], [5, 0.5], 1, [], 'step')")
    assert marks["x"] == [1] and marks["text"] == ["step 1: 5 (above the axis)"]


def test_metric_order_puts_the_key_metrics_first_then_groups_by_prefix(js):
    names = [
        "timing/step_s",
        "accuracy",
        "kl",
        "reward/std",
        "eval/accuracy",
        "reward/mean",
        "reward/exact_match",
        "loss/policy",
        "zeta/x",
        "eval/pass@1",
        "entropy",
        "alpha/y",
        "system/cpu_percent",
    ]
    assert js(f"GrpoCharts.orderMetrics({names})") == [
        "reward/mean",
        "accuracy",
        "eval/accuracy",  # the key metrics
        "reward/exact_match",
        "reward/std",  # reward/*
        "eval/pass@1",  # eval/*
        "entropy",
        "kl",  # no prefix
        "loss/policy",
        "timing/step_s",
        "system/cpu_percent",
        "alpha/y",
        "zeta/x",  # unknown prefixes, alphabetical
    ]
    assert js("[GrpoCharts.metricGroup('reward/std'), GrpoCharts.metricGroup('kl')]") == ["reward", ""]


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

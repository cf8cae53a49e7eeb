"""charts.js's outlier-proof y-range, compile-step marks and metric order (tests of the pure
functions in a real browser, like test_web_charts_js.py), against hand-computed values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from browser_testlib import script_evaluator

CHARTS_JS = Path(__file__).resolve().parents[3] / "platform" / "static" / "web" / "charts.js"


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

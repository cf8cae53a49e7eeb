"""charts.js's pure functions (one module for the run page and the compare page) in a real browser
(Debian's Chromium through Playwright), against hand-computed values: EMA smoothing, number and
tick formatting that keeps a value's magnitude, tick placement, and the y-range that leaves a
timing chart's first step (compilation) out."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from browser_testlib import script_evaluator

CHARTS_JS = Path(__file__).resolve().parents[3] / "platform" / "static" / "web" / "charts.js"


@pytest.fixture(scope="module")
def js():
    """evaluate(expression) -> its value, with window.GrpoCharts loaded into a blank page."""
    with script_evaluator(CHARTS_JS) as evaluate:
        yield evaluate


def close(a, b):
    return len(a) == len(b) and all((x is None and y is None) or math.isclose(x, y, rel_tol=1e-9) for x, y in zip(a, b))


def test_ema_against_hand_computed_values(js):
    # w = 0.5: s1 = 0.5 -> 0.5 / (1 - 0.5) = 1; s2 = 0.25 + 1 = 1.25 -> 1.25 / 0.75 = 5/3;
    # s3 = 0.625 + 1.5 = 2.125 -> 2.125 / 0.875 = 17/7
    assert close(js("GrpoCharts.ema([1, 2, 3], 0.5)"), [1.0, 5 / 3, 17 / 7])
    # w = 0.9 on a step 0 -> 10: s1 = 0 -> 0; s2 = 1 -> 1 / 0.19
    assert close(js("GrpoCharts.ema([0, 10], 0.9)"), [0.0, 1 / 0.19])
    # a constant stays itself (the debiasing), and weight 0 is the raw series
    assert close(js("GrpoCharts.ema([4, 4, 4, 4], 0.95)"), [4.0, 4.0, 4.0, 4.0])
    assert js("GrpoCharts.ema([3, 1, 2], 0)") == [3, 1, 2]
    # a gap (null) stays a gap and does not move the average: the next value is the 2nd one seen
    assert close(js("GrpoCharts.ema([1, null, 2], 0.5)"), [1.0, None, 5 / 3])


@pytest.mark.parametrize(
    "value, text",
    [
        (1e-3, "1e-3"),
        (2.5e-5, "2.5e-5"),
        (-3e-4, "-3e-4"),
        (0.5, "0.5"),
        (12.345, "12.3"),
        (0.0123, "0.0123"),
        (123456, "1.23e5"),
        (0, "0"),
        (1, "1"),
        (-0.25, "-0.25"),
    ],
)
def test_format_value_keeps_the_magnitude(js, value, text):
    assert js(f"GrpoCharts.formatValue({value!r})") == text


def test_format_value_of_missing_and_infinite(js):
    assert js("[GrpoCharts.formatValue(null), GrpoCharts.formatValue(NaN), GrpoCharts.formatValue(-Infinity)]") == [
        "-",
        "-",
        "-inf",
    ]


def test_tick_labels_one_style_per_axis(js):
    # a learning rate between 0 and 1e-3: exponents, never a row of zeros
    assert js("GrpoCharts.tickLabels([0, 2e-4, 4e-4, 6e-4, 8e-4, 1e-3])") == [
        "0",
        "2e-4",
        "4e-4",
        "6e-4",
        "8e-4",
        "1e-3",
    ]
    assert js("GrpoCharts.tickLabels([1e-3, 1.5e-3, 2e-3])") == ["1e-3", "1.5e-3", "2e-3"]
    assert js("GrpoCharts.tickLabels([0, 0.2, 0.4])") == ["0", "0.2", "0.4"]
    assert js("GrpoCharts.tickLabels([0, 5000, 10000])") == ["0", "5000", "10000"]
    assert js("GrpoCharts.tickLabels([0, 500000, 1000000])") == ["0", "5e5", "1e6"]


def test_nice_ticks(js):
    assert js("GrpoCharts.niceTicks(0, 1e-3, 5)") == [0, 0.0002, 0.0004, 0.0006, 0.0008, 0.001]
    assert js("GrpoCharts.niceTicks(0.13, 0.87, 5)") == [0.2, 0.4, 0.6, 0.8]
    assert js("GrpoCharts.niceTicks(-1, 1, 4)") == [-1, -0.5, 0, 0.5, 1]
    assert js("GrpoCharts.niceTicks(3, 3, 5)") == [3]


def test_log_ticks(js):
    assert js("GrpoCharts.logTicks(1e-5, 1)") == [1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1]
    assert js("GrpoCharts.logTicks(0.15, 6)") == [0.2, 0.5, 1, 2, 5]  # under two decades: 1-2-5
    assert js("GrpoCharts.logTicks(0, 1)") == []


def test_robust_range_leaves_the_first_timing_point_out(js):
    # step times 30 s (compilation), then 0.5 .. 0.7 s: the range pads 0.5..0.7 by 5 % (0.01)
    timing = "{x: [0, 1, 2, 3], y: [30, 0.5, 0.7, 0.6], skipFirst: true}"
    assert close(js(f"GrpoCharts.robustRange([{timing}])"), [0.49, 0.71])
    # without skipFirst the compile step is the top of the range: 0.5..30, padding 1.475
    assert close(js("GrpoCharts.robustRange([{x: [0, 1, 2, 3], y: [30, 0.5, 0.7, 0.6]}])"), [-0.975, 31.475])
    # only the points inside an x window count; log ranges are log10 and ignore values <= 0
    assert close(js("GrpoCharts.robustRange([{x: [0, 1, 2], y: [5, 1, 3]}], {xRange: [1, 2]})"), [0.9, 3.1])
    assert close(js("GrpoCharts.robustRange([{x: [0, 1, 2], y: [-1, 0.01, 100]}], {log: true})"), [-2.2, 2.2])
    assert js("GrpoCharts.robustRange([{x: [0], y: [null]}])") is None
    assert [js(f"GrpoCharts.skipsFirstPoint({m!r})") for m in ("timing/step_s", "throughput/tokens_per_s", "loss")] == [
        True,
        True,
        False,
    ]


def test_metric_values_from_the_api_and_their_non_finite_marks(js):
    assert js(
        '["NaN", "Infinity", "-Infinity", 0.5, null, "x"].map(GrpoCharts.metricValue)'
        '.map(v => v === null ? null : String(v))'
    ) == ["NaN", "Infinity", "-Infinity", "0.5", None, None]
    # NaN and +inf at the top edge, -inf at the bottom, each with its hover text; finite points unmarked
    marks = js('GrpoCharts.nonFiniteMarks([1, 2, 3, 4, 5], [0.5, NaN, Infinity, -Infinity, null], [-1, 2], "step")')
    assert marks == {"x": [2, 3, 4], "y": [2, 2, -1], "text": ["step 2: NaN", "step 3: inf", "step 4: -inf"]}
    assert js("GrpoCharts.nonFiniteMarks([1], [1], [0, 1])") == {"x": [], "y": [], "text": []}


def test_plot_text_escapes_what_plotly_would_read_as_markup(js):
    assert (
        js("""GrpoCharts.plotText('<a href="x">it\\'s & </a>')""")
        == "&lt;a href=&#34;x&#34;&gt;it&#39;s &amp; &lt;/a&gt;"
    )
    assert js("[GrpoCharts.plotText(null), GrpoCharts.plotText(3), GrpoCharts.plotText('lr 1e-3')]") == [
        "",
        "3",
        "lr 1e-3",
    ]

"""bench/learning_curves.py with a calculator run: the tool-use share of each evaluation is
read beside eval/accuracy, the before/after table's cells match hand-computed values, the table and the
third panel appear only when a run reports eval/env/tool_use_fraction, and runs without it are unchanged."""

import json
import subprocess
import sys

from tests.bench.test_learning_curves_script import SCRIPT, _run_dir, _script


def _notool(root):
    """Evaluations at steps 0, 10, 20: accuracy 0.02, 0.05, 0.08; no tool-use metric."""
    rows = [{"step": 0, "eval/accuracy": 0.02}]
    for step in range(1, 21):
        row = {"step": step, "reward/mean": 0.1, "timing/step_s": 40.0}
        if step in (10, 20):
            row["eval/accuracy"] = {10: 0.05, 20: 0.08}[step]
        rows.append(row)
    return _run_dir(root, "calculator-arith-notool", rows)


def _tool(root):
    """Evaluations at steps 0, 10, 20: accuracy 0.03, 0.21, 0.40 and tool use 0.00, 0.55, 0.90 (the
    training steps report their own env/tool_use_fraction, which is not the eval's)."""
    evals = {0: (0.03, 0.0), 10: (0.21, 0.55), 20: (0.40, 0.90)}
    rows = []
    for step in range(0, 21):
        row = {"step": step}
        if step >= 1:
            row.update({"reward/mean": 0.2, "env/tool_use_fraction": 0.33, "timing/step_s": 60.0})
        if step in evals:
            row["eval/accuracy"], row["eval/env/tool_use_fraction"] = evals[step]
        rows.append(row)
    return _run_dir(root, "calculator-arith", rows)


def test_tool_use_is_read_per_evaluation(tmp_path):
    lc = _script()
    tool, notool = lc.read_run(_tool(tmp_path)), lc.read_run(_notool(tmp_path))
    assert tool.eval_steps == [0, 10, 20] and tool.eval_tool_use == [0.0, 0.55, 0.90] and tool.has_tool_use
    assert notool.eval_tool_use == [None, None, None] and not notool.has_tool_use
    # The budget cut keeps the two lists aligned: 500 completions = after step 11 (48 a step).
    short = lc.read_run(str(tmp_path / "calculator-arith"), max_completions=500)
    assert short.eval_steps == [0, 10] and short.eval_tool_use == [0.0, 0.55] and short.steps == 11


def test_before_after_matches_hand_computed_values(tmp_path):
    lc = _script()
    rows = lc.before_after([lc.read_run(_notool(tmp_path)), lc.read_run(_tool(tmp_path))])
    notool, tool = rows
    assert (notool["accuracy_before"], notool["accuracy_after"]) == (0.02, 0.08)
    assert abs(notool["accuracy_change"] - 0.06) < 1e-12 and notool["after_vs_first"] == 0.0
    assert notool["tool_use_before"] is None and notool["tool_use_change"] is None
    assert (tool["accuracy_before"], tool["accuracy_after"], tool["steps"]) == (0.03, 0.40, 20)
    assert abs(tool["accuracy_change"] - 0.37) < 1e-12
    assert (tool["tool_use_before"], tool["tool_use_after"]) == (0.0, 0.90) and abs(
        tool["tool_use_change"] - 0.9
    ) < 1e-12
    # The target: the tool run's final accuracy 0.40 against 0.08 without the tool, +32 points.
    assert abs(tool["after_vs_first"] - 0.32) < 1e-12
    table = lc.before_after_table(rows).splitlines()
    assert table[0].endswith("| eval acc after vs calculator-arith-notool (pts) |")
    assert table[2] == "| calculator-arith-notool | 20 | 0.02 | 0.08 | +6.0 | — | — | — | +0.0 |"
    assert table[3] == "| calculator-arith | 20 | 0.03 | 0.40 | +37.0 | 0.00 | 0.90 | +90.0 | +32.0 |"


def test_from_runs_prints_both_tables_and_a_three_panel_png(tmp_path):
    notool, tool = _notool(tmp_path), _tool(tmp_path)
    png = tmp_path / "out" / "calculator.png"
    out = subprocess.run(
        [sys.executable, SCRIPT, "--from-runs", notool, tool, "--png", str(png), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("| run | completions sampled |")
    assert lines[2] == "| calculator-arith-notool | 960 | 20 | 0.02 | 0.08 | 0.08 | — | — | — | 40.0 |"
    assert json.loads(lines[4])[1]["last_accuracy"] == 0.40
    assert lines[5] == "" and lines[6].startswith("| run | steps | eval acc before |")
    assert lines[9] == "| calculator-arith | 20 | 0.03 | 0.40 | +37.0 | 0.00 | 0.90 | +90.0 | +32.0 |"
    assert abs(json.loads(lines[10])[1]["after_vs_first"] - 0.32) < 1e-12
    assert lines[11] == f"plot: {png}"
    from PIL import Image

    with Image.open(png) as image:  # three panels: 19 x 5 inches at 120 dpi
        assert image.size == (19 * 120, 5 * 120)


def test_runs_without_the_tool_metric_keep_the_old_output(tmp_path):
    notool = _notool(tmp_path)
    png = tmp_path / "two.png"
    out = subprocess.run(
        [sys.executable, SCRIPT, "--from-runs", notool, "--png", str(png)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert "eval acc before" not in out and len(out.splitlines()) == 4
    from PIL import Image

    with Image.open(png) as image:  # the two panels of before
        assert image.size == (13 * 120, 5 * 120)

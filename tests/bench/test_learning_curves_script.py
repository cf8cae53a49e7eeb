"""bench/learning_curves.py on two hand-written run dirs: the table's cumulative completions and
completions to +10 points match values counted by hand, the budget cut, and the PNG is written."""

import importlib.util
import json
import os
import subprocess
import sys

import yaml

from tests.conftest import ROOT

SCRIPT = os.path.join(ROOT, "bench", "learning_curves.py")


def _script():
    spec = importlib.util.spec_from_file_location("learning_curves", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["learning_curves"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run_dir(root, name, rows, prompts_per_step=8, num_generations=6, tail=""):
    run_dir = root / name
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump(
            {"seed": 0, "batch": {"prompts_per_step": prompts_per_step}, "grpo": {"num_generations": num_generations}}
        )
    )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return str(run_dir)


def _plain(root):
    """8 prompts x G=6 = 48 completions a step, no dynamic metric: after steps 2, 4, 6 the count is
    96, 192, 288. Base 0.05, so +10 points is 0.15, first reached at step 6 (0.20): 288 completions."""
    rows = [{"step": 0, "eval/accuracy": 0.05}]
    accuracy = {2: 0.08, 4: 0.12, 6: 0.20}
    for step in range(1, 7):
        row = {"step": step, "reward/mean": 0.1, "timing/step_s": float(step)}  # median of 1..6 = 3.5
        if step in accuracy:
            row["eval/accuracy"] = accuracy[step]
        rows.append(row)
    # A row rewritten after a resume (the later one wins) and a line cut short by a kill.
    rows.insert(3, {"step": 2, "reward/mean": 0.0, "eval/accuracy": 0.99})
    rows[2], rows[3] = rows[3], rows[2]
    return _run_dir(root, "plain", rows, tail='{"step": 7, "eval/acc')


def _dynamic(root):
    """dynamic/prompts_sampled 24, 16, 8 with G=6 (consumed fewer: what was generated counts): 144, 96,
    48 completions, cumulative 144, 240, 288. Base 0.04, evals 0.10, 0.16, 0.18: +10 points (0.14)
    first at step 2, 240 completions."""
    rows = [
        {"step": 0, "eval/accuracy": 0.04},
        {
            "step": 1,
            "dynamic/prompts_sampled": 24,
            "dynamic/prompts_consumed": 21,
            "eval/accuracy": 0.10,
            "timing/step_s": 30.0,
        },
        {
            "step": 2,
            "dynamic/prompts_sampled": 16,
            "dynamic/prompts_consumed": 11,
            "eval/accuracy": 0.16,
            "timing/step_s": 20.0,
        },
        {
            "step": 3,
            "dynamic/prompts_sampled": 8,
            "dynamic/prompts_consumed": 8,
            "eval/accuracy": 0.18,
            "timing/step_s": 10.0,
        },
    ]
    return _run_dir(root, "dynamic", rows)


def test_completions_in_a_step():
    lc = _script()
    assert lc.completions_in_step({"dynamic/prompts_sampled": 24.0, "dynamic/prompts_consumed": 20.0}, 8, 6) == 144
    assert lc.completions_in_step({"dynamic/prompts_consumed": 20.0}, 8, 6) == 120
    assert lc.completions_in_step({"reward/mean": 0.5}, 8, 6) == 48


def test_curves_and_summary_match_hand_counts(tmp_path):
    lc = _script()
    plain, dynamic = lc.read_run(_plain(tmp_path)), lc.read_run(_dynamic(tmp_path))
    assert plain.eval_completions == [0, 96, 192, 288] and plain.eval_accuracy == [0.05, 0.08, 0.12, 0.20]
    assert plain.eval_steps == [0, 2, 4, 6] and plain.total_completions == 288 and plain.steps == 6
    assert dynamic.eval_completions == [0, 144, 240, 288] and dynamic.total_completions == 288
    rows = lc.summarize([plain, dynamic])
    assert [r["completions_to_target"] for r in rows] == [288, 240]
    assert [r["steps_to_target"] for r in rows] == [6, 2]
    assert rows[0]["median_step_s"] == 3.5 and rows[1]["median_step_s"] == 20.0
    assert abs(rows[1]["ratio_to_first"] - 240 / 288) < 1e-12
    assert (rows[0]["first_accuracy"], rows[0]["last_accuracy"], rows[0]["best_accuracy"]) == (0.05, 0.20, 0.20)
    # One base for both: 0.05 + 0.10 = 0.15 is still first passed at 288 and at 240.
    fixed = lc.summarize([plain, dynamic], gain=0.10, base_accuracy=0.05)
    assert [r["completions_to_target"] for r in fixed] == [288, 240]
    # A gain nobody reaches.
    assert [r["completions_to_target"] for r in lc.summarize([plain, dynamic], gain=0.5)] == [None, None]


def test_budget_cuts_each_curve_after_the_step_that_reaches_it(tmp_path):
    lc = _script()
    # 200 completions: plain reaches it at step 5 (240), dynamic at step 2 (240).
    plain = lc.read_run(_plain(tmp_path), max_completions=200)
    dynamic = lc.read_run(_dynamic(tmp_path), max_completions=200)
    assert (plain.steps, plain.total_completions, plain.eval_completions) == (5, 240, [0, 96, 192])
    assert (dynamic.steps, dynamic.total_completions, dynamic.eval_completions) == (2, 240, [0, 144, 240])
    assert [r["completions_to_target"] for r in lc.summarize([plain, dynamic])] == [None, 240]


def test_from_runs_prints_the_table_and_writes_a_png(tmp_path):
    plain, dynamic = _plain(tmp_path), _dynamic(tmp_path)
    png = tmp_path / "out" / "curves.png"
    out = subprocess.run(
        [sys.executable, SCRIPT, "--from-runs", plain, dynamic, "--png", str(png), "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("| run | completions sampled | steps |") and "completions to +10 pts" in lines[0]
    assert "| steps to +10 pts |" in lines[0]
    assert lines[2] == "| plain | 288 | 6 | 0.05 | 0.20 | 0.20 | 288 | 1.00 | 6 | 3.5 |"
    assert lines[3] == "| dynamic | 288 | 3 | 0.04 | 0.18 | 0.18 | 240 | 0.83 | 2 | 20.0 |"
    assert [r["completions_to_target"] for r in json.loads(lines[4])] == [288, 240]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_help_and_bad_arguments():
    help_text = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, check=True).stdout
    for words in ("--max-completions", "--from-runs", "dynamic/prompts_sampled", "configs/algo-grpo.yaml"):
        assert words in help_text
    refused = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
    assert refused.returncode == 2 and "--from-runs" in refused.stderr


def test_runs_sharing_a_folder_name_are_told_apart_by_their_parent():
    lc = _script()
    assert lc.run_names(
        ["var/curves/algo-grpo", "var/curves/algo-grpo-dynamic", "var/curves-1round/algo-grpo-dynamic/"]
    ) == ["algo-grpo", "curves/algo-grpo-dynamic", "curves-1round/algo-grpo-dynamic"]


def test_a_selection_run_counts_only_generated_prompts_and_reports_what_it_saved(tmp_path):
    """Prompt selection skipped 0, 3 and 5 prompts (0, 18, 30 completions at G=6) while generating 8 a
    step: 48 completions a step, 144 in all, and 48 / 3 = 16 saved per step; base 0.05, +10 points
    at step 3."""
    lc = _script()
    rows = [{"step": 0, "eval/accuracy": 0.05}]
    for step, skipped, accuracy in ((1, 0, 0.08), (2, 3, 0.12), (3, 5, 0.16)):
        rows.append(
            {
                "step": step,
                "selection/prompts_skipped": skipped,
                "selection/completions_saved": 6 * skipped,
                "eval/accuracy": accuracy,
            }
        )
    selection = lc.read_run(_run_dir(tmp_path, "select", rows))
    assert selection.eval_completions == [0, 48, 96, 144] and selection.completions_saved == 48
    plain_row, select_row = lc.summarize([lc.read_run(_plain(tmp_path)), selection])
    assert plain_row["saved_per_step"] is None and select_row["saved_per_step"] == 16
    assert select_row["completions_to_target"] == 144 and select_row["ratio_to_first"] == 144 / 288
    table = lc.markdown_table([plain_row, select_row]).splitlines()
    assert table[0].endswith("| completions saved / step |")
    assert table[2].endswith("| — |") and table[3].endswith("| 16.0 |")

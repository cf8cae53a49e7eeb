"""Learning curves: held-out accuracy against completions sampled, one line per run, as a PNG and a
markdown table (plain GRPO against GRPO with DAPO's dynamic sampling, then GSPO and
CISPO, then LoRA against full fine-tuning, same seed, same budget of sampled completions).

    # train each config in var/curves/<config name>/ (resuming a run dir that has checkpoints), then draw
    .venv/bin/python bench/learning_curves.py configs/algo-grpo.yaml configs/algo-dapo.yaml \\
        --max-completions 7200 [--out-dir var/curves] [--set dotted.path=value ...]
    # only read finished (or running) run dirs and draw
    .venv/bin/python bench/learning_curves.py --from-runs var/curves/algo-grpo var/curves/algo-dapo

Completions sampled. A step samples dynamic/prompts_sampled x G completions (every prompt dynamic
sampling generated, those carried to the next step included: what the step
cost); without that metric dynamic/prompts_consumed x G, and without either (no dynamic sampling)
batch.prompts_per_step x G (G = grpo.num_generations, both read from the run dir's config.yaml).
Prompt selection (rollout.prompt_selection) skips prompts before generating them: they are in neither
count (a step without dynamic sampling still generates prompts_per_step prompts), and the completions
they would have cost (selection/completions_saved) get a column of their own, per step.
An evaluation at step s is placed at the cumulative count after step s (step 0, before training, at 0).

Budget. --max-completions N pauses each run after the first step whose cumulative count reaches N (a
checkpoint is written; the count can pass N by less than one step's completions), and, reading run
dirs, cuts every curve at that same step. The curve ends at the last evaluation up to there, so keep
eval.every_steps small enough (the algo-*.yaml configs evaluate every 240 completions, or every step).

Table columns: completions sampled (the run's total, after the cut), steps, the first, last and best
eval/accuracy, `to +X pts`: the completions sampled when eval/accuracy first reached the run's first
evaluation + --gain (default 0.10, ten points; --base-accuracy fixes the base instead), `vs first`:
that count over the first run's (the target for dynamic sampling: <= 0.5), `steps to +X pts`:
the training step of that evaluation, and the median timing/step_s. The PNG (default
OUT_DIR/learning_curves.png, matplotlib's Agg backend) shows each run's eval/accuracy against
completions sampled (left) and against training steps (right), with the base + gain line.

Tool use (configs/calculator-arith.yaml against configs/calculator-arith-notool.yaml). When a
run's evaluations report eval/env/tool_use_fraction (the share of held-out episodes with at least one
tool call: calculator runs only), the PNG gets a third panel, that share against training steps, and a
second table follows the first: each run's eval/accuracy and tool-use share before (its first evaluation,
step 0 with eval.before_training) and after (its last), the change, and its last accuracy minus the first
run's ("vs first run": list the run without the tool first, and the cell of the tool run is the gain the
target asks +15 points of). A run without the metric shows "—" for tool use.

    .venv/bin/python bench/learning_curves.py configs/calculator-arith-notool.yaml configs/calculator-arith.yaml \\
        --png var/curves/calculator.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PROMPTS_SAMPLED = "dynamic/prompts_sampled"
PROMPTS_CONSUMED = "dynamic/prompts_consumed"
EVAL_ACCURACY = "eval/accuracy"
EVAL_TOOL_USE = "eval/env/tool_use_fraction"
STEP_SECONDS = "timing/step_s"
COMPLETIONS_SAVED = "selection/completions_saved"


@dataclasses.dataclass
class Curve:
    """One run's learning curve.

    eval_completions[i], eval_accuracy[i]: cumulative completions sampled when the i-th evaluation ran,
    and its eval/accuracy. total_completions: sampled over the run's `steps` steps (after the budget cut).
    eval_tool_use[i]: that evaluation's eval/env/tool_use_fraction, None where the row has none (a run
    without a tool has None everywhere). completions_saved: selection/completions_saved summed over the
    steps (None for a run without prompt selection).
    """

    name: str
    run_dir: str
    eval_steps: list[int]
    eval_completions: list[int]
    eval_accuracy: list[float]
    total_completions: int
    steps: int
    median_step_s: float | None
    eval_tool_use: list[float | None] = dataclasses.field(default_factory=list)
    completions_saved: int | None = None

    @property
    def has_tool_use(self) -> bool:
        """Whether any evaluation of this run reported the tool-use share."""
        return any(value is not None for value in self.eval_tool_use)


def completions_in_step(row: dict, prompts_per_step: int, num_generations: int) -> int:
    """Completions sampled in one step: dynamic/prompts_sampled x G; without it dynamic/prompts_consumed x G;
    without either prompts_per_step x G."""
    prompts = row.get(PROMPTS_SAMPLED, row.get(PROMPTS_CONSUMED, prompts_per_step))
    return int(round(prompts)) * num_generations


def read_metrics(run_dir: str) -> list[dict]:
    """metrics.jsonl's rows (one per step, "step" in each), in step order; a line cut short by a kill is
    skipped, and of two rows of one step the later wins (as after a resume)."""
    by_step: dict[int, dict] = {}
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "step" in row:
                by_step[int(row["step"])] = row
    return [by_step[step] for step in sorted(by_step)]


def read_batch_shape(run_dir: str) -> tuple[int, int]:
    """(batch.prompts_per_step, grpo.num_generations) from the run dir's config.yaml (the trainer writes
    it at the start with every default filled in)."""
    import yaml

    with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    return int(config["batch"]["prompts_per_step"]), int(config["grpo"]["num_generations"])


def curve_from_rows(
    name: str,
    run_dir: str,
    rows: list[dict],
    prompts_per_step: int,
    num_generations: int,
    max_completions: int | None = None,
) -> Curve:
    """The curve of metrics rows: cumulative completions after each training step (a row with step >= 1;
    the step-0 row is the evaluation before training), cut after the first step that reaches
    max_completions."""
    total = 0
    steps = 0
    evals: list[tuple[int, int, float, float | None]] = []
    step_seconds = []
    saved = None
    for row in rows:
        step = int(row["step"])
        if step >= 1:
            total += completions_in_step(row, prompts_per_step, num_generations)
            if COMPLETIONS_SAVED in row:
                saved = (saved or 0) + int(round(row[COMPLETIONS_SAVED]))
            steps = step
            if STEP_SECONDS in row:
                step_seconds.append(float(row[STEP_SECONDS]))
        if EVAL_ACCURACY in row:
            tool_use = float(row[EVAL_TOOL_USE]) if EVAL_TOOL_USE in row else None
            evals.append((step, total, float(row[EVAL_ACCURACY]), tool_use))
        if max_completions is not None and total >= max_completions:
            break
    return Curve(
        name=name,
        run_dir=run_dir,
        eval_steps=[s for s, _, _, _ in evals],
        eval_completions=[c for _, c, _, _ in evals],
        eval_accuracy=[a for _, _, a, _ in evals],
        total_completions=total,
        steps=steps,
        median_step_s=statistics.median(step_seconds) if step_seconds else None,
        eval_tool_use=[t for _, _, _, t in evals],
        completions_saved=saved,
    )


def run_names(run_dirs: list[str]) -> list[str]:
    """Each run dir's name in the table and the legend: its folder's name, or, where two runs share
    it (the same config trained into two --out-dir folders), parent/name."""
    bases = [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    return [
        b if bases.count(b) == 1 else os.path.join(os.path.basename(os.path.dirname(os.path.normpath(d))), b)
        for d, b in zip(run_dirs, bases)
    ]


def read_run(run_dir: str, max_completions: int | None = None, name: str | None = None) -> Curve:
    """The curve of a run dir (metrics.jsonl and config.yaml), named after the dir unless `name`."""
    prompts_per_step, num_generations = read_batch_shape(run_dir)
    return curve_from_rows(
        name or os.path.basename(os.path.normpath(run_dir)),
        run_dir,
        read_metrics(run_dir),
        prompts_per_step,
        num_generations,
        max_completions,
    )


def first_reach(curve: Curve, target_accuracy: float) -> tuple[int, int] | None:
    """(completions sampled, training step) at the first evaluation with eval/accuracy >= target_accuracy
    (None: never). A tolerance of 1e-9 keeps 0.19 + 0.10 reachable by an accuracy of 0.29 written as a
    float."""
    for completions, step, accuracy in zip(curve.eval_completions, curve.eval_steps, curve.eval_accuracy):
        if accuracy >= target_accuracy - 1e-9:
            return completions, step
    return None


def summarize(curves: list[Curve], gain: float = 0.10, base_accuracy: float | None = None) -> list[dict]:
    """One row per curve: run, completions, steps, first/last/best accuracy, target (base + gain, base the
    run's first evaluation unless base_accuracy), completions_to_target and steps_to_target (where the
    first evaluation at or above the target ran), ratio_to_first (this run's completions_to_target / the
    first curve's, None when either is None), median_step_s, saved_per_step (prompt selection's
    completions saved per step, None without it)."""
    rows = []
    for curve in curves:
        accuracies = curve.eval_accuracy
        base = base_accuracy if base_accuracy is not None else (accuracies[0] if accuracies else None)
        target = None if base is None else base + gain
        reached = None if target is None else first_reach(curve, target)
        rows.append(
            {
                "run": curve.name,
                "completions": curve.total_completions,
                "steps": curve.steps,
                "first_accuracy": accuracies[0] if accuracies else None,
                "last_accuracy": accuracies[-1] if accuracies else None,
                "best_accuracy": max(accuracies) if accuracies else None,
                "target_accuracy": target,
                "completions_to_target": None if reached is None else reached[0],
                "steps_to_target": None if reached is None else reached[1],
                "median_step_s": curve.median_step_s,
                "saved_per_step": None if curve.completions_saved is None else curve.completions_saved / curve.steps,
            }
        )
    first = rows[0]["completions_to_target"] if rows else None
    for row in rows:
        mine = row["completions_to_target"]
        row["ratio_to_first"] = mine / first if mine is not None and first else None
    return rows


def _cell(value, spec: str = "") -> str:
    return "—" if value is None else format(value, spec)


def markdown_table(rows: list[dict], gain: float = 0.10) -> str:
    """The summary rows as a markdown table (accuracies with 2 decimals, ratios with 2, seconds with 1), with
    a last column of completions saved per step when a run used prompt selection."""
    points = f"{gain * 100:g}"
    saving = any(r.get("saved_per_step") is not None for r in rows)
    lines = [
        f"| run | completions sampled | steps | first eval acc | last eval acc | best eval acc "
        f"| completions to +{points} pts | vs first | steps to +{points} pts | median s/step |"
        + (" completions saved / step |" if saving else ""),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: |" if saving else ""),
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['completions']} | {r['steps']} | {_cell(r['first_accuracy'], '.2f')} "
            f"| {_cell(r['last_accuracy'], '.2f')} | {_cell(r['best_accuracy'], '.2f')} "
            f"| {_cell(r['completions_to_target'])} | {_cell(r['ratio_to_first'], '.2f')} "
            f"| {_cell(r['steps_to_target'])} | {_cell(r['median_step_s'], '.1f')} |"
            + (f" {_cell(r.get('saved_per_step'), '.1f')} |" if saving else "")
        )
    return "\n".join(lines)


def before_after(curves: list[Curve]) -> list[dict]:
    """One row per curve: run, steps, accuracy_before / accuracy_after (its first and last evaluation;
    None without one), accuracy_change (after - before), tool_use_before / tool_use_after (those two
    evaluations' tool-use share, None where not reported), tool_use_change, and after_vs_first: this run's
    accuracy_after minus the first curve's (0.0 for the first; None where either has no evaluation)."""
    rows = []
    for curve in curves:
        accuracies, tool_use = curve.eval_accuracy, curve.eval_tool_use
        before = accuracies[0] if accuracies else None
        after = accuracies[-1] if accuracies else None
        use_before = tool_use[0] if tool_use else None
        use_after = tool_use[-1] if tool_use else None
        rows.append(
            {
                "run": curve.name,
                "steps": curve.steps,
                "accuracy_before": before,
                "accuracy_after": after,
                "accuracy_change": None if before is None or after is None else after - before,
                "tool_use_before": use_before,
                "tool_use_after": use_after,
                "tool_use_change": None if use_before is None or use_after is None else use_after - use_before,
            }
        )
    first_after = rows[0]["accuracy_after"] if rows else None
    for row in rows:
        mine = row["accuracy_after"]
        row["after_vs_first"] = None if mine is None or first_after is None else mine - first_after
    return rows


def _points(value: float | None) -> str:
    """A difference of shares in percentage points, signed: 0.17 -> "+17.0"."""
    return "—" if value is None else f"{value * 100:+.1f}"


def before_after_table(rows: list[dict]) -> str:
    """`before_after`'s rows as a markdown table: shares with 2 decimals, changes in signed points."""
    first = rows[0]["run"] if rows else ""
    lines = [
        "| run | steps | eval acc before | eval acc after | change (pts) | tool use before | tool use after "
        f"| change (pts) | eval acc after vs {first} (pts) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['steps']} | {_cell(r['accuracy_before'], '.2f')} | {_cell(r['accuracy_after'], '.2f')} "
            f"| {_points(r['accuracy_change'])} | {_cell(r['tool_use_before'], '.2f')} "
            f"| {_cell(r['tool_use_after'], '.2f')} | {_points(r['tool_use_change'])} "
            f"| {_points(r['after_vs_first'])} |"
        )
    return "\n".join(lines)


def plot(curves: list[Curve], path: str, rows: list[dict] | None = None, title: str | None = None) -> str:
    """Draws eval/accuracy against completions sampled (left) and against training steps (middle), one
    line per curve, and each distinct base + gain target of `rows` as a dashed line; when a curve reports
    the tool-use share, a third panel draws it against training steps (runs without it are left out of
    that panel). Writes a PNG at `path` and returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tool_curves = [curve for curve in curves if curve.has_tool_use]
    if tool_curves:
        fig, axes = plt.subplots(1, 3, figsize=(19, 5), dpi=120)
        by_completions, by_steps, tool_use = axes
        by_steps.sharey(by_completions)
    else:
        fig, (by_completions, by_steps) = plt.subplots(1, 2, figsize=(13, 5), dpi=120, sharey=True)
    targets = sorted({round(r["target_accuracy"], 6) for r in rows or [] if r["target_accuracy"] is not None})
    for ax, x_of, x_label in (
        (by_completions, lambda c: c.eval_completions, "completions sampled"),
        (by_steps, lambda c: c.eval_steps, "training steps"),
    ):
        for curve in curves:
            ax.plot(x_of(curve), curve.eval_accuracy, marker="o", markersize=3, label=curve.name)
        for target in targets:
            ax.axhline(target, linestyle="--", linewidth=0.8, color="grey")
            ax.annotate(
                f"base + gain = {target:.2f}",
                (0, target),
                textcoords="offset points",
                xytext=(4, 3),
                fontsize=8,
                color="grey",
            )
        ax.set_xlabel(x_label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    by_completions.set_ylabel("held-out accuracy (eval/accuracy, greedy)")
    by_completions.set_title("against completions sampled (what the runs cost)")
    by_steps.set_title("against training steps")
    by_completions.legend()
    if tool_curves:
        # Same colour per run in every panel: the n-th curve takes the n-th colour of the cycle.
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for index, curve in enumerate(curves):
            if not curve.has_tool_use:
                continue
            points = [(s, t) for s, t in zip(curve.eval_steps, curve.eval_tool_use) if t is not None]
            tool_use.plot(
                [s for s, _ in points],
                [t for _, t in points],
                marker="o",
                markersize=3,
                label=curve.name,
                color=colors[index % len(colors)],
            )
        tool_use.set_xlabel("training steps")
        tool_use.set_ylabel("share of held-out episodes with a tool call")
        tool_use.set_ylim(0, 1.02)
        tool_use.grid(True, alpha=0.3)
        tool_use.set_title("tool use (eval/env/tool_use_fraction)")
        tool_use.legend()
    fig.suptitle(title or "Held-out accuracy")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# -- training the configs -------------------------------------------------------------------------


def run_config(config_path: str, run_dir: str, sets: list[str], max_completions: int | None) -> str:
    """Trains `config_path` (with --set overrides) into run_dir, through the trainer's Python API with the
    CLI's run files and progress bar; resumes from run_dir's newest checkpoint. With max_completions, a
    control pauses the run after the step whose cumulative completions reach it. Returns the status."""
    from trainers.cli import ProgressBarHooks, SignalControl
    from trainers.config import load_config
    from trainers.loop.compile_cache import enable_compilation_cache
    from trainers.loop.run_files import RunFilesHooks
    from trainers.loop.trainer import train
    from trainers.step.hooks import Action, Control, Hooks, MultiHooks

    config = load_config(config_path, sets)
    prompts_per_step, num_generations = config.batch.prompts_per_step, config.grpo.num_generations
    signals = SignalControl()

    class BudgetHooks(Hooks):
        """Counts the completions sampled so far (re-read from metrics.jsonl on resume)."""

        def __init__(self):
            self.completions = 0

        def on_resume(self, step: int) -> None:
            rows = read_metrics(run_dir) if os.path.exists(os.path.join(run_dir, "metrics.jsonl")) else []
            self.completions = sum(
                completions_in_step(r, prompts_per_step, num_generations) for r in rows if 1 <= r["step"] <= step
            )

        def on_step(self, step: int, metrics: dict[str, float]) -> None:
            if step >= 1:
                self.completions += completions_in_step(metrics, prompts_per_step, num_generations)

    budget = BudgetHooks()

    class BudgetControl(Control):
        """PAUSE once the budget is spent (checked between steps); else what Ctrl-C asked for."""

        def poll(self) -> Action:
            if max_completions is not None and budget.completions >= max_completions:
                return Action.PAUSE
            return signals.poll()

    enable_compilation_cache()
    hooks = MultiHooks(RunFilesHooks(run_dir), budget, ProgressBarHooks())
    result = train(config, run_dir, hooks=hooks, control=BudgetControl())
    print(
        f"{config_path}: {result.status} at step {result.final_step}, {budget.completions} completions sampled, "
        f"run dir {run_dir}",
        file=sys.stderr,
    )
    return result.status


def run_dir_for(config_path: str, out_dir: str) -> str:
    """OUT_DIR/<config file name without .yaml>: configs/algo-dapo.yaml -> var/curves/algo-dapo."""
    return os.path.join(out_dir, os.path.splitext(os.path.basename(config_path))[0])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Held-out accuracy against completions sampled: train configs (or read run dirs), then "
        "print a markdown table and draw a PNG, one line per run.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "configs",
        nargs="*",
        metavar="CONFIG",
        help="experiment configs to train, one after another, each in OUT_DIR/<config name> "
        "(a run dir with checkpoints resumes; a finished one is only read)",
    )
    p.add_argument(
        "--from-runs",
        nargs="+",
        default=None,
        metavar="RUN_DIR",
        help="train nothing: read these run dirs (metrics.jsonl, config.yaml) and draw",
    )
    p.add_argument("--out-dir", default="var/curves", help="where the run dirs and the PNG go (default var/curves)")
    p.add_argument(
        "--max-completions",
        type=int,
        default=None,
        metavar="N",
        help="budget of sampled completions per run: pause each run after the step that reaches N, "
        "and cut read curves there too",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="dotted.path=value",
        help="override a config field in every trained config (repeatable)",
    )
    p.add_argument(
        "--gain",
        type=float,
        default=0.10,
        help="accuracy gain the `to +X pts` column looks for, over the base (default 0.10)",
    )
    p.add_argument(
        "--base-accuracy",
        type=float,
        default=None,
        help="the base of that gain for every run (default: each run's first evaluation)",
    )
    p.add_argument("--png", default=None, help="PNG path (default OUT_DIR/learning_curves.png)")
    p.add_argument("--title", default=None, help="plot title")
    p.add_argument("--json", action="store_true", help="also print the table's rows as one JSON line")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.configs) == bool(args.from_runs):
        parser.error("give CONFIG files to train, or --from-runs RUN_DIR ... to read (one of the two)")
    if args.max_completions is not None and args.max_completions < 1:
        parser.error("--max-completions must be >= 1")
    if args.configs:
        run_dirs = []
        for config_path in args.configs:
            run_dir = run_dir_for(config_path, args.out_dir)
            run_config(config_path, run_dir, args.set, args.max_completions)
            run_dirs.append(run_dir)
    else:
        run_dirs = args.from_runs
    curves = [read_run(d, args.max_completions, name) for d, name in zip(run_dirs, run_names(run_dirs))]
    rows = summarize(curves, args.gain, args.base_accuracy)
    png = plot(curves, args.png or os.path.join(args.out_dir, "learning_curves.png"), rows, args.title)
    print(markdown_table(rows, args.gain))
    if args.json:
        print(json.dumps(rows))
    if any(curve.has_tool_use for curve in curves):
        changes = before_after(curves)
        print()
        print(before_after_table(changes))
        if args.json:
            print(json.dumps(changes))
    print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

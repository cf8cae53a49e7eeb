"""`python -m trainers validate|run|make-dataset`: the command-line face of the trainer.

validate CONFIG [--set k=v ...]   print the derived batch plan; exit 2 with one line per problem
run CONFIG --out DIR [--set ...]  train with a progress bar; writes DIR/metrics.jsonl, checkpoints,
                                  summary.json; resumes from DIR's newest checkpoint. Ctrl-C pauses
                                  (checkpoint, then exit 0); a second Ctrl-C stops at once.
make-dataset arithmetic-words --out FILE [--count N] [--seed S]
                                  write generated word problems as JSONL, and held-out eval
                                  problems beside them (FILE with .eval before the suffix)
"""

from __future__ import annotations

import argparse
import signal
import sys

from trainers.config import ConfigError, ExperimentConfig, load_config
from trainers.loop.hooks import Action, Control, Hooks, MultiHooks, RunInfo, TrainResult

EXIT_INVALID = 2


class ProgressBarHooks(Hooks):
    """A tqdm bar: step, reward, tokens/s and ETA; log lines printed above it."""

    def __init__(self):
        self.bar = None

    def on_start(self, info: RunInfo) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=info.max_steps, initial=info.start_step, unit="step", dynamic_ncols=True,
                        desc="train", file=sys.stderr)

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        fields = {"reward": f"{metrics['reward/mean']:.3f}", "acc": f"{metrics['accuracy']:.2f}",
                  "tok/s": f"{metrics['throughput/tokens_per_s']:.0f}"}
        if "eval/accuracy" in metrics:
            fields["eval_acc"] = f"{metrics['eval/accuracy']:.2f}"
        self.bar.set_postfix(fields, refresh=False)
        self.bar.update(step - self.bar.n)

    def on_log(self, message: str, level: str = "info") -> None:
        from tqdm import tqdm

        tqdm.write(f"[{level}] {message}", file=sys.stderr)

    def on_end(self, result: TrainResult) -> None:
        if self.bar is not None:
            self.bar.close()


class SignalControl(Control):
    """First SIGINT/SIGTERM asks for a pause (checkpoint and return); a second one exits at once."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\n[info] stopping after this step: saving a checkpoint (Ctrl-C again to quit now)", file=sys.stderr)

    def poll(self) -> Action:
        return Action.PAUSE if self.requested else Action.CONTINUE


def _load(args) -> ExperimentConfig | None:
    try:
        return load_config(args.config, args.set)
    except ConfigError as exc:
        print(f"{args.config}: invalid config ({len(exc.problems)} problem{'s' * (len(exc.problems) != 1)})",
              file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def cmd_validate(args) -> int:
    config = _load(args)
    if config is None:
        return EXIT_INVALID
    from trainers.data.examples import load_examples
    from trainers.loop.plan import make_plan

    d = config.data
    train_examples, eval_examples = load_examples(d.task, d.train_path, d.eval_path, d.train_prompts,
                                                  d.eval_prompts, config.seed)
    print(f"{args.config}: valid")
    print(make_plan(config, len(train_examples)).describe())
    print(f"  eval prompts                  {len(eval_examples)}")
    if args.print_config:
        print("\nResolved config:\n" + config.to_yaml())
    return 0


def cmd_run(args) -> int:
    config = _load(args)
    if config is None:
        return EXIT_INVALID
    from trainers.loop.run_files import RunFilesHooks
    from trainers.loop.trainer import train

    hooks = MultiHooks(RunFilesHooks(args.out), ProgressBarHooks())
    result = train(config, args.out, hooks=hooks, control=SignalControl())
    print(f"{result.status}: step {result.final_step}, params_digest {result.params_digest[:16]}..., "
          f"summary in {args.out}/summary.json")
    return 0


DATASETS = ("arithmetic-words",)


def cmd_make_dataset(args) -> int:
    from trainers.data import word_problems

    if args.count < 1 or args.eval_count < 0:
        print("make-dataset: --count must be >= 1 and --eval-count >= 0", file=sys.stderr)
        return EXIT_INVALID
    eval_out = args.eval_out or word_problems.eval_path_for(args.out)
    try:
        train_rows, eval_rows = word_problems.make_train_eval(args.seed, args.count, args.eval_count)
    except ValueError as exc:
        print(f"make-dataset: {exc}", file=sys.stderr)
        return EXIT_INVALID
    word_problems.write_jsonl(args.out, train_rows)
    print(f"{args.out}: {len(train_rows)} {args.name} problems (seed {args.seed})")
    if eval_rows:
        word_problems.write_jsonl(eval_out, eval_rows)
        print(f"{eval_out}: {len(eval_rows)} held-out problems (no prompt in common with {args.out})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainers", description="GRPO training of language models in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add_config_args(p):
        p.add_argument("config", help="experiment config (YAML)")
        p.add_argument("--set", action="append", default=[], metavar="dotted.path=value",
                       help="override a config field, e.g. --set batch.prompts_per_step=8 (repeatable)")

    p = sub.add_parser("validate", help="check a config and print its batch plan",
                       description="Check a config; print the derived batch plan, or one line per problem (exit 2).")
    add_config_args(p)
    p.add_argument("--print-config", action="store_true", help="also print the config with every default filled in")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("run", help="train (or resume) under a config",
                       description="Train under a config, writing metrics.jsonl, checkpoints/ and summary.json to "
                                   "--out. If --out holds checkpoints, resume from the newest one.")
    add_config_args(p)
    p.add_argument("--out", required=True, help="run directory")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("make-dataset", help="write a generated dataset as JSONL (train and held-out eval)",
                       description="Write a generated dataset as JSONL, one {\"prompt\", \"answer\", ...} per line, "
                                   "and a held-out eval file whose prompts never appear in the training file.")
    p.add_argument("name", choices=DATASETS, help="arithmetic-words: one- and two-step arithmetic word problems "
                                                  "(use with the math_answer reward)")
    p.add_argument("--out", required=True, help="training JSONL file to write")
    p.add_argument("--count", type=int, default=1000, help="training problems (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0): the same seed writes the same files")
    p.add_argument("--eval-out", default=None, help="held-out JSONL file (default: OUT with .eval before the "
                                                    "suffix, e.g. words.eval.jsonl)")
    p.add_argument("--eval-count", type=int, default=200, help="held-out problems (default 200; 0 = none)")
    p.set_defaults(func=cmd_make_dataset)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)

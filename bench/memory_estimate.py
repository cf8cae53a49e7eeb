"""The step-memory estimate against the measured peak, config by config.

    .venv/bin/python bench/memory_estimate.py [--configs demo,w1,smollm2-arith,r1] [--steps 3] [--write]

For each config (configs/NAME.yaml): the estimate `python -m trainers validate` prints
(`trainers.loop.memory_estimate.step_memory` over the config's data, with its longest prompt), and
the peak resident memory of `python -m trainers run configs/NAME.yaml --set train.max_steps=STEPS`
with no checkpoints and no evaluation, the memory of training steps (ru_maxrss of the process, from
wait4), without the compilation cache: a first run compiles every program, which costs more memory
than a later run that reads them back (the demo: 0.68 against 0.50 GiB); then estimate / measured. The SmolLM2 configs
need the model first: `.venv/bin/python -m trainers fetch-model smollm2-135m-instruct`.

Anchor: the measured peak itself. Target: 1.0 <= estimate / peak < 1.3 on every config (at
2.2x the peak, the estimate refused the SmolLM2 demo on a 12-15 GiB machine; under 1.0 it
would let a run start that a worker cannot hold). --write records the peaks in
docs/perf/memory-peaks.json, which tests/trainers/loop/test_memory_estimate.py checks the estimate against, so a
change to the estimate or to a config that leaves the band fails there.

The last line is `ratios NAME=X ...`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tunix_harness import clean_env, wait_with_peak_rss  # noqa: E402

CONFIGS = ("demo", "w1", "smollm2-arith", "r1")
PEAKS_FILE = os.path.join(ROOT, "docs", "perf", "memory-peaks.json")
BAND = (1.0, 1.3)
GIB = 1024**3


def estimate_of(config_path: str, overrides: tuple[str, ...] = ()):
    """The StepMemory `validate` prints for the config at `config_path` (with `overrides`, as --set)."""
    from trainers.config import load_config
    from trainers.data.examples import load_examples
    from trainers.loop.memory_estimate import step_memory
    from trainers.rollout.prompt_fit import config_prompt_fit
    from trainers.step.plan import make_plan

    config = load_config(config_path, list(overrides))
    d = config.data
    train, evaluation = load_examples(d.task, d.train_path, d.eval_path, d.train_prompts, d.eval_prompts, config.seed)
    fit = config_prompt_fit(config, train, evaluation)
    if fit.problem is not None:
        raise ValueError(f"{config_path}: {fit.problem}")
    return step_memory(config, make_plan(config, len(train)), fit.longest_training_tokens)


def measure_peak(config_path: str, steps: int) -> int:
    """Peak RSS in bytes of `steps` training steps of the config (no checkpoint, no evaluation)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "trainers",
            "run",
            config_path,
            "--out",
            os.path.join(out, "run"),
            "--set",
            f"train.max_steps={steps}",
            "--set",
            "checkpoint.every_steps=0",
            "--set",
            "eval.every_steps=0",
            "--set",
            "eval.before_training=false",
        ]
        env = {**clean_env(), "TRAINERS_COMPILATION_CACHE": "0"}  # a first run: it compiles every program
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stderr = proc.stderr.read()
        status, peak = wait_with_peak_rss(proc)
    if status != 0 or peak is None:
        raise RuntimeError(f"{' '.join(cmd)} exited {status}:\n{stderr[-2000:]}")
    return peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help="comma-separated names of configs/NAME.yaml (default: %(default)s)"
    )
    parser.add_argument("--steps", type=int, default=3, help="training steps per run (default %(default)s)")
    parser.add_argument("--write", action="store_true", help=f"record the measured peaks in {PEAKS_FILE}")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]

    rows = {}
    for name in names:
        path = os.path.join("configs", f"{name}.yaml")
        estimate = estimate_of(os.path.join(ROOT, path)).total_bytes
        print(f"{name}: estimate {estimate / GIB:.2f} GiB; running {args.steps} steps ...", flush=True)
        peak = measure_peak(path, args.steps)
        rows[name] = {"estimate_bytes": estimate, "peak_rss_bytes": peak, "ratio": estimate / peak}
        print(f"{name}: peak RSS {peak / GIB:.2f} GiB, estimate / peak {estimate / peak:.3f}", flush=True)

    print(f"\n{'config':<16}{'estimate GiB':>14}{'peak GiB':>10}{'ratio':>8}   target {BAND[0]} <= ratio < {BAND[1]}")
    for name, row in rows.items():
        met = "met" if BAND[0] <= row["ratio"] < BAND[1] else "MISSED"
        print(
            f"{name:<16}{row['estimate_bytes'] / GIB:>14.2f}{row['peak_rss_bytes'] / GIB:>10.2f}"
            f"{row['ratio']:>8.3f}   {met}"
        )
    if args.write:
        record = {
            "measured": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "steps": args.steps,
            "how": "bench/memory_estimate.py: peak RSS of `python -m trainers run` with no checkpoint and "
            "no evaluation",
            "peak_rss_bytes": {name: row["peak_rss_bytes"] for name, row in rows.items()},
        }
        if os.path.exists(PEAKS_FILE):
            with open(PEAKS_FILE, encoding="utf-8") as f:
                old = json.load(f)
            record["peak_rss_bytes"] = {**old.get("peak_rss_bytes", {}), **record["peak_rss_bytes"]}
        with open(PEAKS_FILE, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"wrote {PEAKS_FILE}")
    print("ratios " + " ".join(f"{name}={row['ratio']:.3f}" for name, row in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

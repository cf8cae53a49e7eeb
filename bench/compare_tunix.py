#!/usr/bin/env python3
"""Compare our GRPO trainer with google-tunix 0.1.7 on benchmark workload W1.

Run with the project's venv python from the repository root:

    .venv/bin/python bench/compare_tunix.py [--steps N] [--skip-install]

What it does, in one run:
  1. creates (or reuses) the Tunix virtual environment bench/.tunix-venv from
     the pinned bench/requirements-tunix.txt. A hash stamp inside the venv
     records what was installed; the venv is rebuilt only when the
     requirements file (or the base interpreter) changes. pip's output is
     shown as it installs (bench/tunix_harness.py, shared with
     bench/compare_tunix_real.py).
  2. runs bench/tunix_w1.py inside that venv (Tunix's own Qwen3 model,
     RLCluster with the vanilla rollout engine and GRPOLearner) and reads its
     final JSON line.
  3. runs our side: `<project python> bench/grpo_step.py --config
     configs/w1.yaml --steps N --json` and reads its final JSON line
     (it must contain "seconds_per_step").
  4. prints both seconds-per-step figures, ratio=ours/tunix,
     speedup=tunix/ours and the target line (ours <= 0.5 x tunix).

The two sides run one after the other, never at the same time. The machine
load average is printed before each side because the figures are wall-clock
times on a shared 2-core machine. Each side's peak resident memory is
printed when it exits (and is in --json's output as "peak_rss_bytes").

Exit status: 0 when both sides were measured (whether or not the target is
met, unless --require-target), 1 when the target is missed under
--require-target, 2 when our side failed, 3 when the Tunix side failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tunix_harness import (
    BENCH,
    REPO,
    ensure_venv,
    loadavg,
    our_python,
    run_and_parse,
    say,
)
from tunix_harness import (
    cpu_note as _cpu_note,
)

TUNIX_SCRIPT = BENCH / "tunix_w1.py"
OUR_SCRIPT = BENCH / "grpo_step.py"
TARGET_RATIO = 0.5


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=(
            "Run benchmark workload W1 (GRPO, Qwen3-style 4x256 model, 8 "
            "prompts x G=4, 32+64 tokens, CPU float32) on google-tunix 0.1.7 "
            "and on our trainer, and print seconds per step and the ratio. "
            "Target: ours <= 0.5 x tunix."
        ),
    )
    p.add_argument(
        "--steps",
        type=int,
        default=6,
        help="GRPO steps per side; the first 2 are warm-up and the median of the rest is reported (default 6)",
    )
    p.add_argument(
        "--skip-install", action="store_true", help="use bench/.tunix-venv as it is (no stamp check, no pip)"
    )
    p.add_argument("--config", default="configs/w1.yaml", help="our trainer's config for W1 (default configs/w1.yaml)")
    p.add_argument(
        "--python",
        default=None,
        help="base interpreter for the Tunix venv (default: found automatically, Python 3.11 preferred, then 3.12)",
    )
    p.add_argument("--tunix-only", action="store_true", help="measure the Tunix side only")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed for each side (default 1800)")
    p.add_argument("--require-target", action="store_true", help="exit 1 when ours > 0.5 x tunix")
    p.add_argument("--json", action="store_true", help="also print a final JSON line with both results")
    args = p.parse_args(argv)
    if args.steps < 3:
        p.error("--steps must be at least 3 (2 warm-up steps + 1 timed)")

    # ---- Tunix side ----
    say("=" * 72)
    say("Tunix side (google-tunix 0.1.7, bench/.tunix-venv)")
    say("=" * 72)
    py = ensure_venv(args)
    tunix_res, tunix_err = run_and_parse(
        "tunix",
        [str(py), str(TUNIX_SCRIPT), "--steps", str(args.steps)],
        args.timeout,
    )

    # ---- our side ----
    ours_res, ours_err = None, ""
    if not args.tunix_only:
        say("=" * 72)
        say("Our side (bench/grpo_step.py)")
        say("=" * 72)
        if not OUR_SCRIPT.exists():
            ours_err = f"{OUR_SCRIPT.relative_to(REPO)} does not exist yet, so our side cannot be measured"
            say(f"[ours] ERROR: {ours_err}")
        else:
            ours_res, ours_err = run_and_parse(
                "ours",
                [our_python(), str(OUR_SCRIPT), "--config", args.config, "--steps", str(args.steps), "--json"],
                args.timeout,
            )

    # ---- summary ----
    say("")
    say("=" * 72)
    say("W1 GRPO step time (1 CPU device, float32; lower is better)")
    say("=" * 72)
    t = tunix_res["seconds_per_step"] if tunix_res else None
    o = ours_res["seconds_per_step"] if ours_res else None
    if tunix_res:
        say(
            f"tunix {tunix_res.get('version', '?')}: {t:.4f} s/step "
            f"(median of {tunix_res.get('steps_timed', '?')} steps after warm-up; "
            f"generated {tunix_res.get('gen_tokens_per_seq_min')}"
            f"-{tunix_res.get('gen_tokens_per_seq_max')} tokens/seq"
            f"{_cpu_note(tunix_res)})"
        )
    else:
        say(f"tunix: FAILED: {tunix_err}")
    if ours_res:
        say(f"ours : {o:.4f} s/step (steps timed: {ours_res.get('steps_timed', '?')}{_cpu_note(ours_res)})")
    elif not args.tunix_only:
        say(f"ours : FAILED: {ours_err}")
    summary = {"tunix": tunix_res, "ours": ours_res}
    status = 0
    if t and o:
        ratio = o / t
        speedup = t / o
        met = ratio <= TARGET_RATIO
        say(f"ratio=ours/tunix={ratio:.3f}")
        say(f"speedup=tunix/ours={speedup:.2f}x")
        say(f"target: ours <= {TARGET_RATIO} x tunix (<= {TARGET_RATIO * t:.4f} s/step): {'MET' if met else 'NOT MET'}")
        summary.update(ratio=ratio, speedup=speedup, target_met=met)
        if args.require_target and not met:
            status = 1
    elif t and not args.tunix_only:
        say(f"target: ours <= {TARGET_RATIO} x tunix (<= {TARGET_RATIO * t:.4f} s/step): not measured")
    say(f"load average now: {loadavg()} (figures are wall clock on a shared {os.cpu_count()}-core machine)")
    if args.json:
        print(json.dumps(summary), flush=True)
    if not tunix_res:
        return 3
    if not args.tunix_only and not ours_res:
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())

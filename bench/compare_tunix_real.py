#!/usr/bin/env python3
"""Compare our GRPO trainer with google-tunix 0.1.7 on benchmark workload R1 (a real model), in one run.

Run with the project's venv python from the repository root:

    .venv/bin/python bench/compare_tunix_real.py [--steps N] [--skip-install] [--model DIR]

R1 (configs/r1.yaml is its definition; both sides take their settings from it): the fetched
SmolLM2-135M-Instruct folder (var/models/smollm2-135m-instruct; `python -m trainers fetch-model
smollm2-135m-instruct`) in float32; 8 prompts x G=4; ChatML prompts of 44-48 tokens
(bench/r1_prompts.jsonl through the folder's chat template) left-padded to 48; exactly 64
generated tokens (no early stop); GRPO mu=1, beta=0.04; one optimizer update per step; one CPU
device.

What it does:
  1. creates (or reuses) bench/.tunix-venv (bench/tunix_harness.py, shared with
     bench/compare_tunix.py);
  2. runs bench/tunix_r1.py in that venv (Tunix's own Llama 3 model loaded from the folder,
     RLCluster with the vanilla rollout engine, GRPOLearner; with Tunix's ignored rope_theta
     restored and a pad id that no prompt contains: see tunix_r1.py);
  3. runs our side in a subprocess: `<project python> bench/grpo_step.py --config configs/r1.yaml
     --steps N --json`;
  4. prints both seconds per steady-state step (median after 2 warm-up steps) and both peak
     memories (each subprocess's peak resident set size, ru_maxrss from wait4: the same measure
     for both), the ratios ours/tunix, and the target line.

Anchor: Tunix 0.1.7 measured in the same run. Target: ours <= 0.5 x Tunix in time AND in memory.
The last line is `time_ratio=X memory_ratio=Y`.

--model DIR runs both sides on another Llama folder (e.g. a tiny random one from
bench/make_tiny_llama.py, for a smoke test). Exit status: 0 when both sides were measured (unless
--require-target and a target is missed: 1), 2 when our side failed, 3 when the Tunix side failed.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tunix_harness import (  # noqa: E402
    BENCH,
    REPO,
    cpu_note,
    ensure_venv,
    gib,
    our_python,
    run_and_parse,
    say,
)
from tunix_harness import ratios as _ratios  # noqa: E402
from venv_harness import finish  # noqa: E402

TUNIX_SCRIPT = BENCH / "tunix_r1.py"
OUR_SCRIPT = BENCH / "grpo_step.py"
DEFAULT_CONFIG = "configs/r1.yaml"
TARGET_RATIO = 0.5


def r1_settings(config_path: str, model: str | None) -> dict:
    """The R1 settings both sides run with, from our config (model.path replaced by `model`)."""
    from trainers.config import load_config

    overrides = [f"model.path={model}"] if model else []
    c = load_config(config_path, overrides)
    if c.rollout.stop_at_eos or c.grpo.num_iterations != 1 or c.model.dtype != "float32":
        raise SystemExit(
            f"{config_path}: R1 needs rollout.stop_at_eos false, grpo.num_iterations 1 and model.dtype float32"
        )
    return {
        "model": c.model.path,
        "data": c.data.train_path,
        "prompts": c.batch.prompts_per_step,
        "generations": c.grpo.num_generations,
        "prompt_len": c.data.max_prompt_tokens,
        "gen_len": c.rollout.max_new_tokens,
        "beta": c.grpo.beta,
        "temperature": c.rollout.temperature,
    }


def tunix_command(py: str, settings: dict, steps: int) -> list[str]:
    s = settings
    return [
        py,
        str(TUNIX_SCRIPT),
        "--steps",
        str(steps),
        "--model",
        s["model"],
        "--data",
        s["data"],
        "--prompts",
        str(s["prompts"]),
        "--generations",
        str(s["generations"]),
        "--prompt-len",
        str(s["prompt_len"]),
        "--gen-len",
        str(s["gen_len"]),
        "--beta",
        str(s["beta"]),
        "--temperature",
        str(s["temperature"]),
    ]


def our_command(config_path: str, model: str | None, steps: int) -> list[str]:
    cmd = [our_python(), str(OUR_SCRIPT), "--config", config_path, "--steps", str(steps), "--json"]
    return cmd + (["--set", f"model.path={model}"] if model else [])


def ratios(ours: dict | None, tunix: dict | None) -> dict:
    """time_ratio / memory_ratio = ours / tunix (None where a side or a figure is missing) and
    whether each meets the target."""
    return _ratios(ours, tunix, TARGET_RATIO)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--steps",
        type=int,
        default=6,
        help="GRPO steps per side; the first 2 are warm-up and the median of the rest is reported (default 6)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model folder for both sides instead of configs/r1.yaml's model.path (e.g. a tiny random "
        "Llama from bench/make_tiny_llama.py)",
    )
    p.add_argument("--config", default=DEFAULT_CONFIG, help="our trainer's R1 config (default %(default)s)")
    p.add_argument(
        "--skip-install", action="store_true", help="use bench/.tunix-venv as it is (no stamp check, no pip)"
    )
    p.add_argument(
        "--python",
        default=None,
        help="base interpreter for the Tunix venv (default: found automatically, Python 3.11 preferred, then 3.12)",
    )
    side = p.add_mutually_exclusive_group()
    side.add_argument("--tunix-only", action="store_true", help="measure the Tunix side only")
    side.add_argument("--ours-only", action="store_true", help="measure our side only")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed for each side (default 3600)")
    p.add_argument("--require-target", action="store_true", help="exit 1 when a ratio is above 0.5")
    p.add_argument("--json", action="store_true", help="also print a JSON line with both results before the last line")
    args = p.parse_args(argv)
    if args.steps < 3:
        p.error("--steps must be at least 3 (2 warm-up steps + 1 timed)")

    os.chdir(REPO)  # the config's paths are relative to the repository
    settings = r1_settings(args.config, args.model)
    say(
        f"R1: {settings['model']}, {settings['prompts']} prompts x G={settings['generations']}, prompts "
        f"{settings['data']} padded to {settings['prompt_len']}, {settings['gen_len']} generated tokens, "
        f"beta={settings['beta']}, {args.steps} steps per side"
    )

    tunix_res, tunix_err = None, ""
    if not args.ours_only:
        say("=" * 72)
        say("Tunix side (google-tunix 0.1.7, bench/.tunix-venv, bench/tunix_r1.py)")
        say("=" * 72)
        py = ensure_venv(args)
        tunix_res, tunix_err = run_and_parse("tunix", tunix_command(str(py), settings, args.steps), args.timeout)

    ours_res, ours_err = None, ""
    if not args.tunix_only:
        say("=" * 72)
        say(f"Our side (bench/grpo_step.py --config {args.config})")
        say("=" * 72)
        ours_res, ours_err = run_and_parse("ours", our_command(args.config, args.model, args.steps), args.timeout)

    say("")
    say("=" * 72)
    say("R1 GRPO step time and peak memory (1 CPU device, float32; lower is better)")
    say("=" * 72)
    if tunix_res:
        say(
            f"tunix {tunix_res.get('version', '?')}: {tunix_res['seconds_per_step']:.4f} s/step, peak RSS "
            f"{gib(tunix_res.get('peak_rss_bytes'))} (median of {tunix_res.get('steps_timed', '?')} steps after "
            f"warm-up; generated {tunix_res.get('gen_tokens_per_seq_min')}-{tunix_res.get('gen_tokens_per_seq_max')} "
            f"tokens/seq; {tunix_res.get('gen_tokens_equal_pad_per_step')} generated tokens/step equal to the pad id"
            f"{cpu_note(tunix_res)})"
        )
    elif not args.ours_only:
        say(f"tunix: FAILED: {tunix_err}")
    if ours_res:
        say(
            f"ours : {ours_res['seconds_per_step']:.4f} s/step, peak RSS {gib(ours_res.get('peak_rss_bytes'))} "
            f"(steps timed: {ours_res.get('steps_timed', '?')}; completion tokens "
            f"{ours_res.get('completion_tokens_mean')}/seq{cpu_note(ours_res)})"
        )
    elif not args.tunix_only:
        say(f"ours : FAILED: {ours_err}")
    summary = {
        "workload": "R1",
        "settings": settings,
        "tunix": tunix_res,
        "ours": ours_res,
        **ratios(ours_res, tunix_res),
    }
    return finish(
        summary, "tunix", TARGET_RATIO, not args.ours_only, not args.tunix_only, args.require_target, args.json
    )


if __name__ == "__main__":
    sys.exit(main())

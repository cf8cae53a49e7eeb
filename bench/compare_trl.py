#!/usr/bin/env python3
"""Compare our GRPO trainer with TRL's GRPOTrainer (trl 1.16.0, PyTorch 2.13.0 CPU build) on
benchmark workload R1 (a real model), in one run.

Run with the project's venv python from the repository root:

    .venv/bin/python bench/compare_trl.py [--steps N] [--rounds R] [--skip-install] [--model DIR]

R1 (configs/r1.yaml is its definition; both sides take their settings from it, as in
bench/compare_tunix_real.py): the fetched SmolLM2-135M-Instruct folder
(var/models/smollm2-135m-instruct; `python -m trainers fetch-model smollm2-135m-instruct`) in
float32; 8 prompts x G=4; the ChatML prompts of bench/r1_prompts.jsonl (44-48 tokens through the
folder's chat template); exactly 64 generated tokens (no early stop; on the TRL side forced by
generation_kwargs min_new_tokens = max_new_tokens = 64); GRPO mu=1, beta=0.04, clip epsilon 0.2,
token-mean loss, advantages (r - mean) / std per group; AdamW lr 1e-6 constant, b1 0.9, b2 0.99,
weight decay 0.1, gradients clipped at norm 1.0; reward exact_match; one optimizer update per
step; one CPU process. TRL runs with use_vllm=False (transformers' generate), gradient
checkpointing off and bf16 off (TRL's defaults are on; ours keeps float32 and no remat on R1).

Settings TRL cannot match exactly: it left-pads each step's prompts to that step's longest prompt
(at most 48, ours always 48); its group std has an epsilon of 1e-4 (ours 1e-6); its sampling,
initialisation of the random stream and so the sampled completions differ (the amount of work per
step does not: 32 sequences of 64 tokens on both sides).

What it does:
  1. creates (or reuses) bench/.trl-venv from the pinned bench/requirements-trl.txt (torch's CPU
     build installed first, then the rest with it held as a constraint; a hash stamp records what
     was installed: bench/venv_harness.py, shared with the Tunix comparisons);
  2. runs bench/trl_r1.py in that venv (HF_HUB_OFFLINE=1: the model loads from the folder);
  3. runs our side in a subprocess: `<project python> bench/grpo_step.py --config configs/r1.yaml
     --steps N --json`;
  4. with --rounds R > 1 repeats 2-3, alternating which side goes first, never both at once;
  5. prints both seconds per steady-state step (median after --warmup steps, default 2; over rounds, the
     median of the rounds' figures) and both peak memories (each subprocess's peak resident set
     size, ru_maxrss from wait4; over rounds, the largest), the ratios ours/TRL, and the target line.

Anchor: TRL 1.16.0 measured in the same run. Target: ours <= 0.5 x TRL in time AND in memory
(the Tunix comparisons' target). The last line is `time_ratio=X memory_ratio=Y`.

--model DIR runs both sides on another Llama folder (e.g. a tiny random one from
bench/make_tiny_llama.py, for a smoke test). Exit status: 0 when both sides were measured (unless
--require-target and a target is missed: 1), 2 when our side failed, 3 when the TRL side failed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from compare_tunix_real import our_command  # noqa: E402
from compare_tunix_real import r1_settings as _tunix_r1_settings  # noqa: E402
from venv_harness import (  # noqa: E402
    BENCH,
    REPO,
    VenvSpec,
    cpu_note,
    ensure_venv,
    finish,
    gib,
    ratios,
    run_and_parse,
    say,
)

TRL_SCRIPT = BENCH / "trl_r1.py"
DEFAULT_CONFIG = "configs/r1.yaml"
TARGET_RATIO = 0.5

TRL = VenvSpec(
    name="trl",
    venv=BENCH / ".trl-venv",
    requirements=BENCH / "requirements-trl.txt",
    supported_python=((3, 11),),  # the CPU torch wheel at hand is cp311
    python_env="TRL_PYTHON",
    install_first=("torch",),
    check=(
        "import torch, transformers, trl; "
        "assert torch.version.cuda is None, 'torch is not the CPU build: ' + torch.__version__; "
        "assert torch.__version__.startswith('2.13.0'), 'torch ' + torch.__version__; "
        "print('trl', trl.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
    ),
    size_note="about 200 MB, 1.5 GB on disk once installed",
)


def r1_settings(config_path: str, model: str | None) -> dict:
    """compare_tunix_real's R1 settings plus the optimizer and loss settings TRL takes; refuses a
    config whose loss or sampling TRL's GRPOTrainer would not run the same way."""
    from trainers.config import load_config

    s = _tunix_r1_settings(config_path, model)
    c = load_config(config_path, [f"model.path={model}"] if model else [])
    g, o, r = c.grpo, c.optimizer, c.rollout
    problems = []
    if o.name != "adamw" or o.schedule != "constant" or o.warmup_steps != 0:
        problems.append("optimizer: adamw, constant schedule, no warmup")
    if g.policy_loss != "grpo" or g.kl_estimator != "k3" or g.advantage != "grpo":
        problems.append("grpo: policy_loss grpo, kl_estimator k3, advantage grpo")
    if g.loss_aggregation != "token-mean":
        problems.append("grpo.loss_aggregation token-mean (TRL's dapo)")
    if (g.epsilon_low or 0.2) != (g.epsilon_high or 0.2) or g.dual_clip or g.entropy_coef:
        problems.append("grpo: one clip epsilon, no dual clip, no entropy bonus")
    if r.top_k != 0 or r.top_p != 1.0 or c.model.remat:
        problems.append("rollout: top_k 0, top_p 1.0; model.remat false")
    if problems:
        raise SystemExit(f"{config_path}: compare_trl.py runs R1 as TRL can; it needs " + "; ".join(problems))
    s.update(
        learning_rate=o.learning_rate,
        b1=o.b1,
        b2=o.b2,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
        epsilon=g.epsilon_low or 0.2,
        seed=c.seed,
    )
    return s


def trl_command(py: str, settings: dict, steps: int) -> list[str]:
    s = settings
    cmd = [py, str(TRL_SCRIPT), "--steps", str(steps)]
    for flag, key in (
        ("--model", "model"),
        ("--data", "data"),
        ("--prompts", "prompts"),
        ("--generations", "generations"),
        ("--prompt-len", "prompt_len"),
        ("--gen-len", "gen_len"),
        ("--beta", "beta"),
        ("--temperature", "temperature"),
        ("--learning-rate", "learning_rate"),
        ("--b1", "b1"),
        ("--b2", "b2"),
        ("--weight-decay", "weight_decay"),
        ("--max-grad-norm", "max_grad_norm"),
        ("--epsilon", "epsilon"),
        ("--seed", "seed"),
    ):
        cmd += [flag, str(s[key])]
    return cmd


def combine(results: list[dict]) -> dict | None:
    """One side's rounds as one result: the median of the rounds' seconds per step, the largest peak
    RSS, the last round's other fields, and every round's figures under "rounds"."""
    if not results:
        return None
    out = dict(results[-1])
    out["seconds_per_step"] = statistics.median(r["seconds_per_step"] for r in results)
    peaks = [r["peak_rss_bytes"] for r in results if r.get("peak_rss_bytes")]
    out["peak_rss_bytes"] = max(peaks) if peaks else None
    out["rounds"] = [
        {"seconds_per_step": r["seconds_per_step"], "peak_rss_bytes": r.get("peak_rss_bytes")} for r in results
    ]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--steps",
        type=int,
        default=6,
        help="GRPO steps per side and round; the first --warmup are left out and the median of the rest is "
        "reported (default 6)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="leading steps of each side left out of the median (default 2; 1 with --steps 2)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each side this many times, alternating which goes first (default 1)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model folder for both sides instead of configs/r1.yaml's model.path (e.g. a tiny random "
        "Llama from bench/make_tiny_llama.py)",
    )
    p.add_argument("--config", default=DEFAULT_CONFIG, help="our trainer's R1 config (default %(default)s)")
    p.add_argument("--skip-install", action="store_true", help="use bench/.trl-venv as it is (no stamp check, no pip)")
    p.add_argument(
        "--python", default=None, help="base interpreter for the TRL venv (default: found automatically, Python 3.11)"
    )
    side = p.add_mutually_exclusive_group()
    side.add_argument("--trl-only", action="store_true", help="measure the TRL side only")
    side.add_argument("--ours-only", action="store_true", help="measure our side only")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed for each side and round (default 3600)")
    p.add_argument("--require-target", action="store_true", help="exit 1 when a ratio is above 0.5")
    p.add_argument("--json", action="store_true", help="also print a JSON line with both results before the last line")
    args = p.parse_args(argv)
    if args.warmup is None:
        args.warmup = 2 if args.steps >= 3 else 1
    if args.warmup < 0 or args.steps <= args.warmup:
        p.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}): at least one step is timed")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")

    os.chdir(REPO)  # the config's paths are relative to the repository
    settings = r1_settings(args.config, args.model)
    say(
        f"R1: {settings['model']}, {settings['prompts']} prompts x G={settings['generations']}, prompts "
        f"{settings['data']} (ours padded to {settings['prompt_len']}), {settings['gen_len']} generated tokens, "
        f"beta={settings['beta']}, lr={settings['learning_rate']}, {args.steps} steps per side "
        f"({args.warmup} warm-up), "
        f"{args.rounds} round(s)"
    )

    py = None if args.ours_only else ensure_venv(args, TRL)
    runs: dict[str, list[dict]] = {"trl": [], "ours": []}
    errors = {"trl": "", "ours": ""}
    sides = [s for s in ("trl", "ours") if not (s == "trl" and args.ours_only) and not (s == "ours" and args.trl_only)]
    for rnd in range(args.rounds):
        for name in sides if rnd % 2 == 0 else sides[::-1]:
            say("=" * 72)
            if name == "trl":
                say(f"TRL side (trl 1.16.0, bench/.trl-venv, bench/trl_r1.py), round {rnd + 1}/{args.rounds}")
                cmd = trl_command(str(py), settings, args.steps) + ["--warmup", str(args.warmup)]
            else:
                say(f"Our side (bench/grpo_step.py --config {args.config}), round {rnd + 1}/{args.rounds}")
                cmd = our_command(args.config, args.model, args.steps) + ["--warmup", str(args.warmup)]
            say("=" * 72)
            res, err = run_and_parse(name, cmd, args.timeout)
            if res:
                runs[name].append(res)
            else:
                errors[name] = err
    trl_res, ours_res = combine(runs["trl"]), combine(runs["ours"])

    say("")
    say("=" * 72)
    say("R1 GRPO step time and peak memory (1 CPU process, float32; lower is better)")
    say("=" * 72)
    over = f"median of {args.rounds} rounds' medians; " if args.rounds > 1 else ""
    if trl_res:
        say(
            f"trl {trl_res.get('version', '?')} (torch {trl_res.get('torch', '?')}): "
            f"{trl_res['seconds_per_step']:.4f} s/step, peak RSS {gib(trl_res.get('peak_rss_bytes'))} "
            f"({over}median of {trl_res.get('steps_timed', '?')} steps after warm-up; steps "
            f"{', '.join(f'{x:.2f}' for x in trl_res.get('step_seconds', []))} s; generated "
            f"{trl_res.get('gen_tokens_per_seq_min')}-{trl_res.get('gen_tokens_per_seq_max')} tokens/seq, "
            f"{trl_res.get('sequences_per_step')} sequences/step{cpu_note(trl_res)})"
        )
    elif not args.ours_only:
        say(f"trl  : FAILED: {errors['trl']}")
    if ours_res:
        say(
            f"ours : {ours_res['seconds_per_step']:.4f} s/step, peak RSS {gib(ours_res.get('peak_rss_bytes'))} "
            f"({over}steps timed: {ours_res.get('steps_timed', '?')}; completion tokens "
            f"{ours_res.get('completion_tokens_mean')}/seq{cpu_note(ours_res)})"
        )
    elif not args.trl_only:
        say(f"ours : FAILED: {errors['ours']}")
    summary = {
        "workload": "R1",
        "anchor": "trl",
        "settings": settings,
        "trl": trl_res,
        "ours": ours_res,
        **ratios(ours_res, trl_res, TARGET_RATIO),
    }
    return finish(summary, "trl", TARGET_RATIO, not args.ours_only, not args.trl_only, args.require_target, args.json)


if __name__ == "__main__":
    sys.exit(main())

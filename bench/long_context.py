#!/usr/bin/env python3
"""The cost of long completions: one GRPO step of SmolLM2-135M per completion length, time and
peak memory split by phase, against the step-memory estimate.

    .venv/bin/python bench/long_context.py [--lengths 1024 4096 8192 16384] [--group 4]
        [--config configs/smollm2-arith.yaml] [--set dotted.path=value ...]

Each length runs `python -m trainers run` in a child process of its own (1 prompt x G = --group
completions forced to that many tokens: rollout.stop_at_eos false; grpo.beta 0.04, so the reference
pass and the update run whatever the rewards; no checkpoint, no evaluation), with the defaults
otherwise: what a user gets (remat and the train micro-batch as the run chooses them to fit this
machine's memory: the run's log says what it chose). From the run's metrics.jsonl it takes the step's
phases (timing/generation_decode_s, timing/rollout_s, timing/train_s: the log-prob passes and the
update); the child's peak RSS comes from the kernel (wait4). Printed per length: seconds per
completion token of decoding and of the train phase, decode tokens/s against the roofline (a decode
step reads the weights once and each slot's KV cache: their bytes over this machine's measured copy
bandwidth), the peak RSS and `validate`'s estimate beside it. Then the targets: the train phase's
seconds per completion token at the longest length <= 2x those at the shortest, and the peak at the
longest <= 20 GiB.

A length whose estimate is above this machine's memory is refused by `run` (its message is
printed) rather than killed by the kernel. Decoding 16,384 tokens takes about an hour on a 2-core
CPU: give only the lengths you have time for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GIB = 1024**3
DEFAULT_CONFIG = os.path.join("configs", "smollm2-arith.yaml")


def copy_bandwidth_bytes_per_s(size_bytes: int = 1 << 30) -> float:
    """Bytes read + written per second by a large NumPy copy (best of 3): the memory bandwidth a
    decode step is bound by on a CPU."""
    import numpy as np

    source = np.ones(size_bytes // 4, np.float32)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - t0)
    return 2 * size_bytes / best


def overrides_for(length: int, group: int) -> list[str]:
    return [
        "batch.prompts_per_step=1",
        f"grpo.num_generations={group}",
        "batch.mini_batch_prompts=1",
        "batch.train_micro_batch_sequences=null",
        f"rollout.max_new_tokens={length}",
        "rollout.stop_at_eos=false",
        "grpo.beta=0.04",
        "train.max_steps=1",
        "checkpoint.every_steps=0",
        "eval.every_steps=0",
        "eval.before_training=false",
    ]


def run_one(config: str, sets: list[str], out_dir: str) -> dict:
    """`trainers run` in a child: its exit code, stderr's tail, the step's metrics and peak RSS."""
    argv = [sys.executable, "-m", "trainers", "run", config, "--out", out_dir]
    for item in sets:
        argv += ["--set", item]
    with open(os.path.join(out_dir + ".log"), "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    metrics = {}
    path = os.path.join(out_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("step") == 1:
                    metrics = row
    with open(out_dir + ".log", errors="replace") as f:
        tail = f.read()[-1500:]
    return {"exit": proc.returncode, "metrics": metrics, "peak_bytes": usage.ru_maxrss * 1024, "tail": tail}


def estimate_of(config_path: str, sets: list[str]) -> tuple[int, str]:
    """(the step's estimate, what the run chooses to fit this machine: remat, the train micro-batch),
    as `trainers run` computes them (`memory_estimate.fit_step` against this host's memory)."""
    from trainers import devices
    from trainers.config import load_config
    from trainers.loop.memory_estimate import fit_step
    from trainers.step.plan import make_plan

    config = load_config(os.path.join(ROOT, config_path), sets)
    fitted = fit_step(config, make_plan(config), devices.host_memory_bytes())
    chosen = f"remat {'on' if fitted.remat else 'off'}, micro-batch {fitted.plan.train_micro_batch_sequences}"
    return fitted.memory.total_bytes, chosen


def decode_bytes_per_step(config_path: str, sets: list[str], length: int) -> tuple[int, int]:
    """(weights bytes, KV bytes at the mean context) one decode step of all slots reads."""
    from trainers.config import load_config
    from trainers.loop.policy import model_config_for
    from trainers.models.hf_config import parameter_count

    config = load_config(os.path.join(ROOT, config_path), sets)
    model = model_config_for(config)
    kv_bytes = 2 if model.dtype == "bfloat16" else 4
    per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * kv_bytes
    mean_context = config.data.max_prompt_tokens + length / 2
    return parameter_count(model) * 4, int(per_token * mean_context * config.grpo.num_generations)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    parser.add_argument("--group", type=int, default=4, help="G completions of the one prompt (default 4)")
    parser.add_argument("--set", action="append", default=[], metavar="dotted.path=value")
    args = parser.parse_args(argv)

    bandwidth = copy_bandwidth_bytes_per_s()
    print(f"long-context bench: {args.config}, 1 prompt x G {args.group}; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print()
    print(
        "| tokens | decode s/token | train s/token | decode tokens/s (roofline) | peak GiB | estimate GiB "
        "| chosen to fit | run |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for length in args.lengths:
            sets = overrides_for(length, args.group) + args.set
            estimate, chosen = estimate_of(args.config, sets)
            got = run_one(args.config, sets, os.path.join(work, f"len-{length}"))
            m = got["metrics"]
            tokens = length * args.group
            if got["exit"] != 0 or not m:
                last = " / ".join(got["tail"].strip().splitlines()[-3:])
                peak = got["peak_bytes"] / GIB
                print(
                    f"| {length} | - | - | - | {peak:.2f} | {estimate / GIB:.2f} | {chosen} "
                    f"| exit {got['exit']}: {last} |"
                )
                continue
            decode_s = m.get("timing/generation_decode_s", m.get("timing/rollout_s", 0.0))
            train_s = m["timing/train_s"]
            weights, kv = decode_bytes_per_step(args.config, sets, length)
            roofline = args.group / ((weights + kv) / bandwidth)
            rows[length] = {"train_per_token_s": train_s / tokens, "peak_bytes": got["peak_bytes"]}
            print(
                f"| {length} | {decode_s / tokens:.4f} | {train_s / tokens:.4f} | "
                f"{tokens / decode_s:.1f} ({roofline:.0f}) | {got['peak_bytes'] / GIB:.2f} | "
                f"{estimate / GIB:.2f} | {chosen} | ok |",
                flush=True,
            )
    print()
    if len(rows) >= 2:
        short, long = min(rows), max(rows)
        growth = rows[long]["train_per_token_s"] / rows[short]["train_per_token_s"]
        print(
            f"train phase seconds per completion token at {long} / at {short}: {growth:.2f}x; "
            f"target <= 2x: {'MET' if growth <= 2 else 'NOT MET'}"
        )
    if rows:
        longest = max(rows)
        peak = rows[longest]["peak_bytes"] / GIB
        print(f"peak at {longest} tokens: {peak:.2f} GiB; target <= 20 GiB: {'MET' if peak <= 20 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

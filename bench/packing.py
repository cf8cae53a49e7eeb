#!/usr/bin/env python3
"""Sequence packing (batch.packing) against padded rows on one rollout of the SmolLM2 demo.

    .venv/bin/python bench/packing.py [--config configs/smollm2-arith.yaml] [--prompts 32] [--group 8]
        [--max-new-tokens 256] [--temperature 1.0] [--beta 0.04] [--set dotted.path=value ...]

One rollout of --prompts prompts x G = --group completions, sampled once (long-tailed lengths: most
completions end early, some run to the budget); its groups' advantages are set to a fixed spread, so
that every update has a gradient to compare. Then the step's training phase (reference
log-prob pass, old-policy pass when the plan needs one, and the updates: `GRPOTrainer.train_on`)
runs on that same rollout from the same weights, padded and packed, each twice: the first call
compiles, the second is timed. Prints for each: seconds, the padding share of the positions its
updates computed (`train/padding_fraction`), the first update's loss/policy and grad_norm; then the
ratios, the whole step's ratio (the rollout's time added to both) and the target lines:
train phase >= 2x faster, whole step >= 1.3x, packed padding <= 10%, loss/policy and grad_norm
equal within 1e-4 relative.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_CONFIG = os.path.join("configs", "smollm2-arith.yaml")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--prompts", type=int, default=32, help="prompts in the rollout (default 32)")
    parser.add_argument("--group", type=int, default=8, help="G completions per prompt (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="completion budget (default 256)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--beta", type=float, default=0.04, help="KL weight: > 0 adds the reference pass")
    parser.add_argument("--set", action="append", default=[], metavar="dotted.path=value")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    from trainers.config import load_config
    from trainers.loop.trainer import GRPOTrainer

    overrides = [
        f"batch.prompts_per_step={args.prompts}",
        f"grpo.num_generations={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        f"rollout.temperature={args.temperature}",
        f"grpo.beta={args.beta}",
        # the config's 24 divides its own 8 x G 6, not 32 x G 8; 32 sequences a micro-batch padded to 256
        # tokens do not fit in 24 GiB
        "batch.train_micro_batch_sequences=16",
        "checkpoint.every_steps=0",
        *args.set,
    ]
    config = load_config(os.path.join(ROOT, args.config), overrides)

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(config, run_dir)
        print(
            f"packing bench: {config.model.path or config.model.preset}, {args.prompts} prompts x G {args.group}, "
            f"up to {args.max_new_tokens} tokens at temperature {args.temperature}, beta {args.beta}",
            flush=True,
        )
        t0 = time.perf_counter()
        trainer.source.start(trainer.state.params, 0)
        rollout = trainer.source.next(0)
        trainer.source.stop()
        rollout_s = time.perf_counter() - t0
        # a small model's sampled rewards are mostly equal within a group (no gradient to compare):
        # every group gets the same spread of advantages instead; the sampled lengths stay
        group_advantages = np.linspace(1.0, -1.0, args.group).astype(np.float32)
        rollout.advantages = np.tile(group_advantages, args.prompts)
        rollout.rewards = np.tile((group_advantages + 1) / 2, args.prompts)
        lengths = rollout.completion_mask.sum(axis=1)
        print(
            f"rollout: {rollout_s:.1f} s; completion lengths mean {lengths.mean():.0f}, "
            f"median {np.median(lengths):.0f}, max {lengths.max()}, "
            f"{np.mean(lengths >= args.max_new_tokens):.0%} at the budget",
            flush=True,
        )
        start = jax.tree.map(np.asarray, (trainer.state.params, trainer.state.opt_state))
        results: dict[bool, dict] = {}
        for packing in (False, True):
            trainer.packing = packing
            for attempt in ("compile", "timed"):
                trainer.state.params, trainer.state.opt_state = jax.tree.map(jax.numpy.asarray, start)
                t0 = time.perf_counter()
                metrics = trainer.train_on(rollout)
                jax.block_until_ready(trainer.state.params)
                seconds = time.perf_counter() - t0
                print(f"  {'packed' if packing else 'padded'} ({attempt}): {seconds:.1f} s", flush=True)
            results[packing] = {"train_s": seconds, **metrics}

    padded, packed = results[False], results[True]
    speedup = padded["train_s"] / packed["train_s"]
    step_speedup = (rollout_s + padded["train_s"]) / (rollout_s + packed["train_s"])
    print()
    print("| figure | padded | packed |")
    print("| --- | --- | --- |")
    print(f"| training phase, s | {padded['train_s']:.1f} | {packed['train_s']:.1f} |")
    for name in ("train/padding_fraction", "loss/policy", "grad_norm", "loss/kl"):
        if name in padded:
            print(f"| {name} | {padded[name]:.6g} | {packed[name]:.6g} |")
    print()
    relative = {
        name: abs(packed[name] - padded[name]) / max(abs(padded[name]), 1e-12) for name in ("loss/policy", "grad_norm")
    }
    print(f"training phase: packed {speedup:.2f}x faster; target >= 2x: {'MET' if speedup >= 2 else 'NOT MET'}")
    print(
        f"whole step (rollout {rollout_s:.1f} s added to both): {step_speedup:.2f}x; target >= 1.3x: "
        f"{'MET' if step_speedup >= 1.3 else 'NOT MET'}"
    )
    pad = packed["train/padding_fraction"]
    print(f"packed padding: {pad:.1%} of the positions computed; target <= 10%: {'MET' if pad <= 0.10 else 'NOT MET'}")
    same = all(r <= 1e-4 for r in relative.values())
    print(
        "loss/policy and grad_norm, relative difference: "
        + ", ".join(f"{k} {v:.1e}" for k, v in relative.items())
        + f"; target <= 1e-4: {'MET' if same else 'NOT MET'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

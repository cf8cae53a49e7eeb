"""W1 step benchmark: seconds per steady-state GRPO step, tokens/s, and model-FLOPs utilisation
against this machine's measured float32 matmul peak.

    .venv/bin/python bench/grpo_step.py [--config configs/w1.yaml] [--steps 12] [--json]

Anchor: google-tunix 0.1.7 measured on this machine kind at about 1.3 s per steady-state W1 step
(bench/compare_tunix.py measures both in one run). Target: at most half of Tunix's time per step.
The last line is `seconds_per_step=X ratio_vs_anchor=Y` (Y = X / 1.3; target <= 0.5).
With another --config the script measures that workload the same way (configs/r1.yaml is our side
of workload R1 in bench/compare_tunix_real.py); the W1 anchor line is then not printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TUNIX_ANCHOR_S = 1.3  # seconds per W1 step, google-tunix 0.1.7, this machine kind


def matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
    """Best observed float32 FLOP/s of an n x n x n matmul on the default device."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def step_model_flops(cfg, plan, prompt_tokens: int, completion_tokens: float) -> dict[str, float]:
    """Model FLOPs of one step, by phase (causal attention: token t sees t+1 positions)."""
    from trainers.models.transformer import forward_flops_per_token

    def forward(tokens_from: int, tokens_to: int) -> float:
        return sum(forward_flops_per_token(cfg, t + 1) for t in range(tokens_from, int(round(tokens_to))))

    n = plan.sequences_per_step
    total_tokens = prompt_tokens + completion_tokens
    sequence_forward = n * forward(0, total_tokens)
    return {
        "generation": n * forward(0, total_tokens),  # prefill + decode, one forward per position
        "old_logprobs": sequence_forward if plan.needs_old_logprobs else 0.0,
        "reference_logprobs": sequence_forward if plan.needs_reference else 0.0,
        "train": 3 * sequence_forward * plan.num_iterations,  # forward + backward (2x)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "w1.yaml"))
    parser.add_argument("--steps", type=int, default=12, help="steps to run (the first 2 are warm-up)")
    parser.add_argument("--warmup", type=int, default=2, help="steps excluded from the timing")
    parser.add_argument("--set", action="append", default=[], metavar="dotted.path=value")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args(argv)

    import jax

    from trainers.config import load_config
    from trainers.loop.hooks import Hooks
    from trainers.loop.rollout import collect_rollout
    from trainers.loop.trainer import GRPOTrainer

    overrides = [f"train.max_steps={args.steps}", "checkpoint.every_steps=0", *args.set]
    config = load_config(args.config, overrides)
    peak = matmul_peak_flops()

    rows: list[dict[str, float]] = []

    class Collect(Hooks):
        def on_step(self, step, metrics):
            if "timing/step_s" not in metrics:
                return  # the step-0 evaluation of the starting policy, not a training step
            rows.append(metrics)
            print(f"  step {step:3d}: {metrics['timing/step_s']:.3f} s  (rollout {metrics['timing/rollout_s']:.3f} s, "
                  f"train {metrics['timing/train_s']:.3f} s)", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(config, run_dir, Collect())
        # No checkpoint: a benchmark does not need one, and saving would add to the run's peak memory
        # (bench/compare_tunix_real.py compares it with Tunix's).
        trainer.save_checkpoint = lambda: None
        print(f"GRPO step bench ({os.path.basename(args.config)}): {config.model.path or config.model.preset} model, "
              f"{trainer.plan.prompts_per_step} prompts x "
              f"G={trainer.plan.num_generations}, {args.steps} steps on {jax.devices()[0].device_kind}",
              file=sys.stderr)
        trainer.run()
        # One extra timed reference pass splits train_s into log-prob passes and updates.
        examples = trainer.stream.take(0, trainer.plan.prompts_per_step)
        rollout = collect_rollout(trainer.graphdef, lambda: (trainer.state.params, trainer.state.step), examples,
                                  trainer.spec, jax.random.key(123))
        logprob_s = 0.0
        if trainer.plan.needs_reference:
            trainer.logprobs(trainer.ref_params, rollout)
            t0 = time.perf_counter()
            trainer.logprobs(trainer.ref_params, rollout)
            logprob_s = time.perf_counter() - t0
        prompt_tokens = int(rollout.prompt_valid[0].sum())
        completion_tokens = float(rollout.completion_mask.sum(axis=1).mean())

    steady = rows[args.warmup:]
    step_s = statistics.median(r["timing/step_s"] for r in steady)
    rollout_s = statistics.median(r["timing/rollout_s"] for r in steady)
    train_s = statistics.median(r["timing/train_s"] for r in steady)
    flops = step_model_flops(trainer.model_config, trainer.plan, prompt_tokens, completion_tokens)
    total_flops = sum(flops.values())
    sequences = trainer.plan.sequences_per_step
    tokens_per_s = sequences * (prompt_tokens + completion_tokens) / step_s
    generated_per_s = sequences * completion_tokens / step_s
    mfu = total_flops / step_s / peak
    figures = {
        "seconds_per_step": step_s,
        "rollout_s": rollout_s,
        "train_s": train_s,
        "reference_logprob_pass_s": logprob_s,
        "update_s": max(train_s - logprob_s * (trainer.plan.reference_logprob_passes_per_step > 0), 0.0),
        "tokens_per_s": tokens_per_s,
        "generated_tokens_per_s": generated_per_s,
        "model_gflops_per_step": total_flops / 1e9,
        "gflops_by_phase": {k: v / 1e9 for k, v in flops.items()},
        "matmul_peak_gflops": peak / 1e9,
        "mfu": mfu,
        "steps_timed": len(steady),
        "prompt_tokens": prompt_tokens,
        "completion_tokens_mean": completion_tokens,
        "anchor_tunix_s": TUNIX_ANCHOR_S,
        "ratio_vs_anchor": step_s / TUNIX_ANCHOR_S,
    }
    workload = os.path.splitext(os.path.basename(args.config))[0].upper()
    print(f"\n{workload} steady-state step: {step_s:.3f} s (median of {len(steady)})")
    print(f"  rollout (generation + rewards)  {rollout_s:.3f} s   {flops['generation'] / 1e9:.1f} GFLOP")
    print(f"  train (log-prob passes + update) {train_s:.3f} s   "
          f"{(flops['train'] + flops['reference_logprobs'] + flops['old_logprobs']) / 1e9:.1f} GFLOP"
          f"  (of which one reference pass {logprob_s:.3f} s)")
    print(f"  tokens/s {tokens_per_s:.0f} (generated {generated_per_s:.0f}/s)")
    print(f"  model FLOPs/step {total_flops / 1e9:.1f} GFLOP; float32 matmul peak {peak / 1e9:.0f} GFLOP/s; "
          f"MFU {mfu * 100:.1f}%")
    if workload == "W1":
        print(f"  anchor: Tunix 0.1.7 ~{TUNIX_ANCHOR_S} s/step; target <= {TUNIX_ANCHOR_S / 2:.2f} s")
    if args.json:
        print(json.dumps(figures))
    print(f"seconds_per_step={step_s:.3f} ratio_vs_anchor={step_s / TUNIX_ANCHOR_S:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

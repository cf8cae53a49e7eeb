"""W1 step benchmark: seconds per steady-state GRPO step, tokens/s, and model-FLOPs utilisation
against this machine's measured float32 matmul peak (`peak_flops`: a known accelerator's datasheet
peak instead). FLOPs are counted as executed (`step_model_flops`): each prompt's prefill once per
group where the G completions share it, the LM head only where it runs.

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


def matmul_peak_flops(n: int = 2048, repeats: int = 10, dtype: str = "float32") -> float:
    """Best observed FLOP/s of an n x n x n matmul in `dtype` on the default device."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


KNOWN_PEAK_FLOPS = {"H100": {"bfloat16": 989e12}, "H200": {"bfloat16": 989e12}}
"""Dense matmul peaks (FLOP/s) of accelerators by a substring of their `device_kind` and compute dtype:
NVIDIA H100 SXM / H200, bfloat16 tensor cores without sparsity. Anything else is measured
(`matmul_peak_flops`)."""


def peak_flops(device, dtype: str = "float32") -> tuple[float, str]:
    """(peak FLOP/s, where it comes from) for MFU on `device` in `dtype`: the datasheet figure of a
    known accelerator (`KNOWN_PEAK_FLOPS`), else this machine's measured matmul peak in that dtype."""
    for name, peaks in KNOWN_PEAK_FLOPS.items():
        if name in device.device_kind and dtype in peaks:
            return peaks[dtype], f"{name} {dtype} dense datasheet peak"
    return matmul_peak_flops(dtype=dtype), f"measured {dtype} matmul peak"


def layer_flops(cfg, first_position: float, positions: float) -> float:
    """Forward FLOPs of the transformer layers (not the LM head) over `positions` consecutive token
    positions of one sequence, the first at 0-based position `first_position`: per token 2 x the
    layers' matmul parameters, plus causal attention (the token at position t attends to t + 1
    positions: 2 x heads x head_dim x (t + 1) for q.k and as much for probs.v, per layer). Lengths may
    be means (floats). Padding is not counted: these are model FLOPs."""
    from trainers.models.transformer import matmul_param_count

    per_token = 2 * (matmul_param_count(cfg) - cfg.hidden_size * cfg.vocab_size)
    context_sum = positions * (2 * first_position + positions + 1) / 2  # sum of t + 1 over the positions
    return per_token * positions + cfg.num_layers * 4 * cfg.num_heads * cfg.head_dim * context_sum


def lm_head_flops(cfg, positions: float) -> float:
    """Forward FLOPs of the LM head (hidden x vocabulary matmul) at `positions` positions."""
    return 2.0 * cfg.hidden_size * cfg.vocab_size * positions


def generation_flops(cfg, sequences: int, prompt_group: int, prompt_tokens: float, completion_tokens: float) -> float:
    """Model FLOPs of generating `completion_tokens` tokens for each of `sequences` sequences after a
    prompt of `prompt_tokens` (`trainers.models.generate`): the prefill runs the layers over each
    distinct prompt once (sequences / prompt_group of them) and the LM head at its last position only;
    token 0 comes from that, and decode step j (1 .. completion_tokens - 1) feeds token j - 1 at
    position prompt_tokens + j - 1 through the layers and the LM head. The last token is never fed."""
    prompts = sequences / prompt_group
    decode_steps = max(completion_tokens - 1, 0.0)
    prefill = prompts * (layer_flops(cfg, 0, prompt_tokens) + lm_head_flops(cfg, 1))
    decode = sequences * (layer_flops(cfg, prompt_tokens, decode_steps) + lm_head_flops(cfg, decode_steps))
    return prefill + decode


def logprob_pass_flops(cfg, sequences: int, prompt_group: int, prompt_tokens: float, completion_tokens: float) -> float:
    """Model FLOPs of one forward log-prob pass (`completion_logprobs`) over `sequences` sequences: the
    layers over each distinct prompt once (sequences / prompt_group; prompt_group 1 = every sequence
    whole) and over every completion position, the LM head at the completion_tokens positions that
    predict a completion token (the last prompt position and all but the last completion position).
    A training pass is 3x this (forward + backward)."""
    prompts = sequences / prompt_group
    return prompts * layer_flops(cfg, 0, prompt_tokens) + sequences * (
        layer_flops(cfg, prompt_tokens, completion_tokens) + lm_head_flops(cfg, completion_tokens)
    )


def step_model_flops(
    cfg,
    plan,
    prompt_tokens: float,
    completion_tokens: float,
    *,
    generation_group: int,
    logprob_group: int,
    update_group: int,
    trained_fraction: float = 1.0,
) -> dict[str, float]:
    """Model FLOPs one GRPO step executes, by phase, for prompts of `prompt_tokens` tokens and completions
    of `completion_tokens` tokens (means over the step's sequences): generation (`generation_flops`),
    the old-policy and reference log-prob passes where the plan runs them, and the updates: 3 x a
    log-prob pass (forward + backward) per iteration over the `trained_fraction` of the sequences that
    went through them (flat groups skipped). *_group: the prompt_group each phase ran with (G when the
    G completions of a prompt shared one prompt prefill, else 1). MFU counts model FLOPs: the LM head
    chunks recomputed in the backward (`jax.checkpoint`) and remat are not counted."""
    n = plan.sequences_per_step

    def pass_flops(group: int) -> float:
        return logprob_pass_flops(cfg, n, group, prompt_tokens, completion_tokens)

    return {
        "generation": generation_flops(cfg, n, generation_group, prompt_tokens, completion_tokens),
        "old_logprobs": pass_flops(logprob_group) if plan.needs_old_logprobs else 0.0,
        "reference_logprobs": pass_flops(logprob_group) if plan.needs_reference else 0.0,
        "train": 3 * pass_flops(update_group) * plan.num_iterations * trained_fraction,
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
    from trainers.loop.trainer import GRPOTrainer
    from trainers.rollout import collect as rollout_module
    from trainers.rollout.collect import collect_rollout
    from trainers.step.hooks import Hooks

    overrides = [f"train.max_steps={args.steps}", "checkpoint.every_steps=0", *args.set]
    config = load_config(args.config, overrides)
    peak, peak_source = peak_flops(jax.devices()[0], config.model.dtype)

    # The prompt_group each phase runs with (G: the G completions of a prompt share its prefill).
    groups: dict[str, set[int]] = {"generation": set(), "logprob": set(), "update": set()}
    generate_paged = rollout_module.generate_paged

    def recording_generate(graphdef, weights, prompt_tokens, prompt_valid, rng_key, sampling, *args, **kwargs):
        groups["generation"].add(sampling.prompt_group)
        return generate_paged(graphdef, weights, prompt_tokens, prompt_valid, rng_key, sampling, *args, **kwargs)

    rollout_module.generate_paged = recording_generate  # collect_rollout looks it up at each call

    rows: list[dict[str, float]] = []

    class Collect(Hooks):
        def on_step(self, step, metrics):
            if "timing/step_s" not in metrics:
                return  # the step-0 evaluation of the starting policy, not a training step
            rows.append(metrics)
            print(
                f"  step {step:3d}: {metrics['timing/step_s']:.3f} s  (rollout {metrics['timing/rollout_s']:.3f} s, "
                f"train {metrics['timing/train_s']:.3f} s)",
                file=sys.stderr,
                flush=True,
            )

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(config, run_dir, Collect())
        # No checkpoint: a benchmark does not need one, and saving would add to the run's peak memory
        # (bench/compare_tunix_real.py compares it with Tunix's).
        trainer.save_checkpoint = lambda: None
        logprob_fn, update_fn = trainer.logprob_fn, trainer.update_fn

        def logprobs(*a, prompt_group=1):
            groups["logprob"].add(prompt_group)
            return logprob_fn(*a, prompt_group=prompt_group)

        def update(*a, prompt_group=1):
            groups["update"].add(prompt_group)
            return update_fn(*a, prompt_group=prompt_group)

        trainer.logprob_fn, trainer.update_fn = logprobs, update
        print(
            f"GRPO step bench ({os.path.basename(args.config)}): {config.model.path or config.model.preset} model, "
            f"{trainer.plan.prompts_per_step} prompts x "
            f"G={trainer.plan.num_generations}, {args.steps} steps on {jax.devices()[0].device_kind}",
            file=sys.stderr,
        )
        trainer.run()
        # One extra timed reference pass splits train_s into log-prob passes and updates.
        examples = trainer.stream.take(0, trainer.plan.prompts_per_step)
        rollout = collect_rollout(
            trainer.graphdef,
            lambda: (trainer.state.params, trainer.state.step),
            examples,
            trainer.spec,
            jax.random.key(123),
        )
        logprob_s = 0.0
        if trainer.plan.needs_reference:
            trainer.logprobs(trainer.ref_params, rollout)
            t0 = time.perf_counter()
            trainer.logprobs(trainer.ref_params, rollout)
            logprob_s = time.perf_counter() - t0
        prompt_tokens = int(rollout.prompt_valid[0].sum())
        completion_tokens = float(rollout.completion_mask.sum(axis=1).mean())

    steady = rows[args.warmup :]
    step_s = statistics.median(r["timing/step_s"] for r in steady)
    rollout_s = statistics.median(r["timing/rollout_s"] for r in steady)
    train_s = statistics.median(r["timing/train_s"] for r in steady)
    trained_fraction = statistics.mean(r.get("train/trained_sequence_fraction", 1.0) for r in steady)
    ran_with = {phase: min(g) if g else 1 for phase, g in groups.items()}  # a mix of groups: count the larger work
    flops = step_model_flops(
        trainer.model_config,
        trainer.plan,
        prompt_tokens,
        completion_tokens,
        generation_group=ran_with["generation"],
        logprob_group=ran_with["logprob"],
        update_group=ran_with["update"],
        trained_fraction=trained_fraction,
    )
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
        "peak_gflops": peak / 1e9,
        "peak_source": peak_source,
        "prompt_groups": ran_with,
        "trained_sequence_fraction_mean": trained_fraction,
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
    print(
        f"  train (log-prob passes + update) {train_s:.3f} s   "
        f"{(flops['train'] + flops['reference_logprobs'] + flops['old_logprobs']) / 1e9:.1f} GFLOP"
        f"  (of which one reference pass {logprob_s:.3f} s)"
    )
    print(f"  tokens/s {tokens_per_s:.0f} (generated {generated_per_s:.0f}/s)")
    print(
        f"  model FLOPs/step {total_flops / 1e9:.1f} GFLOP executed (prompt_group: generation "
        f"{ran_with['generation']}, log-probs {ran_with['logprob']}, update {ran_with['update']}); "
        f"{peak_source} {peak / 1e9:.0f} GFLOP/s; MFU {mfu * 100:.1f}%"
    )
    if workload == "W1":
        print(f"  anchor: Tunix 0.1.7 ~{TUNIX_ANCHOR_S} s/step; target <= {TUNIX_ANCHOR_S / 2:.2f} s")
    if args.json:
        print(json.dumps(figures))
    print(f"seconds_per_step={step_s:.3f} ratio_vs_anchor={step_s / TUNIX_ANCHOR_S:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

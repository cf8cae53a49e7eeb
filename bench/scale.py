"""Scaling bench: the trainer's optimizer update on 1, 2, 4 and 8 devices (an FSDP mesh), weak and strong
scaling, with the per-device memory, for SmolLM2-135M- and Qwen2-0.5B-shaped models (random init).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 PYTHONPATH=. \\
        .venv/bin/python bench/scale.py [--quick] [--models smollm2-135m,qwen2-0.5b] [--devices 1,2,4,8]
        [--steps 3] [--json]

Without the XLA_FLAGS the script sets them itself (8 host devices) unless an accelerator is present;
device counts above the devices present are left out.

What runs: the product's own pieces. `Placement` splits the parameters and the optimizer state
(optax adamw, the config's default optimizer) over the mesh `make_mesh(devices[:n], {"fsdp": n})`
by the logical-axis rules, and the batch over data x fsdp; `make_update_fn` (with the placement's
state shardings) is the jitted update the trainer runs: GRPO loss with the KL term (beta 0.04,
reference log-probs in the batch), forward + backward + optimizer, the G completions of a prompt
sharing one prefill (prompt_group=G). One device is the trainer's single-device program (no
mesh). The batch is synthetic (random tokens, whole groups of G rows sharing a prompt).

Figures, per model, per device count n, per scaling:
  step_s       median seconds of one optimizer update (after one warm-up call; compile excluded).
  tokens/s     sequences x (prompt + completion tokens) / step_s.
  MFU          executed model FLOPs (3 x bench/grpo_step.py's `logprob_pass_flops`: forward +
               backward, shared prefills once) / step_s / the peak of n devices (`peak_flops`: a
               known accelerator's datasheet figure x n; on the CPU the measured matmul peak of the
               machine, not x n: host devices share the machine's cores).
  memory       per device, from the compiled update's `memory_analysis()` (argument + temp bytes of
               the partitioned program: what one device holds during the step; outputs alias the
               donated state), and the parameter + optimizer-state bytes the device holds (the sum
               of its shards, `array.addressable_shards`).
  weak         sequences = --sequences-per-device x n; strong: --strong-sequences for every n.

Anchor: the 1-device figure of the same run. Each row prints speedup = tokens/s over the 1-device
tokens/s (ideal: n in both scalings; weak-scaling efficiency = speedup / n) and the per-device
memory over the 1-device memory (ideal with FSDP: about 1/n for the state). On this CPU machine the
8 host devices share 2 cores, so the speedup stays near 1 by construction: the table shows that the
sharded program runs and what each device holds; the speedups mean something on accelerators.
The last line per model is `model=M devices=N weak_speedup=X strong_speedup=Y state_per_device_ratio=Z`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODELS = ("smollm2-135m", "qwen2-0.5b")
DEVICE_COUNTS = (1, 2, 4, 8)
BETA = 0.04
MIB = 2.0**20


def quick_shape(cfg):
    """--quick: the model's width, heads and MLP with 2 layers and a vocabulary of at most 4096 ids, so
    that 16 compiles and their steps finish in a few minutes on a 2-core CPU."""
    return dataclasses.replace(cfg, num_layers=2, vocab_size=min(cfg.vocab_size, 4096))


def device_counts(requested: list[int], available: int) -> list[int]:
    """The requested device counts that the devices present allow, in order."""
    return [n for n in requested if 1 <= n <= available]


def synthetic_batch(
    sequences: int, group: int, prompt_tokens: int, completion_tokens: int, vocab: int, seed: int = 0
) -> dict[str, Any]:
    """One optimizer update's batch with one micro-batch (the [A=1, M, ...] layout of `make_update_fn`):
    `sequences` rows in groups of `group` rows sharing a prompt, every token valid, random token ids,
    advantages, and reference log-probs; token-mean loss weights."""
    import numpy as np

    from trainers.algo.loss import token_weights

    if sequences % group:
        raise ValueError(f"sequences={sequences} must be whole groups of {group}")
    rng = np.random.default_rng(seed)
    prompts = rng.integers(1, vocab, (sequences // group, prompt_tokens), dtype=np.int32)
    mask = np.ones((sequences, completion_tokens), bool)
    arrays = {
        "prompt_tokens": np.repeat(prompts, group, axis=0),
        "prompt_valid": np.ones((sequences, prompt_tokens), bool),
        "completion_tokens": rng.integers(1, vocab, (sequences, completion_tokens), dtype=np.int32),
        "completion_mask": mask,
        "advantages": rng.standard_normal(sequences).astype(np.float32),
        "weights": token_weights(mask, "token-mean"),
        "metric_weights": token_weights(mask, "token-mean"),
        "ref_logprobs": np.full((sequences, completion_tokens), -np.log(vocab), np.float32),
    }
    return {name: value[None] for name, value in arrays.items()}


def bytes_per_device(tree: Any) -> dict[Any, int]:
    """{device: bytes of the shards of `tree`'s arrays that the device holds} (`addressable_shards`)."""
    import jax

    held: dict[Any, int] = {}
    for leaf in jax.tree.leaves(tree):
        for shard in leaf.addressable_shards:
            held[shard.device] = held.get(shard.device, 0) + shard.data.nbytes
    return held


def build_update(cfg, devices: list, seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """(placement, update_fn, params, opt_state) for `cfg` on `devices`: one device = the trainer's
    single-device program (no mesh); more = an FSDP mesh over them. The update is `make_update_fn`
    with the default optimizer (adamw) and the GRPO loss with beta = BETA."""
    import optax

    from trainers.algo.loss import LossConfig
    from trainers.algo.optim import make_optimizer
    from trainers.config.schema import OptimizerSection
    from trainers.loop.update import make_update_fn
    from trainers.models.transformer import init_params
    from trainers.parallel.mesh import make_mesh
    from trainers.step.placement import Placement

    n = len(devices)
    placement = Placement() if n == 1 else Placement(make_mesh(devices, {"fsdp": n}))
    graphdef, params = init_params(cfg, seed)
    params = placement.train_state(params)
    optimizer = make_optimizer(OptimizerSection(), optax.constant_schedule(1e-5))
    opt_state = placement.init_optimizer(optimizer, params)
    update_fn = make_update_fn(
        graphdef,
        optimizer,
        LossConfig(beta=BETA),
        1.0,
        use_old_logprobs=False,
        state_shardings=placement.state_shardings((params, opt_state)),
    )
    return placement, update_fn, params, opt_state


def compiled_update(placement, update_fn, params, opt_state, batch, prompt_group: int):
    """The update lowered and compiled for these arguments (nothing runs) and its memory_analysis()."""
    with placement.training():
        compiled = update_fn.lower(params, opt_state, batch, prompt_group=prompt_group).compile()
    return compiled, compiled.memory_analysis()


def measure(
    cfg,
    devices: list,
    sequences: int,
    group: int,
    prompt_tokens: int,
    completion_tokens: int,
    steps: int,
    warmup: int = 1,
) -> dict[str, float]:
    """One configuration: build, compile, run warmup + steps updates; the figures (seconds, bytes)."""
    import jax
    from grpo_step import logprob_pass_flops

    placement, update_fn, params, opt_state = build_update(cfg, devices)
    batch = placement.train_batch(
        synthetic_batch(sequences, group, prompt_tokens, completion_tokens, cfg.vocab_size), batch_axis=1
    )
    t0 = time.perf_counter()
    compiled, stats = compiled_update(placement, update_fn, params, opt_state, batch, group)
    compile_s = time.perf_counter() - t0
    state_bytes = bytes_per_device((params, opt_state))
    param_bytes = bytes_per_device(params)
    seconds = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        with placement.training():
            params, opt_state, metrics = compiled(params, opt_state, batch)
        jax.block_until_ready((params, opt_state, metrics))
        if i >= warmup:
            seconds.append(time.perf_counter() - t0)
    step_s = statistics.median(seconds)
    flops = 3 * logprob_pass_flops(cfg, sequences, group, prompt_tokens, completion_tokens)
    return {
        "devices": len(devices),
        "sequences": sequences,
        "step_s": step_s,
        "tokens_per_s": sequences * (prompt_tokens + completion_tokens) / step_s,
        "gflops_per_step": flops / 1e9,
        "compile_s": compile_s,
        "compiled_argument_bytes": stats.argument_size_in_bytes,
        "compiled_temp_bytes": stats.temp_size_in_bytes,
        "compiled_bytes": stats.argument_size_in_bytes + stats.temp_size_in_bytes,
        "param_bytes_per_device": max(param_bytes.values()),
        "state_bytes_per_device": max(state_bytes.values()),
        "grad_norm_finite": bool(jax.numpy.isfinite(metrics["grad_norm"])),
    }


def with_ratios(rows: list[dict[str, float]], peak: float, peak_scales: bool) -> list[dict[str, float]]:
    """Adds MFU (peak x n when `peak_scales`, else the one peak) and the ratios against the first row
    (the 1-device anchor): speedup (tokens/s), efficiency (speedup / n), memory ratios."""
    anchor = rows[0]
    out = []
    for row in rows:
        n = row["devices"]
        speedup = row["tokens_per_s"] / anchor["tokens_per_s"]
        out.append(
            {
                **row,
                "mfu": row["gflops_per_step"] * 1e9 / row["step_s"] / (peak * n if peak_scales else peak),
                "speedup": speedup,
                "efficiency": speedup / n * anchor["devices"],
                "compiled_bytes_ratio": row["compiled_bytes"] / anchor["compiled_bytes"],
                "state_bytes_ratio": row["state_bytes_per_device"] / anchor["state_bytes_per_device"],
            }
        )
    return out


def print_table(model: str, scaling: str, rows: list[dict[str, float]]) -> None:
    print(f"\n{model}, {scaling} scaling")
    print(
        f"  {'dev':>3} {'seqs':>5} {'step s':>8} {'tokens/s':>9} {'MFU':>6} {'speedup':>8} {'eff':>5} "
        f"{'compiled MiB/dev (arg+temp)':>28} {'ratio':>6} {'params+opt MiB/dev':>19} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"  {r['devices']:>3} {r['sequences']:>5} {r['step_s']:>8.3f} {r['tokens_per_s']:>9.0f} "
            f"{r['mfu'] * 100:>5.1f}% {r['speedup']:>8.2f} {r['efficiency']:>5.2f} "
            f"{r['compiled_bytes'] / MIB:>10.1f} ({r['compiled_argument_bytes'] / MIB:.1f}+"
            f"{r['compiled_temp_bytes'] / MIB:.1f}){'':>3} {r['compiled_bytes_ratio']:>6.2f} "
            f"{r['state_bytes_per_device'] / MIB:>19.1f} {r['state_bytes_ratio']:>6.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated presets (default %(default)s)")
    parser.add_argument(
        "--devices",
        default=",".join(map(str, DEVICE_COUNTS)),
        help="comma-separated device counts; those above the devices present are left out",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed updates per configuration (default 3; --quick 2), after one warm-up update",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2-layer models with a 4096-id vocabulary, short sequences: a few minutes on a 2-core CPU",
    )
    parser.add_argument(
        "--sequences-per-device",
        type=int,
        default=None,
        help="weak scaling: sequences per device (default 8; --quick 4)",
    )
    parser.add_argument(
        "--strong-sequences",
        type=int,
        default=None,
        help="strong scaling: the fixed batch (default sequences-per-device x the largest count; --quick 16)",
    )
    parser.add_argument("--group", type=int, default=4, help="G: completions per prompt (default %(default)s)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 64; --quick 16")
    parser.add_argument("--completion-tokens", type=int, default=None, help="default 128; --quick 16")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="compute dtype (default: float32 on a CPU, bfloat16 on an accelerator)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line of all figures at the end")
    args = parser.parse_args(argv)

    if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
        ).strip()
    import jax
    from grpo_step import peak_flops

    from trainers.models.presets import PRESETS

    devices = jax.devices()
    platform = devices[0].platform
    dtype = args.dtype or ("float32" if platform == "cpu" else "bfloat16")
    steps = args.steps or (2 if args.quick else 3)
    per_device = args.sequences_per_device or (4 if args.quick else 8)
    prompt_tokens = args.prompt_tokens or (16 if args.quick else 64)
    completion_tokens = args.completion_tokens or (16 if args.quick else 128)
    counts = device_counts([int(n) for n in args.devices.split(",") if n.strip()], len(devices))
    if not counts:
        parser.error(f"--devices {args.devices}: none fits the {len(devices)} device(s) present")
    strong = args.strong_sequences or (16 if args.quick else per_device * max(counts))
    for n in counts:
        if strong % n or strong % args.group or (per_device * n) % args.group:
            parser.error(
                f"batches must be whole groups of --group {args.group} split evenly over {n} devices: "
                f"--strong-sequences {strong}, --sequences-per-device {per_device}"
            )
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in PRESETS]
    if unknown:
        parser.error(f"--models: unknown preset {unknown[0]!r}; one of {', '.join(sorted(PRESETS))}")
    peak, peak_source = peak_flops(devices[0], dtype)
    peak_scales = platform != "cpu"
    print(
        f"scale bench: {len(devices)} {platform} device(s) ({devices[0].device_kind}), counts {counts}, {dtype}, "
        f"G={args.group}, {prompt_tokens} + {completion_tokens} tokens, weak {per_device} sequences/device, strong "
        f"{strong} sequences, {steps} timed steps{' (quick shapes)' if args.quick else ''}; {peak_source} "
        f"{peak / 1e9:.0f} GFLOP/s{' per device' if peak_scales else ' (the machine, shared by its host devices)'}",
        flush=True,
    )

    results: dict[str, Any] = {
        "platform": platform,
        "device_kind": devices[0].device_kind,
        "dtype": dtype,
        "peak_gflops": peak / 1e9,
        "peak_source": peak_source,
        "quick": args.quick,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "group": args.group,
        "models": {},
    }
    last_lines = []
    for model in models:
        cfg = dataclasses.replace(PRESETS[model], dtype=dtype)
        if args.quick:
            cfg = quick_shape(cfg)
        tables = {}
        for scaling in ("weak", "strong"):
            rows = []
            for n in counts:
                sequences = per_device * n if scaling == "weak" else strong
                print(f"  {model} {scaling} n={n}: {sequences} sequences ...", file=sys.stderr, flush=True)
                rows.append(measure(cfg, devices[:n], sequences, args.group, prompt_tokens, completion_tokens, steps))
            tables[scaling] = with_ratios(rows, peak, peak_scales)
            print_table(f"{model} ({cfg.num_layers} layers, vocab {cfg.vocab_size})", scaling, tables[scaling])
        results["models"][model] = {"shape": dataclasses.asdict(cfg), **tables}
        top_weak, top_strong = tables["weak"][-1], tables["strong"][-1]
        last_lines.append(
            f"model={model} devices={top_weak['devices']} weak_speedup={top_weak['speedup']:.2f} "
            f"strong_speedup={top_strong['speedup']:.2f} "
            f"state_per_device_ratio={top_strong['state_bytes_ratio']:.3f}"
        )
    if args.json:
        print(json.dumps(results))
    print("\n".join(last_lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Real-model benchmark: GRPO on SmolLM2-135M-Instruct with the demo config (configs/smollm2-arith.yaml:
8 arithmetic word problems x G=6 per step, ChatML prompts, up to 48 new tokens with EOS stop, beta 0).

    .venv/bin/python bench/real_model.py [--config configs/smollm2-arith.yaml] [--steps 8] [--warmup 2]
        [--set dotted.path=value ...] [--compare-prefill] [--memory-modes float32,bfloat16,float32+remat]
        [--json]

Fetch the model first: `.venv/bin/python -m trainers fetch-model smollm2-135m-instruct`. The run uses
the config as it is except train.max_steps=--steps, no checkpoints and no evaluation (the figures are
those of training steps); --set overrides anything (e.g. --set model.dtype=bfloat16).

Figures:
  train step     median steady-state timing/step_s (and its rollout_s / train_s parts) over the
                 steps after --warmup.
  generation     generated tokens/s of one timed generation of a step's rollout at the config's
                 shapes, after compile: the `generate` calls of `collect_rollout` timed on their own
                 (no reward scoring), on step 0's prompts with the trained weights.
  MFU            model FLOPs a step executes (bench/grpo_step.py's `step_model_flops` on the steady
                 steps' mean prompt and completion lengths, each phase with the prompt_group it
                 ran with: the G completions of a prompt share one prefill in generation, and in
                 the log-prob passes and the update when they ran with prompt_group=G; the LM head
                 only where it runs; the update's FLOPs scaled by the mean
                 train/trained_sequence_fraction) / step_s / the peak (grpo_step.py's
                 `peak_flops`: this machine's measured matmul peak in the run's dtype, or a known
                 accelerator's datasheet figure).
  compiles       XLA compilations (executables built or loaded from the persistent cache) during
                 the steady-state steps, counted with a `jax.monitoring` listener on JAX's
                 backend-compile event; also retraces (jaxpr trace events). 0 is the goal: a
                 compile in steady state is a shape or static argument that changed between steps.
  memory         of one optimizer update (the jitted `make_update_fn` the trainer uses), from the
                 compiled update's `memory_analysis()` at the run's batch shapes, per mode:
                 float32, bfloat16 (bf16 compute, float32 master weights and optimizer), with
                 model.remat, ... Each is only lowered and compiled, never run.
  prefill        with --compare-prefill: generation with prompt_group=G (the G completions of a
                 prompt share one prefill and its KV cache, `SamplingParams.prompt_group`) against
                 prompt_group=1 (one prefill per completion), on the same prompts and keys.

Anchor: none yet (these are the figures on the real model; bench/compare_tunix_real.py
compares workload R1 with google-tunix 0.1.7). Targets: 0 compiles in steady state; the memory
figures show what bfloat16 and remat save.

The last line is `step_s=X generated_tokens_per_s=Y mfu=Z`; --json prints one JSON line of all
figures before it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grpo_step import peak_flops, step_model_flops  # noqa: E402

DEFAULT_CONFIG = os.path.join(ROOT, "configs", "smollm2-arith.yaml")
MEMORY_MODES = ("float32", "bfloat16", "float32+remat", "bfloat16+remat")
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax._src.dispatch.BACKEND_COMPILE_EVENT
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"  # jax._src.dispatch.JAXPR_TRACE_EVENT


class CompileCounter:
    """Counts XLA compilations and jaxpr traces while `active`, through a `jax.monitoring` listener.

    JAX records BACKEND_COMPILE_EVENT (with fun_name) around every XLA compile, whether the executable
    is built or loaded from the persistent compilation cache, and never for a call served from jit's
    in-memory cache; TRACE_EVENT for every trace of a Python function to a jaxpr."""

    def __init__(self) -> None:
        self.active = False
        self.compiles: list[str] = []
        self.traces: list[str] = []

    def __call__(self, event: str, duration: float, **kwargs: Any) -> None:
        if not self.active:
            return
        if event == BACKEND_COMPILE_EVENT:
            self.compiles.append(str(kwargs.get("fun_name", "?")))
        elif event == TRACE_EVENT:
            self.traces.append(str(kwargs.get("fun_name", "?")))

    def __enter__(self) -> CompileCounter:
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        import jax.monitoring

        jax.monitoring.unregister_event_duration_listener(self)


def parse_mode(mode: str) -> tuple[str, bool]:
    """'float32' / 'bfloat16' with an optional '+remat' -> (dtype, remat)."""
    dtype, _, extra = mode.partition("+")
    if dtype not in ("float32", "bfloat16") or extra not in ("", "remat"):
        raise ValueError(f"memory mode {mode!r}: expected float32 or bfloat16, optionally +remat")
    return dtype, extra == "remat"


def memory_figures(stats: Any) -> dict[str, float]:
    """A compiled executable's `memory_analysis()` -> its sizes in GiB: temp, argument, output, alias
    (outputs that reuse donated argument buffers), total = temp + argument + output - alias (the
    live bytes of one call: donated parameters and optimizer state are updated in place, so their
    outputs take no memory of their own) and the plain sum temp + argument + output."""
    gib = 2.0**30
    temp, arg = stats.temp_size_in_bytes, stats.argument_size_in_bytes
    out, alias = stats.output_size_in_bytes, stats.alias_size_in_bytes
    return {
        "temp_gib": temp / gib,
        "argument_gib": arg / gib,
        "output_gib": out / gib,
        "alias_gib": alias / gib,
        "total_gib": (temp + arg + out - alias) / gib,
        "temp_argument_output_gib": (temp + arg + out) / gib,
    }


def shape_of(tree: Any) -> Any:
    """The tree with every array replaced by its jax.ShapeDtypeStruct."""
    import jax

    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def update_memory(trainer: Any, batch_shapes: Any, mode: str, prompt_group: int = 1) -> dict[str, float]:
    """Lower and compile the trainer's optimizer update (`make_update_fn` with the trainer's own
    optimizer, loss, temperature, importance and mismatch settings) for the model in `mode` at `batch_shapes`;
    returns `memory_figures` of it plus the compile seconds. Nothing runs."""
    import jax

    from trainers.loop.update import make_update_fn
    from trainers.models.hf_weights import abstract_params

    dtype, remat = parse_mode(mode)
    graphdef, params = abstract_params(dataclasses.replace(trainer.model_config, dtype=dtype, remat=remat))
    opt_state = jax.eval_shape(trainer.optimizer.init, params)
    update = make_update_fn(
        graphdef,
        trainer.optimizer,
        trainer.loss_cfg,
        trainer.logprob_temperature,
        trainer.plan.needs_old_logprobs,
        importance=trainer.source.importance,
        mismatch=trainer.mismatch,
    )
    t0 = time.perf_counter()
    compiled = update.lower(params, opt_state, batch_shapes, prompt_group=prompt_group).compile()
    figures = memory_figures(compiled.memory_analysis())
    figures["compile_s"] = time.perf_counter() - t0
    return figures


class GenerateTimer:
    """Stands in for `trainers.rollout.collect.generate_paged` (the engine, what `collect_rollout`
    calls): times each call and counts its generated tokens; `prompt_group`, when set, replaces the
    sampling's (1: every completion prefills its own prompt)."""

    def __init__(self, generate: Any) -> None:
        self.generate = generate
        self.prompt_group: int | None = None
        self.reset()

    def reset(self) -> None:
        self.seconds, self.tokens, self.decode_steps, self.groups = 0.0, 0, [], set()

    def __call__(self, graphdef, weights, prompt_tokens, prompt_valid, rng_key, sampling, *args, **kwargs):
        if self.prompt_group is not None:
            sampling = dataclasses.replace(sampling, prompt_group=self.prompt_group)
        t0 = time.perf_counter()
        result, stats = self.generate(
            graphdef, weights, prompt_tokens, prompt_valid, rng_key, sampling, *args, **kwargs
        )
        self.seconds += time.perf_counter() - t0  # the engine returns numpy arrays: the work is done
        self.tokens += int(result.mask.sum())
        self.decode_steps.append(result.decode_steps)
        self.groups.add(sampling.prompt_group)
        return result, stats


def time_generation(
    trainer: Any, timer: GenerateTimer, examples: list, prompt_group: int | None, counter: CompileCounter
) -> dict[str, Any]:
    """One warm-up and one timed `collect_rollout` of `examples` with the trainer's weights and
    RolloutSpec; the figures of the timed one's generate calls."""
    import jax

    from trainers.rollout.collect import collect_rollout

    weights = lambda: (trainer.state.params, trainer.state.step)  # noqa: E731
    key = jax.random.key(123)
    timer.prompt_group = prompt_group
    collect_rollout(trainer.graphdef, weights, examples, trainer.spec, key)  # compiles if needed
    timer.reset()
    compiles_before = len(counter.compiles)
    counter.active = True
    rollout = collect_rollout(trainer.graphdef, weights, examples, trainer.spec, key)
    counter.active = False
    return {
        "generate_s": timer.seconds,
        "generated_tokens": timer.tokens,
        "generated_tokens_per_s": timer.tokens / timer.seconds,
        "decode_steps": list(timer.decode_steps),
        "prompt_group": sorted(timer.groups),
        "sequences": rollout.sequences,
        "prompt_tokens_padded": int(rollout.prompt_tokens.shape[1]),
        "compiles": len(counter.compiles) - compiles_before,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="experiment config (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=8, help="training steps to run (default %(default)s)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="leading steps excluded from the timing and the compile count (default %(default)s)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="dotted.path=value",
        help="config override, as for `python -m trainers run` (repeatable)",
    )
    parser.add_argument(
        "--compare-prefill",
        action="store_true",
        help="also time generation with prompt_group=1 (one prefill per completion) against the "
        "shared prefill of prompt_group=G",
    )
    parser.add_argument(
        "--memory-modes",
        default=",".join(MEMORY_MODES),
        help="comma-separated update-memory modes to compile: float32 or bfloat16, optionally "
        "+remat; '' for none (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line of all figures before the last line")
    args = parser.parse_args(argv)
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")
    modes = [m.strip() for m in args.memory_modes.split(",") if m.strip()]
    for mode in modes:
        try:
            parse_mode(mode)
        except ValueError as error:
            parser.error(str(error))

    import jax

    from trainers.config import load_config
    from trainers.loop.trainer import GRPOTrainer
    from trainers.rollout import collect as rollout_module
    from trainers.step.hooks import Hooks

    overrides = [f"train.max_steps={args.steps}", "checkpoint.every_steps=0", "eval.every_steps=0", *args.set]
    config = load_config(args.config, overrides)
    peak, peak_source = peak_flops(jax.devices()[0], config.model.dtype)

    rows: list[dict[str, float]] = []

    class Collect(Hooks):
        def on_step(self, step, metrics):
            if "timing/step_s" not in metrics:
                return
            rows.append(metrics)
            print(
                f"  step {step:3d}: {metrics['timing/step_s']:.3f} s  (rollout {metrics['timing/rollout_s']:.3f} s, "
                f"train {metrics['timing/train_s']:.3f} s, {metrics['response_length/mean']:.1f} tokens/completion)",
                file=sys.stderr,
                flush=True,
            )

    timer = GenerateTimer(rollout_module.generate_paged)
    rollout_module.generate_paged = timer  # collect_rollout looks the engine up in its module at each call

    with CompileCounter() as counter, tempfile.TemporaryDirectory() as run_dir:
        trainer = GRPOTrainer(config, run_dir, Collect())
        trainer.save_checkpoint = lambda: None  # a benchmark keeps no checkpoint
        plan = trainer.plan
        device = jax.devices()[0]
        print(
            f"real-model bench: {config.model.path or config.model.preset} ({trainer.model_config.num_layers} "
            f"layers, {config.model.dtype}{', remat' if config.model.remat else ''}), {plan.prompts_per_step} "
            f"prompts x G={plan.num_generations}, {args.steps} steps ({args.warmup} warm-up) on "
            f"{device.platform} ({device.device_kind})",
            file=sys.stderr,
            flush=True,
        )

        # Per step: prompt / completion lengths from the rollout; the update's argument shapes.
        lengths: list[tuple[float, float]] = []
        batch_shapes: list[Any] = []
        source_next, update_fn, step_fn = trainer.source.next, trainer.update_fn, trainer.step
        logprob_fn, logprob_groups = trainer.logprob_fn, set()

        def logprobs(*args, **kwargs):
            logprob_groups.add(kwargs.get("prompt_group", 1))
            return logprob_fn(*args, **kwargs)

        def next_rollout(step):
            r = source_next(step)
            if r is not None:
                lengths.append((float(r.prompt_valid.sum(axis=1).mean()), float(r.completion_mask.sum(axis=1).mean())))
            return r

        def update(params, opt_state, batch, **kwargs):
            if not batch_shapes:
                batch_shapes.append((shape_of(batch), kwargs))
            return update_fn(params, opt_state, batch, **kwargs)

        steps_started = [0]
        at_steady = [0, 0]  # compiles and traces counted when the first steady-state step starts

        def step():
            steps_started[0] += 1
            if steps_started[0] == args.warmup + 1:
                at_steady[:] = [len(counter.compiles), len(counter.traces)]
            counter.active = True
            try:
                return step_fn()
            finally:
                counter.active = False

        trainer.source.next, trainer.update_fn, trainer.step = next_rollout, update, step
        trainer.logprob_fn = logprobs
        trainer.run()
        warmup_compiles = counter.compiles[: at_steady[0]]
        steady_compiles, steady_traces = counter.compiles[at_steady[0] :], counter.traces[at_steady[1] :]

        examples = trainer.stream.take(0, plan.prompts_per_step)
        generation = time_generation(trainer, timer, examples, None, counter)
        unshared = None
        if args.compare_prefill:
            unshared = time_generation(trainer, timer, examples, 1, counter)

        memory: dict[str, dict[str, float]] = {}
        for mode in modes:
            print(f"  compiling the update for memory: {mode} ...", file=sys.stderr, flush=True)
            shapes, kwargs = batch_shapes[0]
            memory[mode] = update_memory(trainer, shapes, mode, **kwargs)

    steady = rows[args.warmup :]
    steady_lengths = lengths[args.warmup :]
    step_s = statistics.median(r["timing/step_s"] for r in steady)
    rollout_s = statistics.median(r["timing/rollout_s"] for r in steady)
    train_s = statistics.median(r["timing/train_s"] for r in steady)
    prompt_tokens = statistics.mean(p for p, _ in steady_lengths)
    completion_tokens = statistics.mean(c for _, c in steady_lengths)
    # Count the FLOPs the step executes: each phase with the prompt_group it ran with (the G completions
    # of a prompt share one prefill), and only `train/trained_sequence_fraction` of the sequences go
    # through the update (flat groups skipped).
    trained_fraction = statistics.mean(r.get("train/trained_sequence_fraction", 1.0) for r in steady)
    flops = step_model_flops(
        trainer.model_config,
        plan,
        prompt_tokens,
        completion_tokens,
        generation_group=min(generation["prompt_group"]),
        logprob_group=min(logprob_groups) if logprob_groups else 1,
        update_group=batch_shapes[0][1].get("prompt_group", 1) if batch_shapes else 1,
        trained_fraction=trained_fraction,
    )
    total_flops = sum(flops.values())
    mfu = total_flops / step_s / peak
    gen_per_s = generation["generated_tokens_per_s"]

    figures: dict[str, Any] = {
        "model": config.model.path or config.model.preset,
        "dtype": config.model.dtype,
        "remat": config.model.remat,
        "prompts_per_step": plan.prompts_per_step,
        "num_generations": plan.num_generations,
        "step_s": step_s,
        "rollout_s": rollout_s,
        "train_s": train_s,
        "steps_timed": len(steady),
        "step_seconds": [r["timing/step_s"] for r in rows],
        "prompt_tokens_mean": prompt_tokens,
        "completion_tokens_mean": completion_tokens,
        "generated_tokens_per_s": gen_per_s,
        "generation": generation,
        "trained_sequence_fraction_mean": trained_fraction,
        "model_gflops_per_step": total_flops / 1e9,
        "gflops_by_phase": {k: v / 1e9 for k, v in flops.items()},
        "peak_gflops": peak / 1e9,
        "peak_source": peak_source,
        "mfu": mfu,
        "compiles_in_warmup": len(warmup_compiles),
        "compiles_in_steady_state": len(steady_compiles),
        "compiled_in_steady_state": sorted(set(steady_compiles)),
        "traces_in_steady_state": len(steady_traces),
        "update_memory_gib": memory,
        "update_batch_shapes": {k: list(v.shape) for k, v in batch_shapes[0][0].items()} if batch_shapes else None,
        "update_prompt_group": batch_shapes[0][1].get("prompt_group", 1) if batch_shapes else None,
        "logprob_prompt_groups": sorted(logprob_groups),
    }
    if unshared is not None:
        figures["generation_prompt_group_1"] = unshared
        figures["shared_prefill_speedup"] = unshared["generate_s"] / generation["generate_s"]

    print(
        f"\nreal-model GRPO step ({figures['model']}, {config.model.dtype}): {step_s:.3f} s "
        f"(median of {len(steady)} after {args.warmup} warm-up)"
    )
    print(
        f"  rollout {rollout_s:.3f} s, train {train_s:.3f} s; prompt {prompt_tokens:.1f} tokens, completion "
        f"{completion_tokens:.1f} tokens (means)"
    )
    print(
        f"  generation: {generation['generated_tokens']} tokens in {generation['generate_s']:.3f} s = "
        f"{gen_per_s:.0f} tokens/s ({generation['sequences']} sequences, prompt_group {generation['prompt_group']}, "
        f"decode steps {generation['decode_steps']})"
    )
    if unshared is not None:
        print(
            f"  prefill sharing: prompt_group=1 {unshared['generate_s']:.3f} s "
            f"({unshared['generated_tokens_per_s']:.0f} "
            f"tokens/s, decode steps {unshared['decode_steps']}) vs prompt_group={plan.num_generations} "
            f"{generation['generate_s']:.3f} s: x{figures['shared_prefill_speedup']:.2f}"
        )
    print(
        f"  model FLOPs/step {total_flops / 1e9:.1f} GFLOP executed; {peak_source} {peak / 1e9:.0f} GFLOP/s; "
        f"MFU {mfu * 100:.1f}%"
    )
    print(
        f"  compiles in steady state: {len(steady_compiles)}"
        + (f" ({', '.join(sorted(set(steady_compiles)))})" if steady_compiles else "")
        + f"; retraces: {len(steady_traces)} (warm-up steps compiled {len(warmup_compiles)})"
    )
    if memory:
        print("  one optimizer update's memory (compiled memory_analysis, GiB: temp + arguments + outputs - aliased):")
        for mode, m in memory.items():
            print(
                f"    {mode:16s} {m['total_gib']:7.3f}  (temp {m['temp_gib']:.3f}, arguments {m['argument_gib']:.3f}, "
                f"outputs {m['output_gib']:.3f}, aliased {m['alias_gib']:.3f})"
            )
    if args.json:
        print(json.dumps(figures))
    print(f"step_s={step_s:.3f} generated_tokens_per_s={gen_per_s:.1f} mfu={mfu:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

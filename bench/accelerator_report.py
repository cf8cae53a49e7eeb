"""One prepared accelerator report: the figures of today's sampler and training
step on whatever device JAX finds, in one command, written to docs/perf/<device>-<date>.md.

    PYTHONUNBUFFERED=1 python3 bench/accelerator_report.py [--out DIR] [--budget-s 360] [--date YYYY-MM-DD]
    JAX_PLATFORMS=cpu .venv/bin/python bench/accelerator_report.py --quick --out /tmp/report   # CPU, tiny shapes

This first version measures the product's CURRENT generation path (`trainers.models.generate.generate`:
one dense KV cache of prompt + max_new_tokens slots per row, a while_loop to the longest row) and its
training step: the "old sampler" column that the paged, continuously batched engine will
be compared against.

Sections, in order (each runs in a child process with its own time box, so a failure or a slow
compile loses only that section; the sections left when --budget-s is spent are skipped):
  env         JAX version, backend, devices and their memory; nvidia-smi's card, driver and clocks.
  ceilings    a large device-to-device copy (`x + 1` over 2 GiB of float32, GB/s counting bytes read
              + written, best of 10) and an 8192^3 bfloat16 matmul (bench/grpo_step.py's
              `matmul_peak_flops`, TFLOP/s), on random data: the measured ceilings used below.
  decode:M    `generate` for model shape M (presets smollm2-135m, qwen2-0.5b; qwen2-1.5b defined
              here), random weights in bfloat16 (`cast_for_generation`, as the trainer samples),
              64 and 256 rows, 32-token prompts, 256 new tokens (no EOS stop), best of 2 after a
              compile run. tokens/s = rows x new tokens / seconds of the whole call (prefill
              included). Roofline: a decode step must read the weights once (param bytes) and each
              row's KV cache up to its current position (mean context = prompt + (new - 1) / 2
              tokens); that over the measured copy bandwidth is the fastest a step can be, and
              rows / that time the roofline tokens/s. "dense KV" is what today's sampler reads:
              every one of the prompt + new slots at every step.
  w1          the whole GRPO step of workload W1 in bfloat16 (bench/grpo_step.py's `main`, 6 steps,
              2 warm-up): step time, tokens/s, executed model FLOPs (`step_model_flops`) and MFU
              against the measured bf16 matmul peak.
  multi_turn  bench/multi_turn_sampler.py's `main` (SmolLM2-135M shape, 64 rows, 256 slots, tool
              replies of 16 tokens): the cost of a pause = (tools seconds - the seconds its slots
              take at the no-pause turn loop's rate) / pauses.
  update      one optimizer update of the Qwen2-0.5B shape on one device (bench/scale.py's
              `measure`: GRPO loss with KL, adamw, 32 sequences = 8 prompts x G 4, 64 + 128
              tokens): step time, tokens/s, MFU against the measured bf16 peak.
  packed_update  one update of the SmolLM2-135M shape on long-tailed completion lengths (64 sequences,
              G 8, 64 + up to 1,024 tokens, mean about 300; micro-batches of 16), padded and packed
              (batch.packing, micro-batches by tokens): ms per update, padding share, micro-batches.
  decode:qwen2-1.5b, w1_f32 (W1 in float32, as the README's H100 run): if time is left.

Results go to --out as they come (report.json and the markdown, rewritten after every section, so
a run stopped at its limit still leaves what it measured); the markdown also goes to
docs/perf/<device>-<date>.md (--docs; not with --quick unless given). The table is printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
sys.path.insert(0, BENCH)

GB = 1e9
MIB = 2.0**20

# (name, time box in seconds of the full run, the same with --quick)
SECTIONS = (
    ("env", 45, 60),
    ("ceilings", 45, 60),
    ("decode:qwen2-0.5b", 100, 90),
    ("w1", 90, 120),
    ("multi_turn", 75, 90),
    ("decode:smollm2-135m", 75, 90),
    ("update", 75, 90),
    ("packed_update", 90, 120),
    ("decode:qwen2-1.5b", 90, 90),
    ("w1_f32", 60, 120),
)
MIN_SECTION_S = 20  # a section is started only with at least this much of the budget left


def extra_presets():
    """Shapes not in trainers.models.presets, defined for this bench only."""
    from trainers.models.presets import ModelConfig

    return {
        # Qwen2-1.5B's shape (Qwen/Qwen2-1.5B config.json), randomly initialised.
        "qwen2-1.5b": ModelConfig(
            vocab_size=151936,
            num_layers=28,
            hidden_size=1536,
            mlp_size=8960,
            num_heads=12,
            head_dim=128,
            num_kv_heads=2,
            rope_theta=1_000_000.0,
            qk_norm=False,
            tie_embeddings=True,
            qkv_bias=True,
        ),
    }


def model_shape(name: str, dtype: str, quick: bool):
    from scale import quick_shape

    from trainers.models.presets import PRESETS

    cfg = dataclasses.replace({**PRESETS, **extra_presets()}[name], dtype=dtype)
    return quick_shape(cfg) if quick else cfg


def compute_dtype() -> str:
    import jax

    # ACCEL_REPORT_DTYPE: force one (a CPU check of the bfloat16 path)
    return os.environ.get("ACCEL_REPORT_DTYPE") or ("float32" if jax.devices()[0].platform == "cpu" else "bfloat16")


# ----------------------------------------------------------------------------------------- sections
# Each takes (save, quick): save(**figures) records figures at once (kept if the section dies later).


def section_env(save, quick):
    import jax

    device = jax.devices()[0]
    stats = {}
    try:
        stats = device.memory_stats() or {}
    except Exception as exc:  # noqa: BLE001 - not every backend has memory stats
        stats = {"error": repr(exc)}
    save(
        jax_version=jax.__version__,
        jaxlib_version=_jaxlib_version(),
        backend=jax.default_backend(),
        device_count=jax.device_count(),
        devices=[f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()],
        device_kind=device.device_kind,
        platform=device.platform,
        memory_bytes_limit=stats.get("bytes_limit"),
        python=sys.version.split()[0],
    )
    try:
        import flax

        save(flax_version=flax.__version__)
    except Exception:  # noqa: BLE001
        pass
    if device.platform == "gpu":
        try:
            out = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
            save(nvidia_smi=out)
        except Exception as exc:  # noqa: BLE001
            save(nvidia_smi=f"unavailable: {exc!r}")


def _jaxlib_version():
    try:
        import jaxlib

        return jaxlib.__version__
    except Exception:  # noqa: BLE001
        return None


def section_ceilings(save, quick):
    import jax
    import jax.numpy as jnp
    from grpo_step import matmul_peak_flops

    elements = (16 << 20) if quick else (512 << 20)  # float32: 64 MiB / 2 GiB
    x = jax.random.normal(jax.random.key(0), (elements,), jnp.float32)
    add_one = jax.jit(lambda a: a + 1.0)
    add_one(x).block_until_ready()
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        add_one(x).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    moved = 2 * x.nbytes
    save(copy_bytes=moved, copy_s=best, copy_gb_per_s=moved / best / GB)
    del x
    n = 512 if quick else 8192
    dtype = "bfloat16"
    save(matmul_n=n, matmul_dtype=dtype, matmul_tflops=matmul_peak_flops(n=n, repeats=10, dtype=dtype) / 1e12)
    if jax.devices()[0].platform == "cpu":  # the CPU computes in float32: its peak too
        save(matmul_f32_tflops=matmul_peak_flops(n=n, repeats=5, dtype="float32") / 1e12)


def decode_figures(cfg, batch: int, prompt_tokens: int, new_tokens: int, param_bytes: int) -> dict:
    """Bytes a decode step must read (weights once; KV up to each row's position, mean over the
    steps) and those today's dense cache reads; model FLOPs of one decode step."""
    from grpo_step import layer_flops, lm_head_flops

    kv_item = 4 if cfg.dtype == "float32" else 2
    per_token_kv = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * kv_item
    mean_context = prompt_tokens + (new_tokens - 1) / 2
    steps = max(new_tokens - 1, 1)
    mean_position = prompt_tokens + (new_tokens - 2) / 2
    return {
        "rows": batch,
        "prompt_tokens": prompt_tokens,
        "new_tokens": new_tokens,
        "decode_steps": steps,
        "param_bytes": param_bytes,
        "kv_bytes_per_step": batch * per_token_kv * mean_context,
        "dense_kv_bytes_per_step": batch * per_token_kv * (prompt_tokens + new_tokens),
        "flops_per_step": batch * (layer_flops(cfg, mean_position, 1) + lm_head_flops(cfg, 1)),
    }


def section_decode(save, quick, preset: str):
    import jax
    import numpy as np

    from trainers.models import transformer as model_lib
    from trainers.models.generate import SamplingParams, cast_for_generation, generate

    dtype = compute_dtype()
    cfg = model_shape(preset, dtype, quick)
    batches = (8, 16) if quick else (64, 256)
    prompt_tokens, new_tokens = (16, 32) if quick else (32, 256)
    repeats = 2
    graphdef, params = model_lib.init_params(cfg, seed=0)
    params = cast_for_generation(params, dtype)  # as the trainer samples: matrices in the compute dtype
    param_bytes = int(sum(leaf.nbytes for leaf in jax.tree.leaves(params)))
    save(
        model=preset,
        dtype=dtype,
        params=model_lib.param_count(params),
        param_bytes=param_bytes,
        shape={
            k: v
            for k, v in dataclasses.asdict(cfg).items()
            if k in ("num_layers", "hidden_size", "vocab_size", "num_kv_heads")
        },
    )
    rng = np.random.default_rng(0)
    # No EOS stop: every row decodes all its tokens (pad_id 0, never sampled as a stop).
    sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, stop_at_eos=False, pad_id=0)
    runs = {}
    for batch in batches:
        try:
            prompts = rng.integers(3, cfg.vocab_size, size=(batch, prompt_tokens)).astype(np.int32)
            valid = np.ones(prompts.shape, bool)
            key = jax.random.key(batch)
            t0 = time.perf_counter()
            generate(graphdef, params, prompts, valid, key, sampling)
            first_s = time.perf_counter() - t0
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                result = generate(graphdef, params, prompts, valid, key, sampling)
                best = min(best, time.perf_counter() - t0)
            tokens = int(result.mask.sum())
            runs[str(batch)] = {
                **decode_figures(cfg, batch, prompt_tokens, new_tokens, param_bytes),
                "seconds": best,
                "compile_and_first_s": first_s,
                "tokens": tokens,
                "tokens_per_s": tokens / best,
                "ms_per_step": best / max(new_tokens - 1, 1) * 1e3,
            }
            print(
                f"  decode {preset} rows {batch}: {best:.3f} s, {tokens / best:,.0f} tokens/s "
                f"(first call {first_s:.1f} s)",
                flush=True,
            )
            save(runs=runs)
            runs[str(batch)]["engine"] = engine_decode(
                graphdef, params, prompts, valid, key, sampling, batch, repeats, result.tokens
            )
            print(f"  decode {preset} rows {batch}, engine: {runs[str(batch)]['engine']}", flush=True)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            runs[str(batch)] = {"rows": batch, "error": f"{type(exc).__name__}: {exc}"[:300]}
        save(runs=runs)


def engine_decode(graphdef, params, prompts, valid, key, sampling, slots: int, repeats: int, static_tokens) -> dict:
    """The same decode through the engine (`engine.batching.generate_paged`, `slots` slots, pages of 16,
    chunks of 32; paged attention with the backend's kernel): best seconds of `repeats` after a first
    call, tokens/s, and whether it sampled the static sampler's tokens."""
    from trainers.engine.batching import EngineSettings, generate_paged

    settings = EngineSettings(num_slots=slots, page_tokens=16, chunk_tokens=32)
    try:
        t0 = time.perf_counter()
        generate_paged(graphdef, params, prompts, valid, key, sampling, settings)
        first_s = time.perf_counter() - t0
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            result, stats = generate_paged(graphdef, params, prompts, valid, key, sampling, settings)
            best = min(best, time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - the report goes on without this figure
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    tokens = int(result.mask.sum())
    return {
        "seconds": best,
        "compile_and_first_s": first_s,
        "tokens_per_s": tokens / best,
        "slot_utilisation": stats.slot_utilisation,
        "same_tokens": bool((result.tokens == static_tokens).all()),
    }


class _Tee(io.TextIOBase):
    """stdout that is printed and kept (to read a reused bench's printed figures)."""

    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text):
        self.stream.write(text)
        self.stream.flush()
        self.kept.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()


def section_w1(save, quick, dtype: str | None = None):
    import grpo_step

    dtype = dtype or compute_dtype()
    steps = "4" if quick else "6"
    argv = ["--steps", steps, "--warmup", "2", "--json", "--set", f"model.dtype={dtype}"]
    save(config="configs/w1.yaml", dtype=dtype, argv=" ".join(argv))
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        grpo_step.main(argv)
    figures = [json.loads(line) for line in tee.kept.getvalue().splitlines() if line.startswith("{")]
    if not figures:
        raise RuntimeError("grpo_step printed no JSON line")
    save(**figures[-1])


def section_multi_turn(save, quick):
    import multi_turn_sampler

    argv = (
        ["--preset", "tiny", "--batch", "8", "--prompt-tokens", "16", "--max-new", "48", "--repeats", "2"]
        if quick
        else [
            "--preset",
            "smollm2-135m",
            "--batch",
            "64",
            "--prompt-tokens",
            "64",
            "--max-new",
            "256",
            "--repeats",
            "2",
        ]
    )
    save(argv=" ".join(argv))
    tee = _Tee(sys.stdout)
    saved_argv = sys.argv
    sys.argv = ["multi_turn_sampler.py", *argv]
    try:
        with contextlib.redirect_stdout(tee):
            multi_turn_sampler.main()
    finally:
        sys.argv = saved_argv
    text = tee.kept.getvalue()
    runs = {}
    for name, seconds, slots in re.findall(r"^(plain|turns|tools)\s+([\d.]+) s\s+(\d+) slots", text, re.M):
        runs[name] = {"seconds": float(seconds), "slots": int(slots), "tokens_per_s": int(slots) / float(seconds)}
    pauses = re.search(r"pauses=(\d+)", text)
    figures = {"runs": runs, "pauses": int(pauses.group(1)) if pauses else None}
    if pauses and int(pauses.group(1)) and {"turns", "tools"} <= runs.keys():
        tools, turns = runs["tools"], runs["turns"]
        extra = tools["seconds"] - tools["slots"] / turns["tokens_per_s"]
        figures["pause_cost_ms"] = extra / int(pauses.group(1)) * 1e3
    save(**figures)


def section_update(save, quick):
    import jax
    from scale import measure

    dtype = compute_dtype()
    cfg = model_shape("qwen2-0.5b", dtype, quick)
    sequences, group, prompt_tokens, completion_tokens = (8, 4, 16, 16) if quick else (32, 4, 64, 128)
    save(
        model="qwen2-0.5b",
        dtype=dtype,
        sequences=sequences,
        group=group,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )
    save(**measure(cfg, jax.devices()[:1], sequences, group, prompt_tokens, completion_tokens, steps=2 if quick else 3))


def long_tailed_lengths(sequences: int, completion_tokens: int, seed: int = 0):
    """Completion lengths like the SmolLM2 demo's sampled ones: log-normal around a median of a
    fifth of the budget, one in six or so cut at the budget."""
    import numpy as np

    rng = np.random.default_rng(seed)
    median = max(1, completion_tokens // 5)
    return np.clip(rng.lognormal(np.log(median), 1.0, sequences).astype(int) + 1, 1, completion_tokens)


def section_packed_update(save, quick):
    """The update of the SmolLM2-135M shape on long-tailed completion lengths, padded and packed
    (batch.packing: `trainers.step.packing.pack_micro_batches`), each compiled once and timed."""
    import statistics

    import jax
    import numpy as np
    from scale import build_update, synthetic_batch

    from trainers.algo.loss import token_weights
    from trainers.models.segment_attention import shares_prompts
    from trainers.step.packing import pack_micro_batches, unpacked_positions

    dtype = compute_dtype()
    cfg = model_shape("smollm2-135m", dtype, quick)
    sequences, group, prompt_tokens, completion_tokens = (16, 4, 16, 64) if quick else (64, 8, 64, 1024)
    arrays = {
        k: v[0] for k, v in synthetic_batch(sequences, group, prompt_tokens, completion_tokens, cfg.vocab_size).items()
    }
    lengths = long_tailed_lengths(sequences, completion_tokens)
    mask = np.arange(completion_tokens)[None, :] < lengths[:, None]
    arrays["completion_mask"] = mask
    arrays["completion_tokens"] = np.where(mask, arrays["completion_tokens"], 0)
    arrays["weights"] = arrays["metric_weights"] = token_weights(mask, "token-mean")
    save(
        model="smollm2-135m",
        dtype=dtype,
        sequences=sequences,
        group=group,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        mean_completion_tokens=float(lengths.mean()),
    )
    micro = {k: v.reshape(sequences // 16 if not quick else 1, -1, *v.shape[1:]) for k, v in arrays.items()}
    placement, update_fn, params, opt_state = build_update(cfg, jax.devices()[:1])
    per_micro = micro["completion_mask"].shape[1]
    budget = unpacked_positions(prompt_tokens, per_micro, completion_tokens, group)
    for name, packing in (("padded", False), ("packed", True)):
        run = pack_micro_batches(
            micro, group, 1, packing, micro_batch_tokens=budget if packing else None, share_prompts=shares_prompts()
        )
        batch = placement.train_batch(run.arrays, batch_axis=1)
        prompt_group = 1 if run.packed else group
        seconds = []
        for _ in range(3):
            t0 = time.perf_counter()
            with placement.training():
                params, opt_state, metrics = update_fn(params, opt_state, batch, prompt_group=prompt_group)
            jax.block_until_ready((params, opt_state, metrics))
            seconds.append(time.perf_counter() - t0)
        save(
            **{
                f"{name}_first_s": seconds[0],
                f"{name}_s": statistics.median(seconds[1:]),
                f"{name}_padding": 1 - run.tokens / run.positions,
                f"{name}_micro_batches": int(batch["completion_mask"].shape[0]),
            }
        )


SECTION_FUNCTIONS = {
    "env": section_env,
    "ceilings": section_ceilings,
    "w1": section_w1,
    "w1_f32": lambda save, quick: section_w1(save, quick, "float32"),
    "multi_turn": section_multi_turn,
    "update": section_update,
    "packed_update": section_packed_update,
}


def run_section(name: str, result_path: str, quick: bool) -> int:
    """Child process: run one section, writing its figures to result_path as they come."""
    figures: dict = {}
    started = time.perf_counter()

    def write(status: str, **extra):
        record = {"status": status, "elapsed_s": time.perf_counter() - started, "figures": figures, **extra}
        tmp = result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(record, f, default=str)
        os.replace(tmp, result_path)

    def save(**new):
        figures.update(new)
        write("running")

    write("running")
    try:
        if name.startswith("decode:"):
            section_decode(save, quick, name.split(":", 1)[1])
        else:
            SECTION_FUNCTIONS[name](save, quick)
    except BaseException as exc:  # noqa: BLE001 - report any failure, the parent goes on
        traceback.print_exc()
        write("error", error=f"{type(exc).__name__}: {exc}"[:500])
        return 1
    write("ok")
    return 0


# ------------------------------------------------------------------------------------------- report


def device_slug(env: dict) -> str:
    kind = (env.get("device_kind") or env.get("platform") or "unknown").strip()
    match = re.search(r"\b(H200|H100|H20|A100|A10G|L40S|L4|B200|GB200|TPU v\w+)\b", kind, re.I)
    if match:
        return re.sub(r"[^a-z0-9]+", "-", match.group(1).lower()).strip("-")
    if env.get("platform") == "cpu":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-") or "unknown"


def _fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def table_rows(results: dict) -> list[tuple[str, str, str]]:
    """(figure, value, how) for every figure measured so far."""
    rows: list[tuple[str, str, str]] = []

    def status_row(name, label):
        record = results.get(name)
        if record is None:
            rows.append((label, "not run", "time budget spent" if results.get("_budget_spent") else "-"))
            return None
        if record["status"] != "ok":
            rows.append((label, f"**{record['status']}**", (record.get("error") or "")[:160].replace("|", "/")))
        return record["figures"]

    env = status_row("env", "environment") or {}
    if env:
        rows.append(
            (
                "JAX / jaxlib / Flax",
                f"{env.get('jax_version')} / {env.get('jaxlib_version')} / {env.get('flax_version', '-')}",
                f"Python {env.get('python')}, backend {env.get('backend')}",
            )
        )
        memory = env.get("memory_bytes_limit")
        rows.append(
            (
                "devices",
                f"{env.get('device_count')} x {env.get('device_kind')}",
                f"JAX memory limit {memory / 2**30:.1f} GiB" if memory else "memory not reported",
            )
        )
        if env.get("nvidia_smi"):
            rows.append(
                (
                    "card (nvidia-smi)",
                    env["nvidia_smi"].replace("\n", "; "),
                    "name, driver, memory, max SM / memory clocks, power limit",
                )
            )
    ceilings = status_row("ceilings", "ceilings") or {}
    bandwidth = ceilings.get("copy_gb_per_s")
    peak_tflops = ceilings.get("matmul_tflops")
    if bandwidth:
        rows.append(
            (
                "copy bandwidth",
                f"{bandwidth:,.0f} GB/s",
                f"jit(x + 1) over {ceilings['copy_bytes'] / 2 / 2**30:.2g} GiB float32, read + write, best of 10",
            )
        )
    if peak_tflops:
        rows.append(
            (
                "bf16 matmul peak",
                f"{peak_tflops:,.1f} TFLOP/s",
                f"{ceilings['matmul_n']}^3 bfloat16, random data, best of 10",
            )
        )
    if ceilings.get("matmul_f32_tflops"):
        rows.append(("f32 matmul peak", f"{ceilings['matmul_f32_tflops'] * 1e3:,.0f} GFLOP/s", "CPU only"))
    for name, _, _ in SECTIONS:
        if not name.startswith("decode:"):
            continue
        preset = name.split(":", 1)[1]
        figures = status_row(name, f"decode {preset}")
        if not figures:
            continue
        for batch, run in (figures.get("runs") or {}).items():
            label = f"decode {preset}, {batch} rows"
            if "error" in run:
                rows.append((label, "**error**", run["error"][:160].replace("|", "/")))
                continue
            bytes_step = run["param_bytes"] + run["kv_bytes_per_step"]
            how = (
                f"{figures['dtype']}, prompt {run['prompt_tokens']} + {run['new_tokens']} new, "
                f"{run['ms_per_step']:.2f} ms/step; weights {run['param_bytes'] / MIB:,.0f} MiB + KV "
                f"{run['kv_bytes_per_step'] / MIB:,.0f} MiB/step "
                f"(dense cache {run['dense_kv_bytes_per_step'] / MIB:,.0f})"
            )
            value = f"{run['tokens_per_s']:,.0f} tokens/s"
            if bandwidth:
                roof = run["rows"] / (bytes_step / (bandwidth * GB))
                value += f"; {run['tokens_per_s'] / roof:.0%} of HBM roofline {roof:,.0f}"
                if peak_tflops:
                    floor_s = max(bytes_step / (bandwidth * GB), run["flops_per_step"] / (peak_tflops * 1e12))
                    how += f"; floor max(bytes, FLOPs) {floor_s * 1e3:.2f} ms/step"
            rows.append((label, value, how))
            engine = run.get("engine")
            if engine is not None:
                if "error" in engine:
                    rows.append((label + ", engine", "**error**", engine["error"][:160].replace("|", "/")))
                    continue
                value = f"{engine['tokens_per_s']:,.0f} tokens/s ({engine['tokens_per_s'] / run['tokens_per_s']:.2f}x)"
                if bandwidth:
                    value += f"; {engine['tokens_per_s'] / roof:.0%} of HBM roofline"
                rows.append(
                    (
                        label + ", engine",
                        value,
                        f"continuous batching over paged KV, {batch} slots, pages of 16, chunks of 32; "
                        f"same tokens as the static sampler: {engine['same_tokens']}",
                    )
                )
    for name, label in (("w1", "GRPO step W1"), ("w1_f32", "GRPO step W1 float32")):
        figures = status_row(name, label)
        if not figures or "seconds_per_step" not in figures:
            continue
        value = f"{figures['seconds_per_step'] * 1e3:.1f} ms/step, {figures['tokens_per_s']:,.0f} tokens/s"
        peak, against = (peak_tflops * 1e12 if peak_tflops else None), ""
        if figures.get("dtype") == "float32":
            if ceilings.get("matmul_f32_tflops"):
                peak = ceilings["matmul_f32_tflops"] * 1e12
            else:
                against = " of the bf16 peak"
        if peak:
            value += f", MFU {figures['model_gflops_per_step'] * 1e9 / figures['seconds_per_step'] / peak:.1%}{against}"
        rows.append(
            (
                label,
                value,
                f"{figures.get('dtype')}, rollout {figures['rollout_s'] * 1e3:.1f} ms + train "
                f"{figures['train_s'] * 1e3:.1f} ms; {figures['model_gflops_per_step']:.1f} GFLOP executed; "
                f"median of {figures['steps_timed']}; grpo_step's own MFU {figures['mfu']:.1%} vs "
                f"{figures['peak_source']}",
            )
        )
    figures = status_row("multi_turn", "multi-turn pause")
    if figures and figures.get("runs"):
        runs = figures["runs"]
        value = (
            f"{figures['pause_cost_ms']:.2f} ms per pause"
            if figures.get("pause_cost_ms") is not None
            else "no pause cost"
        )
        how = ", ".join(f"{k} {v['tokens_per_s']:,.0f} tokens/s" for k, v in runs.items())
        rows.append(("multi-turn pause cost", value, f"{figures.get('pauses')} pauses; {how}; {figures['argv']}"))
    figures = status_row("update", "update qwen2-0.5b")
    if figures and "step_s" in figures:
        value = f"{figures['step_s'] * 1e3:.0f} ms/update, {figures['tokens_per_s']:,.0f} tokens/s"
        if peak_tflops:
            value += f", MFU {figures['gflops_per_step'] * 1e9 / figures['step_s'] / (peak_tflops * 1e12):.1%}"
        rows.append(
            (
                "update qwen2-0.5b, 1 device",
                value,
                f"{figures['dtype']}, {figures['sequences']} seqs (G {figures['group']}), "
                f"{figures['prompt_tokens']} + {figures['completion_tokens']} tokens, "
                f"{figures['gflops_per_step']:.0f} GFLOP; compile {figures['compile_s']:.0f} s; "
                f"compiled {figures['compiled_bytes'] / 2**30:.1f} GiB",
            )
        )
    figures = status_row("packed_update", "packed update smollm2-135m")
    if figures and "packed_s" in figures:
        rows.append(
            (
                "update smollm2-135m, long-tailed lengths: packed vs padded",
                f"{figures['padded_s'] * 1e3:.0f} -> {figures['packed_s'] * 1e3:.0f} ms/update "
                f"({figures['padded_s'] / figures['packed_s']:.2f}x)",
                f"{figures['dtype']}, {figures['sequences']} seqs (G {figures['group']}), {figures['prompt_tokens']} + "
                f"up to {figures['completion_tokens']} tokens (mean {figures['mean_completion_tokens']:.0f}); padding "
                f"{figures['padded_padding']:.0%} -> {figures['packed_padding']:.0%}; micro-batches "
                f"{figures['padded_micro_batches']} -> {figures['packed_micro_batches']}; first calls (compile) "
                f"{figures['padded_first_s']:.0f} s, {figures['packed_first_s']:.0f} s",
            )
        )
    return rows


def markdown(results: dict, meta: dict) -> str:
    env = (results.get("env") or {}).get("figures", {})
    rows = table_rows(results)
    lines = [
        f"# Accelerator report: {meta['device']} ({meta['date']})",
        "",
        f"Card: {env.get('nvidia_smi') or env.get('device_kind', '?')}. "
        f"JAX {env.get('jax_version', '?')} ({env.get('backend', '?')}). "
        "Today's sampler and training step (the \"old sampler\" column, to compare the paged engine "
        "against; the engine does not exist yet). Random weights; one run of each figure.",
        "",
        "Command:",
        "",
        "```",
        meta["command"],
        "```",
        "",
        "| figure | value | how |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    lines += [
        "",
        "Roofline: a decode step reads the weights once and each row's KV cache up to its position "
        "(mean over the steps); that over the measured copy bandwidth is the fastest step, rows / it the "
        "roofline tokens/s. tokens/s count the whole `generate` call (prefill included). MFU: executed "
        "model FLOPs (bench/grpo_step.py's `step_model_flops`, 3 x `logprob_pass_flops` for the update) "
        "over the measured bf16 matmul peak.",
        "",
        f"Wall time {meta.get('wall_s', 0):.0f} s of a {meta['budget_s']:.0f} s budget; sections: "
        + ", ".join(
            f"{name} {rec['status']} ({rec.get('elapsed_s', 0):.0f} s)"
            for name, rec in results.items()
            if not name.startswith("_")
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def orchestrate(args) -> int:
    started = time.perf_counter()
    results: dict = {}
    work = tempfile.mkdtemp(prefix="accel-report-")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    command = args.command or (
        "python3 " + " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT), *sys.argv[1:]])
    )
    meta = {"date": args.date, "budget_s": args.budget_s, "command": command, "device": "unknown"}
    wanted = [s.strip() for s in args.sections.split(",")] if args.sections else None

    def publish():
        meta["wall_s"] = time.perf_counter() - started
        meta["device"] = device_slug((results.get("env") or {}).get("figures", {}))
        text = markdown(results, meta)
        targets = []
        if args.out:
            targets.append(os.path.join(args.out, f"{meta['device']}-{args.date}.md"))
            with open(os.path.join(args.out, "report.json"), "w") as f:
                json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
        if args.docs:
            targets.append(os.path.join(args.docs, f"{meta['device']}-{args.date}.md"))
        for path in targets:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        return text, targets

    for name, box, quick_box in SECTIONS:
        if wanted and name not in wanted and name != "env":
            continue
        remaining = args.budget_s - (time.perf_counter() - started)
        if remaining < MIN_SECTION_S:
            print(f"== {name}: skipped, {remaining:.0f} s of the budget left", flush=True)
            results["_budget_spent"] = True
            continue
        limit = min(quick_box if args.quick else box, remaining)
        result_path = os.path.join(work, name.replace(":", "_") + ".json")
        cmd = [sys.executable, os.path.abspath(__file__), "--section", name, "--result", result_path]
        if args.quick:
            cmd.append("--quick")
        print(f"== {name} (time box {limit:.0f} s, {remaining:.0f} s of the budget left)", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:
            with open(result_path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            record = {"status": "error", "figures": {}, "error": f"no result (exit {proc.returncode})"}
        if timed_out:
            record.update(status="timed out", error=f"stopped at its {limit:.0f} s time box; figures so far kept")
        elif proc.returncode and record.get("status") == "running":
            record.update(status="error", error=f"child exited {proc.returncode}")
        record["elapsed_s"] = time.perf_counter() - t0
        results[name] = record
        print(
            f"== {name}: {record['status']} in {record['elapsed_s']:.1f} s"
            + (f" ({record.get('error')})" if record["status"] != "ok" else ""),
            flush=True,
        )
        try:
            publish()
        except Exception:  # noqa: BLE001 - a report bug must not stop the measurements
            traceback.print_exc()
    text, targets = publish()
    print("\nwritten: " + ", ".join(targets), flush=True)
    print("\n" + text, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny shapes (2-layer models, small batches): a CPU check")
    parser.add_argument(
        "--out", default=None, help="folder for report.json and the markdown, rewritten as sections end"
    )
    parser.add_argument(
        "--docs", default=None, help="folder for <device>-<date>.md (default docs/perf; with --quick none)"
    )
    parser.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    parser.add_argument("--budget-s", type=float, default=360.0, help="wall-time budget of all sections")
    parser.add_argument(
        "--sections", default=None, help="comma-separated subset of: " + ", ".join(name for name, _, _ in SECTIONS)
    )
    parser.add_argument("--command", default=None, help="the command line to record in the report")
    parser.add_argument("--section", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.section:
        return run_section(args.section, args.result, args.quick)
    if args.docs is None and not args.quick:
        args.docs = os.path.join(ROOT, "docs", "perf")
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())

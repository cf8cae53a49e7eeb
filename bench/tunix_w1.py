"""Benchmark workload W1 on google-tunix 0.1.7 (Tunix's own GRPO stack).

Runs INSIDE the Tunix virtual environment (bench/.tunix-venv), not the
project's venv; bench/compare_tunix.py creates that venv and launches this
script. It can also be run by hand:

    bench/.tunix-venv/bin/python bench/tunix_w1.py --steps 6

W1: random-init Qwen3-style model (tunix.models.qwen3.Qwen3), 4 layers,
embed 256, MLP hidden 1024, 4 query heads x 64, 2 KV heads, vocab 512;
8 prompts x G=4 generations; prompts of exactly 32 tokens; exactly 64
generated tokens (the EOS id is outside the vocabulary, so it is never
sampled and generation never stops early); GRPO mu=1 (num_iterations=1),
beta=0.04 (reference model used), one optimizer update per step (mini batch =
full batch, no gradient accumulation); one CPU device; float32.

Wiring (all Tunix's own classes): Qwen3 model -> RLCluster (vanilla rollout
engine, one 1x1 mesh shared by actor/reference/rollout) -> GRPOLearner with
GRPOConfig, a constant reward function, and a dataset of random 32-token
prompts passed as strings through a tiny whitespace "tokenizer" stand-in
(Tunix's sampler takes strings and tokenizes them itself).

Timing: each GRPO global step (rollout + reference logps + advantages + one
actor update) is timed by wall clock, start-to-start, by wrapping the
learner's per-step method. The reported seconds_per_step is the median of
the steps after the first `--warmup` (default 2; they include compilation).

Output: progress on stderr; the LAST line of stdout is one JSON object:
{"framework": "tunix", "version": "0.1.7", "seconds_per_step": X,
 "steps_timed": K, ...}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

# One CPU device, no accelerator probing. Must be set before jax is imported.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

W1 = dict(
    num_layers=4,
    embed_dim=256,
    hidden_dim=1024,
    num_heads=4,
    head_dim=64,
    num_kv_heads=2,
    vocab_size=512,
    num_prompts=8,
    num_generations=4,
    prompt_len=32,
    gen_len=64,
    num_iterations=1,
    beta=0.04,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="W1 GRPO benchmark on google-tunix (prints a JSON line).")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps to run (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="leading steps excluded from the median (default 2)")
    p.add_argument(
        "--kv-cache-size",
        type=int,
        default=None,
        help="sampler KV-cache length (default prompt+gen = 96, the smallest Tunix accepts)",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="rollout sampling temperature (default 1.0)")
    p.add_argument(
        "--tied-embedding",
        action="store_true",
        help="tie input embedding and LM head (default: separate lm_head, as in Qwen3-8B and larger)",
    )
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="also time rollout / reference logps / actor update "
        "per step (adds device syncs; off for the headline "
        "figure)",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class IdTokenizer:
    """Whitespace-separated integer ids <-> text; the minimum Tunix needs.

    Tunix's TokenizerAdapter accepts any object with encode/decode/bos_id/
    eos_id/pad_id. bos_id() is 0 (falsy), so Tunix's sampler prepends no BOS:
    a 32-token prompt string stays exactly 32 tokens. W1's prompts use ids
    1..V-1, so pad (0) never occurs inside a prompt (Tunix masks every token
    equal to the pad id); R1 (tunix_r1.py) passes a pad id its prompts do not
    contain. eos_id() is V (out of vocabulary): the model can only sample
    ids < V, so no sequence ever stops early.
    """

    def __init__(self, vocab_size: int, pad_id: int = 0):
        self._vocab = vocab_size
        self._pad = pad_id

    def encode(self, text, **kwargs):
        return [int(t) for t in str(text).split()]

    def decode(self, ids, **kwargs):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return 0

    def pad_id(self):
        return self._pad

    def eos_id(self):
        return self._vocab


def constant_reward(prompts, completions, **kwargs):
    del prompts, kwargs
    return [1.0] * len(completions)


def _proc_stat():
    """(busy, total) CPU jiffies of the whole machine, or None (non-Linux)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals) - idle, sum(vals)


LOG_PREFIX = "tunix_w1"  # tunix_r1.py sets its own


def log(msg):
    print(f"[{LOG_PREFIX}] {msg}", file=sys.stderr, flush=True)


def one_device_mesh():
    """1x1 ("fsdp", "tp") mesh with Auto axes on the first device (jax.make_mesh
    defaults to Explicit axes in this jax, which Tunix's embedding gathers do
    not support)."""
    import jax
    import numpy as np

    return jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))


def build_learner(
    actor,
    reference,
    tokenizer,
    mesh,
    *,
    steps,
    num_prompts,
    num_generations,
    prompt_len,
    gen_len,
    kv_cache_size,
    temperature,
    num_iterations,
    beta,
    reward_fn=constant_reward,
):
    """Tunix's own GRPO stack around two models: RLCluster (vanilla rollout
    engine, one mesh shared by actor/reference/rollout, AdamW lr 1e-6,
    mini batch = micro batch = the whole batch: one optimizer update per step,
    no gradient accumulation) and GRPOLearner. Generation never stops early
    (EOS = tokenizer.eos_id(), out of vocabulary). Returns (cluster, learner)."""
    import optax
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner as grpo_lib
    from tunix.rl.rollout import base_rollout

    B = num_prompts
    training_config = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optax.adamw(learning_rate=1e-6, b1=0.9, b2=0.99, weight_decay=0.1),
        eval_every_n_steps=10**9,  # no evaluation
        max_steps=steps,
        mini_batch_size=B,  # one optimizer update per step
        train_micro_batch_size=B,  # no gradient accumulation
        rollout_micro_batch_size=B,
        compute_logps_micro_batch_size=B,
    )
    rollout_config = base_rollout.RolloutConfig(
        max_tokens_to_generate=gen_len,
        max_prompt_length=prompt_len,
        kv_cache_size=kv_cache_size,
        temperature=temperature,
        top_p=1.0,
        top_k=None,
        eos_tokens=[tokenizer.eos_id()],  # never sampled: exactly gen_len tokens
    )
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={
            rl_cluster_lib.Role.ACTOR: mesh,
            rl_cluster_lib.Role.REFERENCE: mesh,
            rl_cluster_lib.Role.ROLLOUT: mesh,
        },
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=training_config,
        rollout_config=rollout_config,
    )
    cluster = rl_cluster_lib.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tokenizer,
        cluster_config=cluster_config,
    )
    grpo_config = grpo_lib.GRPOConfig(
        num_generations=num_generations,
        num_iterations=num_iterations,
        beta=beta,
        epsilon=0.2,
    )
    learner = grpo_lib.GRPOLearner(
        rl_cluster=cluster,
        algo_config=grpo_config,
        reward_fns=reward_fn,
    )
    return cluster, learner


def run_timed(learner, cluster, tokenizer, batches, *, steps, warmup, gen_len, breakdown=False):
    """Runs learner.train(batches) and times each GRPO global step (rollout +
    reference logps + advantages + one actor update) by wall clock,
    start-to-start, by wrapping the learner's per-step method; the last step
    waits for its update. Returns the timing and generation figures of the
    result JSON (seconds_per_step = median after `warmup` steps)."""
    import jax
    import numpy as np
    from flax import nnx

    # Generation lengths, straight from the rollout output Tunix trains on.
    gen_lengths: list[list[int]] = []
    pad_hits: list[int] = []  # generated tokens equal to pad id (Tunix masks)
    prompt_shapes: list[tuple] = []
    orig_generate = cluster.generate

    def generate_spy(*a, **kw):
        out = orig_generate(*a, **kw)
        gen_lengths.append([int(len(t)) for t in out.tokens])
        pad_hits.append(int(sum(int((np.asarray(t) == tokenizer.pad_id()).sum()) for t in out.tokens)))
        prompt_shapes.append(tuple(np.asarray(out.left_padded_prompt_tokens).shape))
        return out

    cluster.generate = generate_spy

    # Optional phase breakdown (blocks on each phase's result).
    phases: dict[str, list[float]] = {"rollout": [], "ref_logps": [], "actor_update": []}
    if breakdown:

        def timed(name, fn, block):
            def wrapper(*a, **kw):
                t = time.perf_counter()
                r = fn(*a, **kw)
                if block is not None:
                    jax.block_until_ready(block(r))
                phases[name].append(time.perf_counter() - t)
                return r

            return wrapper

        cluster.generate = timed("rollout", cluster.generate, None)
        cluster.get_ref_per_token_logps = timed("ref_logps", cluster.get_ref_per_token_logps, lambda r: r)
        cluster.update_actor = timed(
            "actor_update", cluster.update_actor, lambda r: nnx.state(cluster.actor_trainer.model)
        )

    # Per-step wall clock: wrap the learner's global-step method.
    step_starts: list[float] = []
    step_ends: list[float] = []
    cpu_starts: list[float] = []  # process CPU time (all threads), for context
    cpu_ends: list[float] = []
    machine_at_timed_start: list = []
    orig_step = learner._run_global_step

    def step_spy(*a, **kw):
        step_starts.append(time.perf_counter())
        cpu_starts.append(time.process_time())
        if len(step_starts) == warmup + 1:
            machine_at_timed_start.append(_proc_stat())
        r = orig_step(*a, **kw)
        if len(step_starts) == steps:
            # Last step: wait for the (asynchronously dispatched) update to finish.
            # Earlier steps need no sync: the next step's rollout waits for it.
            jax.block_until_ready(nnx.state(cluster.actor_trainer.model))
        step_ends.append(time.perf_counter())
        cpu_ends.append(time.process_time())
        log(f"step {len(step_starts)}/{steps}: {step_ends[-1] - step_starts[-1]:.3f}s")
        return r

    learner._run_global_step = step_spy

    t0 = time.perf_counter()
    learner.train(batches)
    t_total = time.perf_counter() - t0

    n = len(step_starts)
    if n != steps:
        log(f"WARNING: expected {steps} steps, saw {n}")
    # start-to-start durations (include everything the loop does per step);
    # the last step runs to the end of its global step.
    durations = [step_starts[i + 1] - step_starts[i] for i in range(n - 1)]
    if n:
        durations.append(step_ends[-1] - step_starts[-1])
    timed_steps = durations[warmup:]
    cpu_durations = [cpu_starts[i + 1] - cpu_starts[i] for i in range(n - 1)]
    if n:
        cpu_durations.append(cpu_ends[-1] - cpu_starts[-1])
    cpu_timed = cpu_durations[warmup:]
    # Share of the machine's CPU used by OTHER processes during the timed steps:
    # (machine busy time - this process's CPU time) / machine total time.
    other_busy = None
    end_stat = _proc_stat()
    if machine_at_timed_start and machine_at_timed_start[0] and end_stat:
        hz = os.sysconf("SC_CLK_TCK")
        b0, t0_ = machine_at_timed_start[0]
        b1, t1_ = end_stat
        own = sum(cpu_timed)
        if t1_ > t0_:
            other_busy = max(0.0, ((b1 - b0) / hz - own) / ((t1_ - t0_) / hz))
    sps = statistics.median(timed_steps) if timed_steps else float("nan")

    flat_lengths = [x for step in gen_lengths for x in step]
    trained_steps = cluster.actor_trainer.train_steps
    if flat_lengths and (min(flat_lengths) != gen_len or max(flat_lengths) != gen_len):
        log(f"WARNING: generated lengths not all {gen_len}: min {min(flat_lengths)} max {max(flat_lengths)}")
    return {
        "seconds_per_step": round(sps, 4),
        "steps_timed": len(timed_steps),
        "steps_run": n,
        "optimizer_updates": int(trained_steps),
        "step_seconds": [round(d, 4) for d in durations],
        "cpu_seconds_per_step": (round(statistics.median(cpu_timed), 4) if cpu_timed else None),
        "first_step_seconds": round(durations[0], 3) if durations else None,
        "mean_timed_seconds": (round(statistics.mean(timed_steps), 4) if timed_steps else None),
        "total_train_seconds": round(t_total, 2),
        "gen_tokens_per_seq_min": min(flat_lengths) if flat_lengths else None,
        "gen_tokens_per_seq_max": max(flat_lengths) if flat_lengths else None,
        "gen_tokens_equal_pad_per_step": (round(statistics.mean(pad_hits), 2) if pad_hits else None),
        "sequences_per_step": len(gen_lengths[0]) if gen_lengths else None,
        "prompt_tokens_shape": list(prompt_shapes[0]) if prompt_shapes else None,
        "phase_median_seconds": (
            {k: round(statistics.median(v[warmup:]), 4) for k, v in phases.items() if len(v) > warmup}
            if breakdown
            else None
        ),
        "other_processes_cpu_share": (round(other_busy, 3) if other_busy is not None else None),
    }


def environment_fields():
    """Versions and machine of the result JSON."""
    import flax
    import jax

    return {
        "jax": jax.__version__,
        "flax": flax.__version__,
        "python": sys.version.split()[0],
        "devices": [str(d) for d in jax.devices()],
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv=None):
    args = parse_args(argv)
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")

    t_import = time.perf_counter()
    import flax
    import jax
    import numpy as np
    import tunix
    from flax import nnx
    from tunix.models.qwen3 import model as qwen3_lib

    log(
        f"imports took {time.perf_counter() - t_import:.1f}s; "
        f"tunix {tunix.__version__}, jax {jax.__version__}, "
        f"flax {flax.__version__}, devices {jax.devices()}"
    )

    V = W1["vocab_size"]
    P = W1["prompt_len"]
    T = W1["gen_len"]
    B = W1["num_prompts"]
    G = W1["num_generations"]
    kv_cache_size = args.kv_cache_size or (P + T)

    config = qwen3_lib.ModelConfig(
        num_layers=W1["num_layers"],
        vocab_size=V,
        embed_dim=W1["embed_dim"],
        hidden_dim=W1["hidden_dim"],
        num_heads=W1["num_heads"],
        head_dim=W1["head_dim"],
        num_kv_heads=W1["num_kv_heads"],
        rope_theta=1_000_000,
        norm_eps=1e-6,
        use_tied_embedding=args.tied_embedding,
        dtype=jax.numpy.float32,
        param_dtype=jax.numpy.float32,
    )
    mesh = one_device_mesh()

    # Actor and reference: two separate instances with the same random init.
    actor = qwen3_lib.Qwen3(config, rngs=nnx.Rngs(params=args.seed))
    reference = qwen3_lib.Qwen3(config, rngs=nnx.Rngs(params=args.seed))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(actor, nnx.Param)))
    log(f"Qwen3 W1 model: {n_params:,} parameters")

    tokenizer = IdTokenizer(V)
    cluster, learner = build_learner(
        actor,
        reference,
        tokenizer,
        mesh,
        steps=args.steps,
        num_prompts=B,
        num_generations=G,
        prompt_len=P,
        gen_len=T,
        kv_cache_size=kv_cache_size,
        temperature=args.temperature,
        num_iterations=W1["num_iterations"],
        beta=W1["beta"],
    )

    # ---- data ------------------------------------------------------------
    rng = np.random.default_rng(args.seed)

    def batches():
        for _ in range(args.steps + 2):  # a little extra; max_steps stops it
            ids = rng.integers(1, V, size=(B, P))
            yield {
                "prompts": np.array([" ".join(map(str, row)) for row in ids]),
            }

    log(
        f"running {args.steps} GRPO steps: {B} prompts x G={G}, prompt {P}, "
        f"gen {T}, kv cache {kv_cache_size}, beta={W1['beta']}, "
        f"mu={W1['num_iterations']}"
    )
    timing = run_timed(
        learner,
        cluster,
        tokenizer,
        batches(),
        steps=args.steps,
        warmup=args.warmup,
        gen_len=T,
        breakdown=args.breakdown,
    )
    other_share = timing.pop("other_processes_cpu_share")
    result = {
        "framework": "tunix",
        "version": tunix.__version__,
        **timing,
        "kv_cache_size": kv_cache_size,
        "tied_embedding": bool(args.tied_embedding),
        "params": n_params,
        **environment_fields(),
        "other_processes_cpu_share": other_share,
        "workload": "W1",
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

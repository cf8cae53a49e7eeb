"""Async GRPO speedup: one workload with balanced generation and training, run synchronously and then
asynchronously (max trajectory age 1) on 2 CPU devices, in one process.

    .venv/bin/python bench/async_speedup.py [--steps 12] [--warmup 4] [--mu 1] [--parity-steps 0] [--in-flight]

Sync: generation and training both on device 0, one after the other. Async: the collector generates
on device 1 while the trainer trains on device 0 (mesh.rollout_devices=[1], mesh.train_devices=[0]);
the collector may run one step ahead (max age 1), so with balanced phases the ideal is 2x.
Seconds per step are wall-clock seconds between the end of step `warmup` and the end of the last
step (compilation happens in the warmup steps). The workload generates exactly max_new_tokens
tokens per sequence (stop_at_eos off) so that the phases stay balanced as the policy changes; the
script prints the measured sync rollout and train seconds so you can see the balance, and `--mu`
(passes over each step's rollouts) tunes it.

Target: speedup >= 1.7 (NeMo-RL publishes 1.26-1.73x for one-step-off on GPU clusters). Two
accelerators are independent; two virtual XLA:CPU devices are not. One process's CPU client runs
every device's computations on one shared thread pool sized to the machine's cores, and one
device's computation already spreads over that whole pool (in jaxlib 0.10.2 neither
--xla_cpu_multi_thread_eigen=false nor NPROC changes this). So the script measures and prints two
ceilings: first `devices overlap` (throughput of a matmul workload busy on both devices at once over
the same workload on device 0 alone: 2.00 for fully independent devices such as two accelerators,
near 1 for two CPU devices sharing the cores), then after the sync run the cores left over (machine
cores / cores the sync run already keeps busy, from process CPU seconds over wall seconds).
`--in-flight` runs the async side with async.in_flight_weight_updates.

`--parity-steps N` (> 0) also runs the demo task (configs/demo.yaml) for N steps sync and 1.2 N
steps async, and reports at which step async first reaches the sync run's final reward (10-step
moving means): learning parity means by step 1.2 N at the latest. The last line is `... speedup=X.XX`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

# Two host devices (on a machine with accelerators, set JAX_PLATFORMS to use them instead).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def workload(args: argparse.Namespace) -> dict:
    return {
        "seed": 0,
        "model": {"preset": args.preset},
        "data": {"task": "arithmetic", "train_prompts": 256, "eval_prompts": 0},
        "rollout": {"max_new_tokens": args.max_new_tokens, "stop_at_eos": False},
        "batch": {
            "prompts_per_step": args.prompts,
            "mini_batch_prompts": args.prompts // args.mini_batches,
            "rollout_micro_batch_sequences": args.rollout_micro or None,
        },
        "grpo": {"num_generations": args.generations, "num_iterations": args.mu, "beta": 0.0},
        "train": {"max_steps": args.steps, "samples_per_step": 0},
        "checkpoint": {"every_steps": 0},
        "eval": {"every_steps": 0},
    }


def timed_run(raw: dict, warmup: int) -> tuple[float, dict]:
    from trainers.config import parse_config
    from trainers.loop.trainer import train
    from trainers.step.hooks import Hooks

    ends: dict[int, float] = {}
    metrics: dict[int, dict] = {}

    cpu: dict[int, float] = {}

    class Clock(Hooks):  # wall and process CPU seconds at each step's end
        def on_step(self, step, m):
            ends[step] = time.perf_counter()
            cpu[step] = time.process_time()
            metrics[step] = m

    with tempfile.TemporaryDirectory() as run_dir:
        train(parse_config(raw), run_dir, Clock())
    last = max(ends)
    wall = ends[last] - ends[warmup]
    # Cores this process actually got while timed: process CPU seconds / wall seconds.
    metrics[0] = {"cores_used": (cpu[last] - cpu[warmup]) / wall}
    return wall / (last - warmup), metrics


def devices_overlap(size: int = 512, repeats: int = 20) -> float:
    """Throughput of one matmul-chain gradient busy on devices 0 and 1 at once (one Python thread
    each) over the same work on device 0 alone: 2.0 = independent devices, 1.0 = fully shared."""
    import threading

    import jax
    import jax.numpy as jnp

    def chain(x, w):
        for _ in range(8):
            x = jnp.tanh(x @ w * 1e-3)
        return jnp.sum(x * x)

    grad = jax.jit(jax.grad(chain, argnums=1))
    devices = jax.devices()[:2]
    args = [(jax.device_put(jnp.ones((size, size)), d), jax.device_put(jnp.ones((size, size)), d)) for d in devices]
    for a in args:
        grad(*a).block_until_ready()

    def loop(a):
        for _ in range(repeats):
            grad(*a).block_until_ready()

    t0 = time.perf_counter()
    loop(args[0])
    one_s = time.perf_counter() - t0
    threads = [threading.Thread(target=loop, args=(a,)) for a in args]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    both_s = time.perf_counter() - t0
    return 2 * one_s / both_s


def moving_mean(values: list[float], window: int = 10) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def parity(steps: int) -> str:
    from trainers.config import load_config
    from trainers.loop.trainer import train
    from trainers.step.hooks import Hooks

    def rewards(extra: list[str], max_steps: int) -> list[float]:
        out: list[float] = []

        class R(Hooks):
            def on_step(self, step, m):
                out.append(m["reward/mean"])

        config = load_config(
            os.path.join(ROOT, "configs/demo.yaml"),
            [
                f"train.max_steps={max_steps}",
                "eval.every_steps=0",
                "checkpoint.every_steps=0",
                "checkpoint.keep_best_metric=null",
                *extra,
            ],
        )
        with tempfile.TemporaryDirectory() as run_dir:
            train(config, run_dir, R())
        return moving_mean(out)

    sync = rewards([], steps)
    async_steps = int(1.2 * steps)
    asyn = rewards(
        ["async.enabled=true", "async.max_trajectory_age_steps=1", "mesh.rollout_devices=1", "mesh.train_devices=0"],
        async_steps,
    )
    target = sync[-1]
    reached = next((i + 1 for i, r in enumerate(asyn) if r >= target), None)
    if reached is None:
        return (
            f"parity: sync final reward (10-step mean) {target:.3f} at step {steps}; async did not reach it "
            f"by step {async_steps} (its best {max(asyn):.3f}): NOT within +-20%"
        )
    return (
        f"parity: sync final reward (10-step mean) {target:.3f} at step {steps}; async reaches it at step "
        f"{reached} ({reached / steps:.2f}x the steps): within +-20%"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12, help="steps per run (default 12)")
    parser.add_argument("--warmup", type=int, default=4, help="steps excluded from timing (compilation)")
    parser.add_argument("--preset", default="small", help="model preset (default small)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (default 8)")
    parser.add_argument("--generations", type=int, default=4, help="G (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per sequence (default 64)")
    parser.add_argument(
        "--mu",
        type=int,
        default=1,
        help="passes over each step's rollouts: balances training against generation (default 1)",
    )
    parser.add_argument(
        "--mini-batches",
        type=int,
        default=2,
        help="optimizer updates per pass (default 2; with 2 or more the sync "
        "loop computes old-policy log-probs too, as async always does for its IS weights)",
    )
    parser.add_argument(
        "--rollout-micro",
        type=int,
        default=4,
        help="sequences per generation call (default 4; 0 = the whole step in one call)",
    )
    parser.add_argument(
        "--in-flight",
        action="store_true",
        help="async side with in-flight weight updates (async.in_flight_weight_updates=true)",
    )
    parser.add_argument(
        "--parity-steps",
        type=int,
        default=0,
        help="also run the demo task this many steps sync and async and report learning parity (0 = skip)",
    )
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")

    import jax

    print(f"devices: {jax.devices()}; XLA_FLAGS={os.environ['XLA_FLAGS']}; cores: {os.cpu_count()}", flush=True)
    overlap = devices_overlap()
    print(
        f"devices overlap: {overlap:.2f}x (the same work busy on devices 0 and 1 at once vs on device 0 alone; "
        "2.00 = independent devices)",
        flush=True,
    )
    raw = workload(args)
    sync_s, sync_m = timed_run(raw, args.warmup)
    tail = [sync_m[s] for s in sorted(sync_m) if s > args.warmup]
    sync_cores = sync_m[0]["cores_used"]
    rollout = sum(m["timing/rollout_s"] for m in tail) / len(tail)
    train_s = sum(m["timing/train_s"] for m in tail) / len(tail)
    print(
        f"sync:  {sync_s:.3f} s/step (rollout {rollout:.3f} s + train {train_s:.3f} s per step; "
        f"{sync_cores:.2f} cores used)",
        flush=True,
    )
    raw_async = {
        **raw,
        "async": {"enabled": True, "max_trajectory_age_steps": 1, "in_flight_weight_updates": args.in_flight},
        "mesh": {"rollout_devices": [1], "train_devices": [0]},
    }
    async_s, async_m = timed_run(raw_async, args.warmup)
    tail = [async_m[s] for s in sorted(async_m) if s > args.warmup]
    async_cores = async_m[0]["cores_used"]
    wait = sum(m["async/wait_s"] for m in tail) / len(tail)
    age = sum(m["async/trajectory_age_mean"] for m in tail) / len(tail)
    token_age = sum(m["async/token_age_mean"] for m in tail) / len(tail)
    a_rollout = sum(m["timing/rollout_s"] for m in tail) / len(tail)
    a_train = sum(m["timing/train_s"] for m in tail) / len(tail)
    print(
        f"async: {async_s:.3f} s/step (train {a_train:.3f} s and, overlapped, rollout {a_rollout:.3f} s per step; "
        f"trainer waited {wait:.3f} s per step; mean trajectory age {age:.2f}, token age {token_age:.2f}; "
        f"{async_cores:.2f} cores used)",
        flush=True,
    )
    balance = sync_s / max(rollout, train_s)
    cores = (os.cpu_count() or 1) / max(sync_cores, 1e-9)
    print(
        f"ceiling: {min(balance, cores):.2f}x (phase balance allows {balance:.2f}x; {os.cpu_count()} cores over the "
        f"{sync_cores:.2f} the sync run already uses allow {cores:.2f}x; devices overlap {overlap:.2f}x)",
        flush=True,
    )
    if args.parity_steps > 0:
        print(parity(args.parity_steps), flush=True)
    print(
        f"sync_s_per_step={sync_s:.3f} async_s_per_step={async_s:.3f} async_cores_used={async_cores:.2f} "
        f"speedup={sync_s / async_s:.2f}"
    )


if __name__ == "__main__":
    main()

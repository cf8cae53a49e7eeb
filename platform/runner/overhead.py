"""How much reporting to the database costs a training step (for the benchmarks).

`measure_reporting_overhead(run_id)` drives a standalone `DatabaseHooks` the way the trainer does
(samples, then the step's metrics) and forces a flush at every step: the case of steps longer than
the flush interval, where each step pays one flush. Returns per-step costs in seconds and their
ratio to `step_s` (the DESIGN target: <= 2 % of a 0.76 s step).
"""

from __future__ import annotations

import statistics
import time

from runner.db_hooks import DatabaseHooks

METRIC_NAMES = (
    "reward/mean", "reward/std", "accuracy", "loss/policy", "loss/kl", "kl", "clip_fraction", "entropy",
    "response_length/mean", "grad_norm", "learning_rate", "timing/step_s", "timing/rollout_s", "timing/train_s",
    "throughput/tokens_per_s",
)


def measure_reporting_overhead(run_id: int, attempt: int | None = None, steps: int = 100, step_s: float = 0.76,
                               samples_per_step: int = 2, first_step: int = 1) -> dict[str, float]:
    """Report `steps` steps for an existing Run and time the hooks. Writes real rows (MetricPoint,
    RolloutSample) for steps first_step.. on that run; delete the run afterwards if it was a scratch one."""
    from experiments.models import Run

    if attempt is None:
        attempt = Run.objects.values_list("attempt", flat=True).get(pk=run_id)
    hooks = DatabaseHooks(run_id, attempt, background_flush=False)
    sample = {"prompt": "12+7=", "completion": "19", "answer": "19", "reward": 1.0, "advantage": 0.5, "correct": True}
    costs = []
    for step in range(first_step, first_step + steps):
        metrics = {name: 0.001 * step for name in METRIC_NAMES}
        hooks._last_flush = float("-inf")  # as if a whole step_s had passed since the last flush
        t0 = time.perf_counter()
        hooks.on_samples(step, [sample] * samples_per_step)
        hooks.on_step(step, metrics)
        costs.append(time.perf_counter() - t0)
    costs.sort()
    median = statistics.median(costs)
    return {
        "steps": float(steps),
        "median_s": median,
        "p90_s": costs[int(0.9 * (len(costs) - 1))],
        "max_s": costs[-1],
        "overhead_fraction": median / step_s,
    }

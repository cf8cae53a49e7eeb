"""Measure one sweep tick with 40 running sweeps whose next trials wait on the owner's queued-run cap.
Not part of the suite (no test_ prefix); run it by name:

    PLATFORM_DATA_DIR=/tmp/h-bench .venv/bin/python -m pytest -q -s tests/platform/bench_sweep_tick.py

It prints the median wall time of 5 ticks."""

from __future__ import annotations

import statistics
import time

from api_testlib import make_experiment

from sweeps import scheduler, services
from sweeps.models import Sweep

SWEEPS = 40


def test_bench_sweep_tick_with_trials_waiting_on_a_cap(alice, sent_messages, settings):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 2
    settings.PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER = SWEEPS
    experiment = make_experiment(alice)
    space = {"optimizer.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True}}
    for n in range(SWEEPS):
        services.create_sweep(
            experiment,
            {
                "name": f"s{n}",
                "space": space,
                "sampler": "tpe",
                "pruner": "median",
                "metric": "reward/mean",
                "max_trials": 10,
                "max_concurrent_trials": 2,
            },
        )
    assert Sweep.objects.filter(note__contains="waits").count() >= SWEEPS - 2  # each waits on the cap
    times = []
    for _ in range(5):
        started = time.perf_counter()
        scheduler.tick()
        times.append(time.perf_counter() - started)
    print(
        f"\nsweep tick with {SWEEPS} sweeps waiting on a cap: median {statistics.median(times) * 1000:.0f} ms "
        f"(runs {', '.join(f'{t * 1000:.0f}' for t in times)} ms)"
    )

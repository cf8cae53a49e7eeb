#!/usr/bin/env python3
"""Platform benchmarks, in one run, each against its anchor:

  (a) chart serving: one run holding 10^6 metric points (20 metrics x 50,000 steps) in a scratch
      database; GET /api/runs/<id>/chart through Django's test Client (URL routing, token
      authentication, the view, JSON encoding). Reported: requests with the run not yet cached
      in the process (cold: all its points are read), the median of repeated requests (warm),
      and the median of requests each made after one more step of 20 points was written (live:
      what a dashboard polling a training run sees). Anchor: 150 ms; the figure compared is the live median on
      PostgreSQL (the production path), SQLite alongside. For reference it also times the
      on-the-fly alternative it does not use (SQL GROUP BY step / width, MIN/MAX).
  (c) comparing runs: 20 runs x 20 series x 10^5 points (4 x 10^7 points) in the scratch database;
      GET /api/runs/compare?runs=...&max_points=1000 (the compare page's request) through Django's
      test Client with a session, as the page sends it. Reported: the process's first request (cold: every run's points
      read, downsampled and encoded), the median of repeated requests (warm: the per-run cache of encoded answers,
      experiments/run_compare.py, checked by one query of index probes), and the median with one
      more step written to one run before each request (live: that run alone encoded again).
      Cold: a process's first request with the ended runs' snapshots stored (SeriesSnapshot rows, as a
      worker writes them when a run ends); first: the same with no snapshot anywhere (every point read).
      Anchors: 300 ms for the warm request, 3 s for the cold one, on PostgreSQL (SQLite alongside). The data are written
      once by the database itself (generate_series / a recursive CTE, a few minutes) and kept.
  (b) metric-reporting overhead: W1 (configs/w1.yaml) trains a few steps with the platform's
      DatabaseHooks (runner/db_hooks.py, flush_interval_s=0.5) writing to the scratch database;
      the time spent inside its on_step/on_samples calls per step, against the step's own time
      (timing/step_s, as bench/grpo_step.py measures it). Anchor: at most 2 % of a W1 step.

    .venv/bin/python bench/platform_bench.py [--parts chart,hooks,compare] [--backends postgresql,sqlite] [--json]

PostgreSQL: --database-url, else BENCH_DATABASE_URL, else DATABASE_URL, else
postgres://postgres@127.0.0.1:5432/grpo_bench; the database is created and migrated by the script
(a scratch database: it keeps the bench run between invocations so later runs skip the ~20 s
load; --reload forces it). SQLite: a scratch file under var/bench-platform/. Each part runs in its own child process
(fresh Django settings per back end).

Last line: `chart_ms=X ratio_vs_anchor=Y overhead_pct=Z ratio_vs_anchor=W compare_ms=U
ratio_vs_anchor=V compare_cold_ms=C ratio_vs_anchor=R` with Y = X / 150, W = Z / 2, V = U / 300 and
R = C / 3000 (all targets: <= 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import bench_django  # bench/ is first on sys.path for a script run from it

# Not named bench/platform.py: scripts run from bench/ have it first on sys.path, so a
# bench/platform.py would shadow the standard library's `platform` for every one of them.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART_ANCHOR_MS = 150.0
COMPARE_ANCHOR_MS = 300.0
COMPARE_COLD_ANCHOR_MS = 3000.0  # a process's first compare request (the targets: <= 3 s cold, <= 1 s warm)
COMPARE_MAX_POINTS = 1000  # what the compare page asks for (run_compare.DEFAULT_MAX_POINTS)
OVERHEAD_ANCHOR_PCT = 2.0
MICRO_FIRST_STEP = 1_000_000  # the back-to-back reporting calls use steps from here (deleted after)
W1_REFERENCE_STEP_S = 0.76  # bench/grpo_step.py on this machine kind, unloaded (README)
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/grpo_bench"
SQLITE_DIR = os.path.join(ROOT, "var", "bench-platform")


# --- child side: Django under one back end ------------------------------------------------------


def setup_django(backend: str, database_url: str) -> None:
    bench_django.setup_django(backend, database_url, SQLITE_DIR)


def bench_objects(experiment_name: str):
    """The bench user (with an API token), an experiment and a fresh or reused run."""
    from django.contrib.auth import get_user_model

    from api.models import ApiToken
    from experiments.models import Experiment, Run
    from trainers.config import load_config

    user, _ = get_user_model().objects.get_or_create(username="bench")
    token = ApiToken.for_user(user)
    experiment = Experiment.objects.filter(owner=user, name=experiment_name).first()
    if experiment is None:
        experiment = Experiment(owner=user, name=experiment_name)
        experiment.set_config(load_config(os.path.join(ROOT, "configs", "w1.yaml")).to_dict(), user=user)
    run = Run.objects.filter(experiment=experiment).order_by("-pk").first()
    if run is None:
        run = Run.objects.create(
            experiment=experiment,
            config=experiment.config,
            status="running",
            attempt=1,
            max_steps=int(experiment.config["train"]["max_steps"]),
        )
    return user, token, run


def synthetic_series(metrics: int, steps: int):
    """`metrics` noisy training curves of `steps` steps, each with a few one-step spikes."""
    import numpy as np

    rng = np.random.default_rng(0)
    t = np.arange(steps)
    names = [f"bench/metric_{i:02d}" for i in range(metrics)]
    values = []
    for i in range(metrics):
        v = np.exp(-t / (steps / (2 + i))) + 0.05 * rng.normal(size=steps) + 0.01 * i
        v[rng.integers(0, steps, size=5)] += 10.0  # spikes the chart must keep
        values.append(v)
    return names, t, values


def load_points(run, metrics: int, steps: int) -> float:
    """Write metrics x steps points for `run` as fast as the back end allows; returns seconds."""
    from django.db import connection, transaction

    from experiments.models import MetricPoint

    names, t, values = synthetic_series(metrics, steps)
    t0 = time.perf_counter()
    with transaction.atomic():
        MetricPoint.objects.filter(run=run).delete()
        table = MetricPoint._meta.db_table
        if connection.vendor == "postgresql":
            with (
                connection.cursor() as cursor,
                cursor.cursor.copy(f"COPY {table} (run_id, name, step, value, wall_time) FROM STDIN") as copy,
            ):
                for name, v in zip(names, values):
                    copy.write("".join(f"{run.pk}\t{name}\t{s}\t{x!r}\t0\n" for s, x in zip(t.tolist(), v.tolist())))
        else:
            with connection.cursor() as cursor:
                for name, v in zip(names, values):
                    cursor.executemany(
                        f"INSERT INTO {table} (run_id, name, step, value, wall_time) VALUES (%s, %s, %s, %s, 0)",
                        [(run.pk, name, s, x) for s, x in zip(t.tolist(), v.tolist())],
                    )
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}" if connection.vendor == "postgresql" else "ANALYZE")
    return time.perf_counter() - t0


def explain(sql: str, params) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        prefix = "EXPLAIN (ANALYZE, BUFFERS) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
        cursor.execute(prefix + sql, params)
        return "\n".join("  " + " ".join(str(c) for c in row) for row in cursor.fetchall())


def child_chart(args) -> dict:
    setup_django(args.backend, args.database_url)
    from django.db import connection
    from django.test import Client

    from experiments import metric_series
    from experiments.models import MetricPoint

    _, token, run = bench_objects("bench-chart")
    expected = args.metrics * args.steps_per_metric
    stored = MetricPoint.objects.filter(run=run).count()
    load_s = None
    if args.reload or stored != expected:
        load_s = load_points(run, args.metrics, args.steps_per_metric)
        stored = MetricPoint.objects.filter(run=run).count()
    client = Client(headers={"authorization": f"Token {token.key}"})
    url = f"/api/runs/{run.pk}/chart"

    def get() -> tuple[float, dict]:
        t0 = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - t0) * 1e3
        assert response.status_code == 200, response.content[:300]
        return elapsed, response

    metric_series.SERIES_CACHE.clear()
    first_ms, response = get()
    cold = []
    for _ in range(3):  # the cache emptied again: the load itself, without the process's first-request costs
        metric_series.SERIES_CACHE.clear()
        cold.append(get()[0])
    cold_ms = statistics.median(cold)
    body = json.loads(response.content)
    points_served = sum(len(s["steps"]) for s in body["series"].values())
    assert all(len(s["steps"]) <= metric_series.DEFAULT_MAX_POINTS for s in body["series"].values())
    warm = [get()[0] for _ in range(args.requests)]
    # live: one more step of every metric before each request (a polling dashboard)
    last = body["last_step"]
    live = []
    names = sorted(body["series"])
    for i in range(args.requests):
        MetricPoint.objects.bulk_create(
            [MetricPoint(run=run, name=n, step=last + 1 + i, value=float(i)) for n in names]
        )
        live.append(get()[0])
    MetricPoint.objects.filter(run=run, step__gt=last).delete()

    # The alternative measured and not used: bucketing in SQL on every request.
    width = metric_series.bucket_width_steps(0, last, metric_series.DEFAULT_MAX_POINTS)
    groupby_sql = (
        f"SELECT name, step / %s, MIN(value), MAX(value) FROM {MetricPoint._meta.db_table} "
        f"WHERE run_id = %s GROUP BY 1, 2"
    )
    groupby = []
    with connection.cursor() as cursor:
        for _ in range(2):
            t0 = time.perf_counter()
            cursor.execute(groupby_sql, (width, run.pk))
            cursor.fetchall()
            groupby.append((time.perf_counter() - t0) * 1e3)
    result = {
        "backend": args.backend,
        "points_stored": stored,
        "load_s": load_s,
        "series": len(body["series"]),
        "points_served": points_served,
        "response_bytes": len(response.content),
        "first_ms": first_ms,
        "cold_ms": cold_ms,
        "warm_ms": statistics.median(warm),
        "live_ms": statistics.median(live),
        "live_ms_all": [round(x, 1) for x in live],
        "sql_groupby_ms": min(groupby),
    }
    if args.explain:
        table = MetricPoint._meta.db_table
        print(f"[{args.backend}] incremental read (rows added since the last request):", file=sys.stderr)
        print(
            explain(
                f"SELECT id, name, step, value FROM {table} WHERE run_id = %s AND id > %s ORDER BY id", (run.pk, 2**40)
            ),
            file=sys.stderr,
        )
        print(f"[{args.backend}] newest step of one series:", file=sys.stderr)
        print(
            explain(f"SELECT MAX(step) FROM {table} WHERE run_id = %s AND name = %s", (run.pk, names[0])),
            file=sys.stderr,
        )
        print(f"[{args.backend}] the alternative, SQL GROUP BY per request:", file=sys.stderr)
        print(explain(groupby_sql, (width, run.pk)), file=sys.stderr)
    return result


def compare_objects(runs: int, steps: int):
    """The bench user and the first `runs` runs of the experiment "bench-compare" (created where
    missing, with `steps` steps)."""
    from django.contrib.auth import get_user_model

    from experiments.models import Experiment, Run
    from trainers.config import load_config

    user, _ = get_user_model().objects.get_or_create(username="bench")
    experiment = Experiment.objects.filter(owner=user, name="bench-compare").first()
    if experiment is None:
        experiment = Experiment(owner=user, name="bench-compare")
        experiment.set_config(load_config(os.path.join(ROOT, "configs", "w1.yaml")).to_dict(), user=user)
    while Run.objects.filter(experiment=experiment).count() < runs:
        Run.objects.create(
            experiment=experiment, config=experiment.config, status="succeeded", attempt=1, max_steps=steps
        )
    return user, list(Run.objects.filter(experiment=experiment).order_by("pk")[:runs])


COMPARE_SQL = {
    # one run's points: metric m of `metrics`, step s of `steps`; a falling curve, noise, rare spikes,
    # one step every 0.5 s of wall time from a start a day apart per run
    "postgresql": """
        INSERT INTO {table} (run_id, name, step, value, wall_time)
        SELECT %(run)s, 'bench/metric_' || lpad(m::text, 2, '0'), s,
               1.0 / (1.0 + s * (2.0 + m) / %(steps)s) + 0.05 * random() + 0.01 * m
                 + CASE WHEN (s * 7919 + m * 104729) %% 20011 = 0 THEN 10.0 ELSE 0.0 END,
               1.7e9 + %(run)s * 86400.0 + s * 0.5
        FROM generate_series(0, %(metrics)s - 1) AS m, generate_series(0, %(steps)s - 1) AS s""",
    "sqlite": """
        INSERT INTO {table} (run_id, name, step, value, wall_time)
        WITH RECURSIVE ms(m) AS (SELECT 0 UNION ALL SELECT m + 1 FROM ms WHERE m + 1 < %(metrics)s),
                       ss(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM ss WHERE s + 1 < %(steps)s)
        SELECT %(run)s, printf('bench/metric_%%02d', m), s,
               1.0 / (1.0 + s * (2.0 + m) / %(steps)s) + 0.05 * (abs(random()) %% 1000000) / 1e6 + 0.01 * m
                 + CASE WHEN (s * 7919 + m * 104729) %% 20011 = 0 THEN 10.0 ELSE 0.0 END,
               1.7e9 + %(run)s * 86400.0 + s * 0.5
        FROM ms, ss ORDER BY m, s""",
}


def write_compare_points(runs, metrics: int, steps: int, reload: bool) -> float:
    """Make each run hold exactly metrics x steps points (a run is written in one transaction, so
    its last point present means it is complete). Returns seconds spent writing."""
    from django.db import connection, transaction

    from experiments.models import MetricPoint

    table = MetricPoint._meta.db_table
    last_name = f"bench/metric_{metrics - 1:02d}"
    t0 = time.perf_counter()
    wrote = False
    for run in runs:
        complete = (
            MetricPoint.objects.filter(run=run, name=last_name, step=steps - 1).exists()
            and not MetricPoint.objects.filter(run=run, step__gte=steps).exists()
            and not MetricPoint.objects.filter(run=run, name=f"bench/metric_{metrics:02d}").exists()
        )
        if complete and not reload:
            continue
        print(f"    writing {metrics * steps:,} points for run {run.pk}", file=sys.stderr, flush=True)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE run_id = %s", (run.pk,))
            cursor.execute(
                COMPARE_SQL[connection.vendor].format(table=table), {"run": run.pk, "metrics": metrics, "steps": steps}
            )
        wrote = True
    if wrote:
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {table}" if connection.vendor == "postgresql" else "ANALYZE")
    return time.perf_counter() - t0 if wrote else 0.0


def child_compare(args) -> dict:
    setup_django(args.backend, args.database_url)
    from django.test import Client

    from experiments import metric_series, run_compare
    from experiments.models import MetricPoint

    user, runs = compare_objects(args.compare_runs, args.compare_steps)
    write_s = write_compare_points(runs, args.metrics, args.compare_steps, args.reload)
    client = Client()
    client.force_login(user)  # the page's own way in: the browser session
    url = f"/api/runs/compare?runs={','.join(str(r.pk) for r in runs)}&max_points={COMPARE_MAX_POINTS}"

    def get() -> tuple[float, bytes]:
        t0 = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - t0) * 1e3
        assert response.status_code == 200, response.content[:300]
        return elapsed, response.content

    from experiments.models import SeriesSnapshot

    # first: nothing encoded anywhere (no snapshot rows either): every point is read
    SeriesSnapshot.objects.filter(run__in=runs).delete()
    metric_series.SERIES_CACHE.clear()
    run_compare.FRAGMENT_CACHE.clear()
    first_ms, _ = get()
    # cold: a process that has not encoded these runs (a restarted server, another web worker);
    # the ended runs' snapshots are stored (written by the first request, as by a worker at run end)
    metric_series.SERIES_CACHE.clear()
    run_compare.FRAGMENT_CACHE.clear()
    cold_ms, content = get()
    body = json.loads(content)
    series = [s for r in body["runs"] for s in r["series"].values()]
    assert len(body["runs"]) == len(runs) and len(series) == len(runs) * args.metrics, (len(series),)
    assert all(len(s["steps"]) <= COMPARE_MAX_POINTS for s in series)
    misses = run_compare.FRAGMENT_CACHE.misses
    warm = [get()[0] for _ in range(args.requests)]
    warm_encodes = run_compare.FRAGMENT_CACHE.misses - misses
    # live: one more step of every metric of the last run before each request
    live_run, last = runs[-1], body["runs"][-1]["last_step"]
    names = sorted(body["runs"][-1]["series"])
    live = []
    for i in range(args.requests):
        MetricPoint.objects.bulk_create(
            [MetricPoint(run=live_run, name=n, step=last + 1 + i, value=float(i)) for n in names]
        )
        live.append(get()[0])
    MetricPoint.objects.filter(run=live_run, step__gt=last).delete()
    return {
        "backend": args.backend,
        "runs": len(runs),
        "points_stored": len(runs) * args.metrics * args.compare_steps,
        "write_s": write_s,
        "series": len(series),
        "points_served": sum(len(s["steps"]) for s in series),
        "response_bytes": len(content),
        "first_ms": first_ms,
        "cold_ms": cold_ms,
        "warm_ms": statistics.median(warm),
        "warm_encodes": warm_encodes,
        "live_ms": statistics.median(live),
        "live_ms_all": [round(x, 1) for x in live],
    }


def child_hooks(args) -> dict:
    setup_django(args.backend, args.database_url)
    import jax

    from experiments.models import MetricPoint, RolloutSample
    from runner.db_hooks import DatabaseHooks
    from trainers.config import load_config
    from trainers.loop.trainer import GRPOTrainer
    from trainers.step.hooks import Hooks

    _, _, run = bench_objects("bench-hooks")
    run.__class__.objects.filter(pk=run.pk).update(status="running", attempt=1, step=0)
    config = load_config(
        os.path.join(ROOT, "configs", "w1.yaml"), [f"train.max_steps={args.steps}", "checkpoint.every_steps=0"]
    )
    db_hooks = DatabaseHooks(run.pk, 1, flush_interval_s=0.5)
    per_step: dict[int, float] = {}
    step_s: dict[int, float] = {}
    sizes: dict[str, int] = {}
    last: dict[str, object] = {}

    class Timed(Hooks):
        """Times DatabaseHooks' per-step calls (they run inline in the training loop)."""

        def on_start(self, info):
            db_hooks.on_start(info)

        def on_samples(self, step, samples):
            sizes["samples"] = len(samples)
            last["samples"] = samples
            t0 = time.perf_counter()
            db_hooks.on_samples(step, samples)
            per_step[step] = per_step.get(step, 0.0) + time.perf_counter() - t0

        def on_step(self, step, metrics):
            sizes["metrics"] = len(metrics)
            last["metrics"] = metrics
            step_s[step] = metrics["timing/step_s"]
            t0 = time.perf_counter()
            db_hooks.on_step(step, metrics)
            per_step[step] = per_step.get(step, 0.0) + time.perf_counter() - t0

        def on_log(self, message, level="info"):
            db_hooks.on_log(message, level)

        def on_end(self, result):
            db_hooks.on_end(result)

    with tempfile.TemporaryDirectory() as run_dir:
        GRPOTrainer(config, run_dir, Timed()).run()
    # The same calls again, back to back, flushing every time (a quieter figure than the few
    # in-situ steps): the cost of reporting one W1 step, whatever the trainer is doing.
    micro_hooks = DatabaseHooks(run.pk, 1, flush_interval_s=0.0)
    micro = []
    for i in range(args.micro_steps):
        t0 = time.perf_counter()
        micro_hooks.on_samples(MICRO_FIRST_STEP + i, last["samples"])
        micro_hooks.on_step(MICRO_FIRST_STEP + i, last["metrics"])
        micro.append(time.perf_counter() - t0)
    MetricPoint.objects.filter(run=run, step__gte=MICRO_FIRST_STEP).delete()
    RolloutSample.objects.filter(run=run, step__gte=MICRO_FIRST_STEP).delete()

    steady = sorted(step_s)[args.warmup :]
    hook_s = [per_step[s] for s in steady]
    median_step_s = statistics.median(step_s[s] for s in steady)
    mean_hook_s = statistics.fmean(hook_s)
    return {
        "backend": args.backend,
        "device": jax.devices()[0].device_kind,
        "steps_timed": len(steady),
        "metrics_per_step": sizes.get("metrics"),
        "samples_per_step": sizes.get("samples"),
        "flushes": db_hooks.flushes,
        "step_s": median_step_s,
        "hooks_ms_per_step_mean": mean_hook_s * 1e3,
        "hooks_ms_per_step_max": max(hook_s) * 1e3,
        "overhead_pct": 100 * mean_hook_s / median_step_s,
        "micro_ms_per_step_median": statistics.median(micro) * 1e3,
        "micro_steps": len(micro),
    }


# --- parent side -------------------------------------------------------------------------------


def run_child(part: str, backend: str, args) -> dict | None:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        part,
        "--backend",
        backend,
        "--database-url",
        args.database_url,
        "--requests",
        str(args.requests),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--micro-steps",
        str(args.micro_steps),
        "--metrics",
        str(args.metrics),
        "--steps-per-metric",
        str(args.steps_per_metric),
        "--compare-runs",
        str(args.compare_runs),
        "--compare-steps",
        str(args.compare_steps),
    ]
    cmd += ["--reload"] if args.reload else []
    cmd += ["--explain"] if args.explain else []
    print(f"... {part} on {backend}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(f"!!! {part} on {backend} failed (exit {proc.returncode})", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--parts", default="chart,hooks,compare", help="comma list of chart, hooks, compare (default all three)"
    )
    parser.add_argument("--backends", default="postgresql,sqlite", help="comma list of postgresql, sqlite")
    env_url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL")
    parser.add_argument(
        "--database-url",
        default=env_url or DEFAULT_DATABASE_URL,
        help=f"scratch PostgreSQL database (created if missing; default {DEFAULT_DATABASE_URL})",
    )
    parser.add_argument("--metrics", type=int, default=20, help="metrics in the chart run (default 20)")
    parser.add_argument("--steps-per-metric", type=int, default=50_000, help="steps per metric (default 50,000)")
    parser.add_argument("--compare-runs", type=int, default=20, help="runs compared (default 20)")
    parser.add_argument(
        "--compare-steps",
        type=int,
        default=100_000,
        help="steps per metric of each compared run (default 100,000; --metrics metrics each)",
    )
    parser.add_argument("--requests", type=int, default=11, help="timed chart requests per kind (default 11)")
    parser.add_argument("--steps", type=int, default=12, help="W1 steps for the hooks part (default 12)")
    parser.add_argument("--warmup", type=int, default=2, help="W1 steps left out of the timing (default 2)")
    parser.add_argument(
        "--micro-steps", type=int, default=50, help="back-to-back reporting calls timed after the run (default 50)"
    )
    parser.add_argument("--reload", action="store_true", help="rewrite the chart run's points even if present")
    parser.add_argument("--explain", action="store_true", help="print the query plans (EXPLAIN ANALYZE)")
    parser.add_argument("--json", action="store_true", help="print all figures as one JSON line before the last")
    parser.add_argument("--child", choices=["chart", "hooks", "compare"], help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        result = {"chart": child_chart, "hooks": child_hooks, "compare": child_compare}[args.child](args)
        print(json.dumps(result))
        return 0

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    load_before = os.getloadavg()[0]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    figures: dict[str, dict] = {}
    for part in parts:
        for backend in backends:
            result = run_child(part, backend, args)
            if result is not None:
                figures[f"{part}_{backend}"] = result

    print()
    print(
        f"machine: {os.cpu_count()} CPUs, load average {load_before:.2f} before and {os.getloadavg()[0]:.2f} after "
        f"(wall-clock figures; other processes on a small machine inflate them)"
    )
    for backend in backends:
        c = figures.get(f"chart_{backend}")
        if c:
            print(
                f"chart, {backend}: {c['points_stored']:,} points in {c['series']} series -> {c['points_served']:,} "
                f"served ({c['response_bytes'] / 1e6:.2f} MB JSON)"
            )
            print(
                f"  live {c['live_ms']:.1f} ms (median, one new step before each request)   warm {c['warm_ms']:.1f} ms"
                f"   ratio vs {CHART_ANCHOR_MS:.0f} ms: {c['live_ms'] / CHART_ANCHOR_MS:.2f}"
            )
            print(
                f"  cold (the run not cached in this process yet: all its points are read) {c['cold_ms']:.0f} ms; "
                f"the process's very first request {c['first_ms']:.0f} ms"
            )
            print(
                f"  (the alternative, SQL GROUP BY step/width on each request: {c['sql_groupby_ms']:.0f} ms"
                + (f"; points loaded in {c['load_s']:.1f} s" if c["load_s"] else "")
                + ")"
            )
    for backend in backends:
        h = figures.get(f"hooks_{backend}")
        if h:
            print(
                f"metric reporting, {backend}: W1 step {h['step_s']:.3f} s ({h['device']}), DatabaseHooks "
                f"{h['hooks_ms_per_step_mean']:.2f} ms/step (max {h['hooks_ms_per_step_max']:.2f}; "
                f"{h['metrics_per_step']} metrics + {h['samples_per_step']} samples, {h['flushes']} flushes) -> "
                f"{h['overhead_pct']:.2f} % (anchor <= {OVERHEAD_ANCHOR_PCT:.0f} %, ratio "
                f"{h['overhead_pct'] / OVERHEAD_ANCHOR_PCT:.2f})"
            )
            print(
                f"  back to back, {h['micro_steps']} steps each flushed: {h['micro_ms_per_step_median']:.2f} ms/step "
                f"(median) = {100 * h['micro_ms_per_step_median'] / 1e3 / W1_REFERENCE_STEP_S:.2f} % of the README's "
                f"unloaded W1 step of {W1_REFERENCE_STEP_S} s"
            )
    for backend in backends:
        c = figures.get(f"compare_{backend}")
        if c:
            print(
                f"compare, {backend}: {c['runs']} runs, {c['points_stored']:,} points in {c['series']} series -> "
                f"{c['points_served']:,} served ({c['response_bytes'] / 1e6:.2f} MB JSON, max_points "
                f"{COMPARE_MAX_POINTS})"
            )
            print(
                f"  warm {c['warm_ms']:.1f} ms (median; every run's encoded answer cached, one query checks them)"
                f"   ratio vs {COMPARE_ANCHOR_MS:.0f} ms: {c['warm_ms'] / COMPARE_ANCHOR_MS:.2f}"
            )
            print(
                f"  cold {c['cold_ms']:.0f} ms (a process's first request, the ended runs' snapshots stored)"
                f"   ratio vs {COMPARE_COLD_ANCHOR_MS:.0f} ms: {c['cold_ms'] / COMPARE_COLD_ANCHOR_MS:.2f}"
            )
            print(
                f"  live {c['live_ms']:.1f} ms (median, one run gets a step before each request)   first "
                f"{c['first_ms']:.0f} ms (no snapshot anywhere: every point read)"
                + (f"; points written in {c['write_s']:.0f} s" if c["write_s"] else "")
            )
    if args.json:
        print(json.dumps(figures))
    main_backend = "postgresql" if "postgresql" in backends else backends[0]
    chart = figures.get(f"chart_{main_backend}")
    hooks = figures.get(f"hooks_{main_backend}")
    compare = figures.get(f"compare_{main_backend}")
    fields = []
    if chart:
        fields += [f"chart_ms={chart['live_ms']:.1f}", f"ratio_vs_anchor={chart['live_ms'] / CHART_ANCHOR_MS:.2f}"]
    if hooks:
        fields += [
            f"overhead_pct={hooks['overhead_pct']:.2f}",
            f"ratio_vs_anchor={hooks['overhead_pct'] / OVERHEAD_ANCHOR_PCT:.2f}",
        ]
    if compare:
        fields += [
            f"compare_ms={compare['warm_ms']:.1f}",
            f"ratio_vs_anchor={compare['warm_ms'] / COMPARE_ANCHOR_MS:.2f}",
            f"compare_cold_ms={compare['cold_ms']:.0f}",
            f"ratio_vs_anchor={compare['cold_ms'] / COMPARE_COLD_ANCHOR_MS:.2f}",
        ]
    print(" ".join(fields) if fields else "no figures (every part failed)")
    return 0 if len(figures) == len(parts) * len(backends) else 1


if __name__ == "__main__":
    sys.exit(main())

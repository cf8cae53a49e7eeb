"""Several runs' metric series in one answer, for the compare page (GET /api/runs/compare).

- `parse_run_ids(raw)`: "3,1,2" -> [3, 1, 2], the request's `runs` parameter, or ValueError saying
  what is wrong with it (empty, not integers, duplicates, more than MAX_RUNS).
- `run_series_json(series, max_points)`: pure. One run's series, each cut by the run page's
  min/max downsampling (metric_series.downsample_indices) to at most `max_points` points, as JSON
  text: {name: {"steps", "values", "elapsed_s"}} where elapsed_s is each point's wall time in
  seconds since the run's first reported point (so runs started days apart overlay on a wall-time
  axis), to the millisecond.
- `FragmentCache` (one per process, `FRAGMENT_CACHE`): that JSON text per (run, max_points), valid
  while the run's rows are unchanged (`current_fragments`: its largest MetricPoint id and each
  series' newest step, index probes all in one query). A compare request then costs that query
  and a string join.
- `SeriesSnapshot` rows (experiments.models): the same text for settled runs (ended or paused),
  written when one is encoded and by the worker when a run ends (`snapshot_run`), so a process
  that has not encoded a run yet reads one row, checked the same way, instead of every point.

Why a cache of encoded answers. 20 runs x 20 series x 10^5 points (4 x 10^7 points) is ten times
what the series cache holds by default (metric_series.DEFAULT_CACHE_POINTS, 4 x 10^6 points, about
96 MB), and even from memory, downsampling 400 series of 10^5 points and encoding 400 x 1000 points
as JSON take seconds on the development machine's 2 shared cores (bench/platform_bench.py
--parts compare). What a chart shows of a finished run never changes, so its encoded answer is
kept: about 1 MB per run at 1000 points a series. A run whose rows changed (appended: new ids; a
resume's deleted tail: its largest id goes) is read again through metric_series.SERIES_CACHE
(incrementally when it is still cached there) and encoded afresh. Measured there (13 MB of JSON,
PostgreSQL): 22 ms a request with every run cached, 56 ms with one run grown by a step, 17 s for
the process's first request when every point is read (SQLite 34 s); with the runs' snapshots
stored, that first request reads 20 rows instead (bench/platform_bench.py prints both).
"""

from __future__ import annotations

import collections
import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connections

from experiments.metric_series import METRIC_TABLE, SERIES_CACHE, Series, downsample_indices, json_floats

MAX_RUNS = 20  # runs one comparison holds at most
DEFAULT_MAX_POINTS = 1000  # points per series and run by default (the cap is metric_series')
DEFAULT_CACHE_BYTES = 64 << 20  # encoded answers the per-process cache holds at most
ELAPSED_DECIMALS = 3  # elapsed_s to the millisecond


def parse_run_ids(raw: str | None) -> list[int]:
    """The `runs` parameter ("1,2,3": comma-separated run ids) as a list in the given order, or
    ValueError with a message for the caller.

    >>> parse_run_ids("3, 1,2")
    [3, 1, 2]
    """
    parts = [p.strip() for p in (raw or "").split(",")]
    if parts == [""]:
        raise ValueError(f"give 1 to {MAX_RUNS} run ids, comma-separated (runs=1,2,3)")
    bad = [p for p in parts if not (p.isascii() and p.isdigit() and 0 < len(p) <= 18 and int(p) > 0)]
    if bad:
        shown = ", ".join(repr(p) for p in bad[:3])
        raise ValueError(f"run ids are positive integers separated by commas; not {shown}")
    ids = [int(p) for p in parts]
    if len(ids) > MAX_RUNS:
        raise ValueError(f"at most {MAX_RUNS} runs can be compared, got {len(ids)}")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"each run once; repeated: {', '.join(map(str, repeated))}")
    return ids


# --- the pure part ------------------------------------------------------------------------------


def run_series_json(series: dict[str, Series], max_points: int) -> str:
    """`series` (one run's, by metric name) downsampled and encoded (see the module docstring)."""
    starts = [float(np.min(s.wall_times)) for s in series.values() if len(s.wall_times)]
    origin_s = min(starts) if starts else 0.0
    out: dict[str, Any] = {}
    for name in sorted(series):
        s = series[name]
        keep = downsample_indices(s.steps, s.values, max_points)
        elapsed_s = np.round(s.wall_times[keep] - origin_s, ELAPSED_DECIMALS)
        out[name] = {
            "steps": s.steps[keep].tolist(),
            "values": json_floats(s.values[keep]),
            "elapsed_s": json_floats(elapsed_s),
        }
    return json.dumps(out, separators=(",", ":"), allow_nan=False)


def run_header(run) -> dict[str, Any]:
    """What the compare page shows of a run beside its charts (a Run with its experiment)."""
    return {
        "id": run.pk,
        "experiment_id": run.experiment_id,
        "experiment": run.experiment.name,
        "status": run.status,
        "step": run.step,
        "max_steps": run.max_steps,
        "created_at": run.created_at.isoformat(),
        "config": run.config,
    }


# --- the cache of encoded answers ---------------------------------------------------------------


@dataclass(frozen=True)
class Fragment:
    version: int  # the run's largest MetricPoint id when encoded (0: none)
    last_steps: tuple[tuple[str, int], ...]  # (metric, its newest step), by name
    series_json: str  # run_series_json's text

    @property
    def metrics(self) -> list[str]:
        return [name for name, _ in self.last_steps]

    @property
    def last_step(self) -> int:
        return max((step for _, step in self.last_steps), default=-1)


class FragmentCache:
    """Encoded series per (database, run, created_at, max_points), least recently used dropped past
    `max_bytes` in all (default settings.PLATFORM_COMPARE_CACHE_BYTES, else DEFAULT_CACHE_BYTES)."""

    def __init__(self, max_bytes: int | None = None):
        self.max_bytes = max_bytes
        self._fragments: collections.OrderedDict[tuple, Fragment] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.misses = 0  # fragments encoded (tests and the bench read it)

    def clear(self) -> None:
        with self._lock:
            self._fragments.clear()

    @staticmethod
    def _key(run, max_points: int, using: str) -> tuple:
        return (str(connections[using].settings_dict["NAME"]), run.pk, run.created_at, max_points)

    def lookup(self, run, max_points: int, using: str = "default") -> Fragment | None:
        with self._lock:
            return self._fragments.get(self._key(run, max_points, using))

    def keep(self, run, fragment: Fragment, max_points: int, using: str = "default") -> None:
        key = self._key(run, max_points, using)
        with self._lock:
            self._fragments[key] = fragment
            self._fragments.move_to_end(key)
            self._evict()

    def encode(self, run, version: int, max_points: int, using: str = "default") -> Fragment:
        """Read `run`'s series (metric_series.SERIES_CACHE), encode and keep them. `version` must
        have been read before: rows added in between leave the fragment newer than its version
        says, so the next request encodes it again (never the other way round)."""
        series = SERIES_CACHE.get(run, using)
        fragment = Fragment(
            version,
            tuple((name, series[name].last_step) for name in sorted(series)),
            run_series_json(series, max_points),
        )
        with self._lock:
            self.misses += 1
        self.keep(run, fragment, max_points, using)
        from experiments.models import SETTLED_STATUSES

        if run.status in SETTLED_STATUSES:  # no worker changes its series: worth a row
            store_snapshot(run, fragment, max_points, using)
        return fragment

    def _evict(self) -> None:
        limit = self.max_bytes or getattr(settings, "PLATFORM_COMPARE_CACHE_BYTES", DEFAULT_CACHE_BYTES)
        total = sum(len(f.series_json) for f in self._fragments.values())
        while len(self._fragments) > 1 and total > limit:
            _, gone = self._fragments.popitem(last=False)
            total -= len(gone.series_json)


FRAGMENT_CACHE = FragmentCache()


def store_snapshot(run, fragment: Fragment, max_points: int, using: str = "default") -> None:
    """Keep `fragment` in the database for processes that have not encoded `run` yet."""
    from experiments.models import SeriesSnapshot

    SeriesSnapshot.objects.using(using).update_or_create(
        run_id=run.pk,
        max_points=max_points,
        defaults={
            "version": fragment.version,
            "last_steps": [list(p) for p in fragment.last_steps],
            "series_json": fragment.series_json,
        },
    )


def stored_fragments(runs: list, max_points: int, using: str = "default") -> dict[int, Fragment]:
    """The stored snapshots of `runs` at `max_points`, by run id (one query), as fragments; the
    caller checks them like cached ones."""
    from experiments.models import SeriesSnapshot

    rows = (
        SeriesSnapshot.objects.using(using)
        .filter(run_id__in=[r.pk for r in runs], max_points=max_points)
        .values_list("run_id", "version", "last_steps", "series_json")
    )
    return {
        run_id: Fragment(int(version), tuple((str(n), int(st)) for n, st in last_steps), text)
        for run_id, version, last_steps, text in rows
    }


def snapshot_run(run, max_points: int = DEFAULT_MAX_POINTS, using: str = "default") -> None:
    """Encode and store a settled run's series now (a worker calls it when a run ends), so the
    first compare of it in any process reads one row. Nothing when it is already current."""
    current_fragments([run], max_points, using)


def current_fragments(runs: list, max_points: int, using: str = "default") -> list[Fragment]:
    """Each run's fragment, from the cache where the run's rows are as they were when it was
    encoded, else encoded now. Whether they are: one query of index probes, each run's largest
    MetricPoint id (any new row has a larger one) and, for a cached fragment, each of its series'
    newest step (a resume deletes the rows after its checkpoint: a newest step goes back)."""
    cached = [FRAGMENT_CACHE.lookup(run, max_points, using) for run in runs]
    missing = [run for run, fragment in zip(runs, cached) if fragment is None]
    stored = stored_fragments(missing, max_points, using) if missing else {}
    from_store = [fragment is None and run.pk in stored for run, fragment in zip(runs, cached)]
    cached = [fragment or stored.get(run.pk) for run, fragment in zip(runs, cached)]
    wanted = []  # (run id, "" for its largest id, else a series' name)
    for run, fragment in zip(runs, cached):
        wanted += [(run.pk, "")] + [(run.pk, name) for name in (fragment.metrics if fragment else [])]
    found = iter(_probe(wanted, using))
    out = []
    for run, fragment, read in zip(runs, cached, from_store):
        version = int(next(found) or 0)
        newest = [next(found) for _ in (fragment.metrics if fragment else [])]
        if fragment is None or fragment.version != version or newest != [s for _, s in fragment.last_steps]:
            fragment = FRAGMENT_CACHE.encode(run, version, max_points, using)
        elif read:
            FRAGMENT_CACHE.keep(run, fragment, max_points, using)
        out.append(fragment)
    return out


# One correlated probe per row of a VALUES list: planned once, unlike one subquery per probe
# (420 of them for 20 runs of 20 series cost PostgreSQL about 50 ms of planning).
PROBE_SQL = f"""
WITH wanted(i, run_id, name) AS (VALUES {{rows}})
SELECT CASE WHEN wanted.name = ''
            THEN (SELECT MAX(id) FROM {METRIC_TABLE} m WHERE m.run_id = wanted.run_id)
            ELSE (SELECT MAX(step) FROM {METRIC_TABLE} m WHERE m.run_id = wanted.run_id AND m.name = wanted.name)
       END
FROM wanted ORDER BY wanted.i"""


def _probe(wanted: list[tuple[int, str]], using: str) -> list[int | None]:
    """For each (run id, name): the run's largest MetricPoint id when name is "", else the newest
    step of its series `name` (None when it has none)."""
    rows = ", ".join("(%s, %s, %s)" for _ in wanted)
    params = [p for i, (run_id, name) in enumerate(wanted) for p in (i, run_id, name)]
    with connections[using].cursor() as cursor:
        cursor.execute(PROBE_SQL.format(rows=rows), params)
        return [row[0] for row in cursor.fetchall()]


def compare_json(runs: list, max_points: int, using: str = "default") -> str:
    """The answer to GET /api/runs/compare as JSON text: {"max_points": N, "metrics": [names in any
    run], "runs": [run_header + {"last_step", "series": {name: {"steps", "values", "elapsed_s"}}}]}
    with `runs` (Run instances with their experiments) in the order given."""
    parts, metrics = [], set()
    for run, fragment in zip(runs, current_fragments(runs, max_points, using)):
        metrics.update(fragment.metrics)
        header = json.dumps({**run_header(run), "last_step": fragment.last_step}, separators=(",", ":"))
        parts.append(f'{header[:-1]},"series":{fragment.series_json}}}')
    head = json.dumps({"max_points": max_points, "metrics": sorted(metrics)}, separators=(",", ":"))
    return f'{head[:-1]},"runs":[{",".join(parts)}]}}'

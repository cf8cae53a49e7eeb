"""A run's metric series for charts and incremental polling.

Two pieces:

- `downsample_min_max(steps, values, max_points)`: pure numpy. A series longer than `max_points`
  is cut into equal-width step buckets and each bucket keeps its minimum and its maximum point
  (with their steps, in step order), so a one-step spike survives any zoom level. At most
  `max_points` points come out; a series of at most `max_points` points comes out unchanged.

- Non-finite values are kept, never dropped: `storable_value` / `stored_value` convert between a
  float and MetricPoint.value (NULL is NaN there), and in JSON a value is a number or one of the
  strings "NaN", "Infinity", "-Infinity" (`json_value`: the API's one spelling, which JavaScript's
  Number() and Python's float() read back). Downsampling ranks NaN above every number, so a bucket
  that holds one keeps it (a diverged step is never cut from a chart).

- `SeriesCache` (one per process, `SERIES_CACHE`): a run's series as numpy arrays (steps, values
  and each point's wall time), brought up to date on every request by reading only the rows added
  since the last request. A chart is then numpy work on arrays already in memory.

Why not GROUP BY in SQL. Measured on the development machine (2 shared cores, PostgreSQL 15,
SQLite 3.40, one run of 10^6 points = 20 metrics x 50,000 steps; EXPLAIN ANALYZE and timeit, see
bench/platform_bench.py): merely reading the run's 10^6 index entries costs 140-250 ms on
PostgreSQL (index-only scan on a covering index, or a 2-worker parallel scan), and
`GROUP BY name, step / width` with MIN/MAX 280-450 ms (SQLite: about 1 s) before the step of any
minimum or maximum is recovered, which a window or a second aggregate doubles. Anything that
reads every point on every request misses a 150 ms budget there. So a request reads only what is
new: `WHERE run_id = %s AND id > %s` on the (run, id) index, plus one index probe per series for
its newest step (both well under a millisecond), and a whole chart request takes 55-85 ms.

Rows are only ever appended by a running attempt; the one rewrite is a resume (DatabaseHooks
deletes the rows after the checkpoint and writes them again, with new and larger ids), which
the two checks detect: then the run's arrays are loaded afresh. The first request for a run in a
process loads everything: on PostgreSQL one aggregate that packs each series into bytea, decoded
by numpy (about 0.5 s for 10^6 points); elsewhere each series in step order into a numpy record
array (about 1.3 s on SQLite).
"""

from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connections, transaction

DEFAULT_MAX_POINTS = 2000  # points per series a chart returns at most (also the cap)
DEFAULT_CACHE_POINTS = 4_000_000  # points the per-process cache holds at most (about 96 MB)
METRIC_TABLE = "experiments_metricpoint"
LOAD_WORK_MEM = "64MB"  # PostgreSQL: memory for loading one run (12 bytes a point)


# --- the pure part ------------------------------------------------------------------------------


def bucket_width_steps(first_step: int, last_step: int, max_points: int) -> int:
    """Width in steps of the buckets that cut [first_step, last_step] into at most max_points // 2
    buckets (each bucket yields at most 2 points). Buckets start at first_step."""
    buckets = max(1, max_points // 2)
    span_steps = int(last_step) - int(first_step) + 1
    return max(1, -(-span_steps // buckets))


def downsample_min_max(
    steps: np.ndarray, values: np.ndarray, max_points: int = DEFAULT_MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points of the series (steps ascending, unique): unchanged when it is
    that short; else per bucket of `bucket_width_steps` steps its minimum and maximum points, in
    step order (one point when they coincide). Ties go to the earliest step; NaN ranks above every
    number (+inf included), so a bucket holding a NaN keeps its first NaN as its maximum.

    >>> downsample_min_max(np.arange(8), np.array([0., 1, 9, 3, 4, 5, -7, 7]), max_points=4)
    (array([0, 2, 6, 7]), array([ 0.,  9., -7.,  7.]))
    """
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    keep = downsample_indices(steps, values, max_points)
    return steps[keep], values[keep]


def downsample_indices(steps: np.ndarray, values: np.ndarray, max_points: int = DEFAULT_MAX_POINTS) -> np.ndarray:
    """The positions (ascending) of the points `downsample_min_max` keeps, so that other per-point
    arrays (wall times) can be cut the same way.

    >>> downsample_indices(np.arange(8), np.array([0., 1, 9, 3, 4, 5, -7, 7]), max_points=4)
    array([0, 2, 6, 7])
    """
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    n = len(steps)
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    if n <= max_points:
        return np.arange(n)
    nan = np.isnan(values)
    if nan.any():  # NaN ranks above +inf: the highest finite float above +inf's stand-in
        values = np.where(nan, np.inf, np.where(np.isposinf(values), np.finfo(np.float64).max, values))
    if max_points == 1:  # one bucket would give 2 points: keep the maximum only
        return np.array([_first_extreme(values, np.fmax)])
    width = bucket_width_steps(steps[0], steps[-1], max_points)
    bucket = (steps - steps[0]) // width
    is_start = np.empty(n, dtype=bool)
    is_start[0] = True
    np.not_equal(bucket[1:], bucket[:-1], out=is_start[1:])
    starts = np.flatnonzero(is_start)
    segment = np.cumsum(is_start) - 1  # bucket ordinal of each point
    with np.errstate(invalid="ignore"):
        lows = np.fmin.reduceat(values, starts)
        highs = np.fmax.reduceat(values, starts)
    low_at = _first_true_per_segment(values == lows[segment], segment, starts)
    high_at = _first_true_per_segment(values == highs[segment], segment, starts)
    # per bucket the earlier of the two points, then the later one unless it is the same point
    first, second = np.minimum(low_at, high_at), np.maximum(low_at, high_at)
    keep = np.column_stack([first, second]).ravel()
    distinct = np.ones(len(keep), dtype=bool)
    distinct[1::2] = second != first
    return keep[distinct]


def _first_true_per_segment(mask: np.ndarray, segment: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the first True of `mask` in each segment; the segment's start where it has none."""
    out = starts.copy()
    hits = np.flatnonzero(mask)
    if len(hits):
        seg = segment[hits]
        first = np.ones(len(hits), dtype=bool)
        np.not_equal(seg[1:], seg[:-1], out=first[1:])
        out[seg[first]] = hits[first]
    return out


def _first_extreme(values: np.ndarray, reduce) -> int:
    with np.errstate(invalid="ignore"):
        extreme = reduce.reduce(values)
    hits = np.flatnonzero(values == extreme)
    return int(hits[0]) if len(hits) else 0


NONFINITE_JSON = ("NaN", "Infinity", "-Infinity")
"""How JSON answers spell the non-finite values (JSON has no NaN or infinity)."""


def json_value(value: float) -> float | str:
    """A metric value for JSON: a finite float as it is, else "NaN", "Infinity" or "-Infinity".

    >>> [json_value(0.5), json_value(float("nan")), json_value(float("-inf"))]
    [0.5, 'NaN', '-Infinity']
    """
    if math.isfinite(value):
        return value
    return NONFINITE_JSON[0] if math.isnan(value) else NONFINITE_JSON[1] if value > 0 else NONFINITE_JSON[2]


def json_floats(values: np.ndarray) -> list[float | str]:
    """A float array as a JSON-safe list (non-finite values spelled as `json_value` does)."""
    out = values.tolist()
    if not np.isfinite(values).all():
        out = [json_value(v) for v in out]
    return out


def storable_value(value: float) -> float | None:
    """A float as MetricPoint.value stores it: NaN as NULL (SQLite cannot hold NaN), the rest as it is."""
    return None if math.isnan(value) else value


def stored_value(value: float | None) -> float:
    """MetricPoint.value as a float: NULL is NaN (see `storable_value`)."""
    return math.nan if value is None else value


# --- a run's series, kept up to date ----------------------------------------------------------


@dataclass
class Series:
    steps: np.ndarray  # int64, ascending, unique
    values: np.ndarray  # float64
    wall_times: np.ndarray  # float64, Unix seconds each point was reported (MetricPoint.wall_time)

    @property
    def last_step(self) -> int:
        return int(self.steps[-1]) if len(self.steps) else -1

    def after(self, after_step: int) -> Series:
        i = int(np.searchsorted(self.steps, after_step, side="right"))
        return Series(self.steps[i:], self.values[i:], self.wall_times[i:])


@dataclass
class RunSeries:
    """All series of one run as loaded so far; `max_id` = the largest MetricPoint id seen."""

    run_created_at: Any
    max_id: int = 0
    series: dict[str, Series] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def points(self) -> int:
        return sum(len(s.steps) for s in self.series.values())


class SeriesCache:
    """Per-process cache of runs' series: past `max_points` points in all (default
    settings.PLATFORM_CHART_CACHE_POINTS, else DEFAULT_CACHE_POINTS) the least recently used runs
    are dropped. A run of 10^6 points takes 24 MB."""

    def __init__(self, max_points: int | None = None):
        self.max_points = max_points
        self._runs: collections.OrderedDict[tuple[str, int], RunSeries] = collections.OrderedDict()
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()

    def get(self, run, using: str = "default") -> dict[str, Series]:
        """`run`'s series (a Run instance), up to date with the database: a snapshot that later
        refreshes by other threads do not change (Series are replaced, never modified)."""
        key = (str(connections[using].settings_dict["NAME"]), run.pk)
        with self._lock:
            entry = self._runs.get(key)
            if entry is None or entry.run_created_at != run.created_at:
                entry = self._runs[key] = RunSeries(run_created_at=run.created_at)
            self._runs.move_to_end(key)
        with entry.lock:
            if not entry.series or not _refresh(entry, run.pk, using):
                _load(entry, run.pk, using)
            snapshot = dict(entry.series)
        self._evict()
        return snapshot

    def _evict(self) -> None:
        limit = self.max_points or getattr(settings, "PLATFORM_CHART_CACHE_POINTS", DEFAULT_CACHE_POINTS)
        with self._lock:
            total = sum(e.points for e in self._runs.values())
            while len(self._runs) > 1 and total > limit:
                _, gone = self._runs.popitem(last=False)
                total -= gone.points


SERIES_CACHE = SeriesCache()


def _load(entry: RunSeries, run_id: int, using: str) -> None:
    """Read all of the run's points (the first request, or after a rewrite)."""
    connection = connections[using]
    series: dict[str, Series] = {}
    max_id = 0
    connection.ensure_connection()
    if connection.vendor == "postgresql" and _is_psycopg3(connection.connection):
        # One row per series; steps, values and wall times packed as big-endian bytes
        # (int4send/float8send), so 10^6 points cross the wire as 20 MB of bytea instead of 10^6
        # Python tuples. The aggregate holds those bytes: enough work_mem keeps it from spilling.
        import psycopg  # the PostgreSQL back end's driver (psycopg 3)

        # Django's cursors bind client-side, which cannot return binary results: a plain one.
        with transaction.atomic(using), psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(f"SET LOCAL work_mem = '{LOAD_WORK_MEM}'")
            cursor.execute(
                f"SELECT name, string_agg(int4send(step), ''), "
                f"string_agg(float8send(COALESCE(value, 'NaN'::float8)), ''), "
                f"string_agg(float8send(wall_time), ''), max(id) "
                f"FROM {METRIC_TABLE} WHERE run_id = %s GROUP BY name",
                (run_id,),
                binary=True,
            )
            rows = cursor.fetchall()
            for name, step_bytes, value_bytes, wall_bytes, top_id in rows:
                steps = np.frombuffer(step_bytes, dtype=">i4").astype(np.int64)
                values = np.frombuffer(value_bytes, dtype=">f8").astype(np.float64)
                wall_times = np.frombuffer(wall_bytes, dtype=">f8").astype(np.float64)
                series[name] = _sorted(steps, values, wall_times)
                max_id = max(max_id, int(top_id))
    else:
        # The series' names by a loose index scan (one probe per name), then each series in step
        # order straight into a numpy record array.
        with connection.cursor() as cursor:
            cursor.execute(SERIES_NAMES_SQL, (run_id, run_id))
            names = [row[0] for row in cursor.fetchall()]
            for name in names:
                cursor.execute(
                    f"SELECT step, COALESCE(value, 0), wall_time, id, value IS NULL FROM {METRIC_TABLE} "
                    f"WHERE run_id = %s AND name = %s ORDER BY step",
                    (run_id, name),
                )
                rows = np.fromiter(cursor, dtype=_ROW)
                if len(rows):
                    values = rows["value"].copy()
                    values[rows["is_nan"]] = np.nan  # NULL is NaN (stored_value)
                    series[name] = Series(rows["step"].copy(), values, rows["wall_time"].copy())
                    max_id = max(max_id, int(rows["id"].max()))
    entry.series, entry.max_id = series, max_id


_ROW = np.dtype(
    [("step", np.int64), ("value", np.float64), ("wall_time", np.float64), ("id", np.int64), ("is_nan", np.bool_)]
)
# Distinct names of a run's series without reading its points: a recursive "next name" probe.
SERIES_NAMES_SQL = f"""
WITH RECURSIVE names(name) AS (
    SELECT MIN(name) FROM {METRIC_TABLE} WHERE run_id = %s
    UNION ALL
    SELECT (SELECT MIN(name) FROM {METRIC_TABLE} WHERE run_id = %s AND name > names.name)
    FROM names WHERE names.name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL"""


def _is_psycopg3(raw_connection) -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(raw_connection, psycopg.Connection)


def _sorted(steps: np.ndarray, values: np.ndarray, wall_times: np.ndarray) -> Series:
    if len(steps) > 1 and np.any(steps[1:] < steps[:-1]):
        order = np.argsort(steps, kind="stable")
        steps, values, wall_times = steps[order], values[order], wall_times[order]
    return Series(steps, values, wall_times)


def _refresh(entry: RunSeries, run_id: int, using: str) -> bool:
    """Append the rows added since the entry was loaded. False when the run's rows were rewritten
    or deleted (then the caller loads them afresh)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"SELECT id, name, step, value, wall_time FROM {METRIC_TABLE} WHERE run_id = %s AND id > %s ORDER BY id",
            (run_id, entry.max_id),
        )
        new_rows = cursor.fetchall()
        names = list(entry.series)
        # Deleted tails (a resume before its rows are written again): each series' newest step,
        # one index probe per series.
        probes = ", ".join(f"(SELECT MAX(step) FROM {METRIC_TABLE} WHERE run_id = %s AND name = %s)" for _ in names)
        cursor.execute(f"SELECT {probes}", [p for name in names for p in (run_id, name)])
        newest = cursor.fetchone()
    if any(top is None or top < entry.series[name].last_step for name, top in zip(names, newest)):
        return False
    by_name: dict[str, list[tuple[int, float, float]]] = collections.defaultdict(list)
    for row_id, name, step, value, wall_time in new_rows:
        by_name[name].append((step, stored_value(value), wall_time))
        entry.max_id = max(entry.max_id, row_id)
    for name, points in by_name.items():
        points.sort()
        old = entry.series.get(name)
        if old is not None and points[0][0] <= old.last_step:
            return False  # a step written again: rows were replaced
        steps = np.fromiter((p[0] for p in points), dtype=np.int64, count=len(points))
        values = np.fromiter((p[1] for p in points), dtype=np.float64, count=len(points))
        wall_times = np.fromiter((p[2] for p in points), dtype=np.float64, count=len(points))
        entry.series[name] = (
            Series(steps, values, wall_times)
            if old is None
            else Series(
                np.concatenate([old.steps, steps]),
                np.concatenate([old.values, values]),
                np.concatenate([old.wall_times, wall_times]),
            )
        )
    return True


# --- what the API serves ----------------------------------------------------------------------


def chart(run, max_points: int = DEFAULT_MAX_POINTS, using: str = "default") -> dict[str, Any]:
    """{"series": {name: {"steps": [...], "values": [...]}}, "last_step": K}: every series of
    `run`, each downsampled to at most `max_points` points (see downsample_min_max)."""
    series = SERIES_CACHE.get(run, using)
    out: dict[str, Any] = {}
    for name in sorted(series):
        steps, values = downsample_min_max(series[name].steps, series[name].values, max_points)
        out[name] = {"steps": steps.tolist(), "values": json_floats(values)}
    return {"series": out, "last_step": _last_step(series)}


def points_after(run, after_step: int = -1, using: str = "default") -> dict[str, Any]:
    """{"series": {name: [[step, value], ...]}, "last_step": K}: every point after `after_step`
    (K = the newest step of any series, or after_step when there is nothing newer)."""
    series = SERIES_CACHE.get(run, using)
    out: dict[str, list] = {}
    for name in sorted(series):
        s = series[name].after(after_step)
        if len(s.steps):
            out[name] = [list(p) for p in zip(s.steps.tolist(), json_floats(s.values))]
    return {"series": out, "last_step": max(_last_step(series), after_step)}


def _last_step(series: dict[str, Series]) -> int:
    return max((s.last_step for s in series.values()), default=-1)

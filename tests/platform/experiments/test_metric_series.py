"""Min/max downsampling (hand-computed cases) and the per-process series cache kept up to date
with the database (new points appended, a resume's rewrite and deleted tails detected)."""

from __future__ import annotations

import numpy as np
import pytest
from api_testlib import (  # noqa: F401 (fixtures)
    add_points,
    fresh_series_cache,
    make_run,
)

from experiments import metric_series as ms
from experiments.models import MetricPoint


def ds(steps, values, max_points):
    s, v = ms.downsample_min_max(np.asarray(steps), np.asarray(values, dtype=float), max_points)
    return s.tolist(), v.tolist()


# --- the pure function --------------------------------------------------------------------------


def test_short_series_unchanged():
    assert ds([0, 1, 2], [3.0, 1.0, 2.0], 3) == ([0, 1, 2], [3.0, 1.0, 2.0])
    assert ds([], [], 10) == ([], [])


def test_buckets_keep_min_and_max_in_step_order():
    # 8 points, max 4 -> 2 buckets of ceil(8 / 2) = 4 steps: [0..3] and [4..7]
    # bucket 0: 0, 1, 9, 3 -> min 0 @0, max 9 @2; bucket 1: 4, 5, -7, 7 -> min -7 @6, max 7 @7
    assert ds(range(8), [0, 1, 9, 3, 4, 5, -7, 7], 4) == ([0, 2, 6, 7], [0.0, 9.0, -7.0, 7.0])
    # max before min inside a bucket: still in step order
    assert ds(range(8), [5, 9, 1, 3, 2, 2, 2, 2], 4) == ([1, 2, 4], [9.0, 1.0, 2.0])  # bucket 1 flat: one point


def test_bucket_width_from_the_step_span():
    assert ms.bucket_width_steps(0, 9, 4) == 5  # 10 steps into 2 buckets
    assert ms.bucket_width_steps(100, 199, 10) == 20  # 100 steps into 5 buckets
    assert ms.bucket_width_steps(0, 0, 2000) == 1
    # steps 0..9, max 4: buckets [0..4], [5..9]
    assert ds(range(10), [1, 2, 3, 4, 5, 6, 7, 8, 9, 0], 4) == ([0, 4, 8, 9], [1.0, 5.0, 9.0, 0.0])


def test_a_single_spike_survives_heavy_downsampling():
    steps = np.arange(100_000)
    values = np.zeros(100_000)
    values[77_777] = 1e6
    values[12_345] = -5.0
    s, v = ms.downsample_min_max(steps, values, 100)
    assert len(s) <= 100
    assert 77_777 in s.tolist() and v[s.tolist().index(77_777)] == 1e6
    assert 12_345 in s.tolist() and v[s.tolist().index(12_345)] == -5.0
    assert np.all(np.diff(s) > 0)


@pytest.mark.parametrize("n, max_points", [(2001, 2000), (50_000, 2000), (10_000, 3), (7, 2), (5, 1), (1000, 999)])
def test_never_more_than_max_points(n, max_points):
    rng = np.random.default_rng(n)
    steps = np.sort(rng.choice(10 * n, size=n, replace=False))  # sparse, uneven steps
    s, v = ms.downsample_min_max(steps, rng.normal(size=n), max_points)
    assert 1 <= len(s) <= max_points
    assert np.all(np.diff(s) > 0) and set(s.tolist()) <= set(steps.tolist())


def test_global_extremes_always_kept():
    rng = np.random.default_rng(0)
    values = rng.normal(size=5000)
    s, v = ms.downsample_min_max(np.arange(5000), values, 50)
    assert v.max() == values.max() and v.min() == values.min()


def test_nan_ranks_above_every_number_so_a_diverged_step_is_kept():
    nan, inf = float("nan"), float("inf")
    s, v = ds(range(6), [nan, 2, nan, nan, nan, nan], 2)  # one bucket of 6 steps: min 2 @1, "max" NaN @0
    assert s == [0, 1] and np.isnan(v[0]) and v[1] == 2.0
    s, v = ds(range(4), [3, inf, 1, nan], 2)  # NaN above +inf
    assert s == [2, 3] and v[0] == 1.0 and np.isnan(v[1])
    s, v = ds(range(4), [1, inf, 0, 2], 2)  # without a NaN, +inf is the maximum
    assert s == [1, 2] and v == [inf, 0.0]
    s, v = ds(range(4), [nan] * 4, 2)
    assert s == [0] and np.isnan(v[0])
    assert ms.json_floats(np.array([1.0, nan, inf, -inf])) == [1.0, "NaN", "Infinity", "-Infinity"]
    assert [ms.stored_value(ms.storable_value(x)) for x in (1.5, inf, -inf)] == [1.5, inf, -inf]
    assert ms.storable_value(nan) is None and np.isnan(ms.stored_value(None))


# --- the cache against the database -------------------------------------------------------------


def test_chart_follows_appends_rewrites_and_deletions(alice, fresh_series_cache):  # noqa: F811
    run = make_run(alice)
    add_points(run, {"a": [(s, float(s)) for s in range(10)], "b": [(0, 1.0)]})
    out = ms.chart(run, max_points=4)
    assert out["series"]["a"] == {"steps": [0, 4, 5, 9], "values": [0.0, 4.0, 5.0, 9.0]}
    assert out["series"]["b"] == {"steps": [0], "values": [1.0]}
    assert out["last_step"] == 9

    add_points(run, {"a": [(10, -1.0)], "c": [(3, 7.0)]})  # appended: read incrementally
    out = ms.chart(run, max_points=2000)
    assert out["series"]["a"]["steps"][-1] == 10 and out["series"]["c"]["values"] == [7.0]

    # a resume from step 5: the tail is deleted ...
    MetricPoint.objects.filter(run=run, step__gt=5).delete()
    assert ms.chart(run)["series"]["a"]["steps"] == [0, 1, 2, 3, 4, 5]
    # ... and written again with other values (new rows, as DatabaseHooks does)
    add_points(run, {"a": [(s, 100.0 + s) for s in range(6, 12)]})
    assert ms.chart(run)["series"]["a"]["values"][6:] == [106.0, 107.0, 108.0, 109.0, 110.0, 111.0]

    # delete and rewrite past the old end between two reads: the new ids give it away
    MetricPoint.objects.filter(run=run, step__gt=2).delete()
    add_points(run, {"a": [(s, -float(s)) for s in range(3, 20)], "b": [(5, 5.0)], "c": [(3, 8.0)]})
    out = ms.chart(run)
    assert out["series"]["a"]["values"][3:6] == [-3.0, -4.0, -5.0]
    assert out["series"]["c"]["values"] == [8.0]
    assert out["last_step"] == 19


def test_points_after(alice, fresh_series_cache):  # noqa: F811
    run = make_run(alice)
    add_points(run, {"a": [(0, 1.0), (1, 2.0), (2, 3.0)], "b": [(1, 5.0)]})
    assert ms.points_after(run, 0) == {"series": {"a": [[1, 2.0], [2, 3.0]], "b": [[1, 5.0]]}, "last_step": 2}
    assert ms.points_after(run, 2) == {"series": {}, "last_step": 2}
    assert ms.points_after(run, -1)["series"]["a"][0] == [0, 1.0]


def test_cache_is_per_run_and_bounded(alice, fresh_series_cache):  # noqa: F811
    cache = ms.SeriesCache(max_points=25)
    runs = [make_run(alice) for _ in range(3)]
    for i, run in enumerate(runs):
        add_points(run, {"a": [(s, float(i)) for s in range(10)]})
        assert cache.get(run)["a"].values[0] == float(i)
    assert len(cache._runs) == 2  # 30 points > 25: the least recently used run went
    assert cache.get(runs[0])["a"].values[0] == 0.0  # reloaded on demand


def test_load_sorts_points_written_out_of_order(alice, fresh_series_cache):  # noqa: F811
    from django.db import connection

    if connection.vendor == "postgresql":  # the packed-bytea fast path is the one under test there
        assert ms._is_psycopg3(connection.connection)
    run = make_run(alice)
    add_points(run, {"a": [(s, float(s)) for s in (5, 3, 9, 0, 7)], "b": [(2, -1.0), (1, 1.0)]})
    out = ms.chart(run)
    assert out["series"]["a"] == {"steps": [0, 3, 5, 7, 9], "values": [0.0, 3.0, 5.0, 7.0, 9.0]}
    assert out["series"]["b"] == {"steps": [1, 2], "values": [1.0, -1.0]}


def test_downsample_indices_cut_other_arrays_the_same_way():
    steps, values = np.arange(8), np.array([0.0, 1, 9, 3, 4, 5, -7, 7])
    assert ms.downsample_indices(steps, values, 4).tolist() == [0, 2, 6, 7]
    assert ms.downsample_indices(steps, values, 8).tolist() == list(range(8))
    assert ms.downsample_indices(steps, values, 1).tolist() == [2]  # the maximum


def test_cache_keeps_each_points_wall_time(alice, fresh_series_cache):  # noqa: F811
    run = make_run(alice)
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, name="a", step=s, value=0.0, wall_time=100.0 + s) for s in (2, 0, 1)]
    )
    assert ms.SERIES_CACHE.get(run)["a"].wall_times.tolist() == [100.0, 101.0, 102.0]  # sorted with the steps
    MetricPoint.objects.create(run=run, name="a", step=3, value=0.0, wall_time=250.5)  # read incrementally
    assert ms.SERIES_CACHE.get(run)["a"].wall_times.tolist() == [100.0, 101.0, 102.0, 250.5]
    assert ms.SERIES_CACHE.get(run)["a"].after(1).wall_times.tolist() == [102.0, 250.5]

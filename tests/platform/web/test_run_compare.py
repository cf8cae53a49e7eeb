"""Comparing runs: the `runs` parameter, one run's downsampled series with elapsed wall times
(hand-computed), the cache of encoded answers following appends and a resume's rewrite, and
GET /api/runs/compare (shape, visibility, bad input)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from api_testlib import (  # noqa: F401 (fixtures)
    fresh_caches,
    make_experiment,
    make_run,
    token_client,
)

from experiments import run_compare as rc
from experiments.metric_series import Series
from experiments.models import MetricPoint

T0 = 1_700_000_000.0  # a Unix time: wall times in the tests count from here


def add_timed_points(run, series: dict[str, list[tuple[int, float, float]]]) -> None:
    """(step, value, seconds after T0) per point."""
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, name=name, step=step, value=value, wall_time=T0 + after_s)
            for name, points in series.items()
            for step, value, after_s in points
        ]
    )


# --- the runs parameter ---------------------------------------------------------------------------


def test_parse_run_ids_keeps_the_order():
    assert rc.parse_run_ids("3,1,2") == [3, 1, 2]
    assert rc.parse_run_ids(" 7 ") == [7]
    assert rc.parse_run_ids(",".join(str(i) for i in range(1, 21))) == list(range(1, 21))


@pytest.mark.parametrize(
    "raw, says",
    [
        (None, "give 1 to 20 run ids"),
        ("", "give 1 to 20 run ids"),
        ("1,,2", "not ''"),
        ("1,x", "not 'x'"),
        ("1.5", "not '1.5'"),
        ("-3", "not '-3'"),
        ("0", "not '0'"),
        ("1,2,1", "repeated: 1"),
        (",".join(str(i) for i in range(1, 22)), "at most 20 runs"),
        ("1" * 19, "not"),
        ("١", "not"),
    ],
)
def test_parse_run_ids_refuses(raw, says):
    with pytest.raises(ValueError, match=says):
        rc.parse_run_ids(raw)


# --- one run's series, encoded -------------------------------------------------------------------


def test_run_series_json_downsamples_and_counts_wall_time_from_the_first_point():
    series = {
        # 8 points cut to 4 (buckets [0..3], [4..7]): min 0 @0, max 9 @2, min -7 @6, max 7 @7
        "a": Series(np.arange(8), np.array([0.0, 1, 9, 3, 4, 5, -7, 7]), T0 + 10 + np.arange(8) * 0.5),
        # starts first: the run's origin is its first point (T0 + 2)
        "b": Series(np.array([0, 5]), np.array([np.nan, 2.5e-5]), np.array([T0 + 2, T0 + 3.0004])),
    }
    out = json.loads(rc.run_series_json(series, max_points=4))
    assert out["a"] == {"steps": [0, 2, 6, 7], "values": [0.0, 9.0, -7.0, 7.0], "elapsed_s": [8.0, 9.0, 11.0, 11.5]}
    assert out["b"] == {"steps": [0, 5], "values": ["NaN", 2.5e-5], "elapsed_s": [0.0, 1.0]}
    assert json.loads(rc.run_series_json({}, 10)) == {}


# --- the cache of encoded answers against the database -------------------------------------------


def test_compare_follows_appends_and_a_resume(alice, fresh_caches):
    run = make_run(alice)
    other = make_run(alice)
    add_timed_points(run, {"a": [(s, float(s), s) for s in range(10)]})
    body = json.loads(rc.compare_json([run, other], max_points=4))
    assert [r["id"] for r in body["runs"]] == [run.pk, other.pk] and body["max_points"] == 4
    assert body["metrics"] == ["a"]
    assert body["runs"][0]["series"]["a"] == {
        "steps": [0, 4, 5, 9],
        "values": [0.0, 4.0, 5.0, 9.0],
        "elapsed_s": [0.0, 4.0, 5.0, 9.0],
    }
    assert body["runs"][0]["last_step"] == 9 and body["runs"][1] == {**body["runs"][1], "series": {}, "last_step": -1}
    assert body["runs"][0]["config"] == run.config and body["runs"][0]["experiment"] == run.experiment.name

    misses = rc.FRAGMENT_CACHE.misses
    assert json.loads(rc.compare_json([run, other], max_points=4)) == body  # unchanged: served from the cache
    assert rc.FRAGMENT_CACHE.misses == misses

    add_timed_points(run, {"a": [(10, -1.0, 10)], "b": [(3, 7.0, 3)]})  # appended: encoded again
    body = json.loads(rc.compare_json([run, other], max_points=2000))
    assert body["metrics"] == ["a", "b"] and body["runs"][0]["series"]["a"]["values"][-1] == -1.0

    MetricPoint.objects.filter(run=run, step__gt=5).delete()  # a resume from step 5 ...
    assert json.loads(rc.compare_json([run], 2000))["runs"][0]["series"]["a"]["steps"] == [0, 1, 2, 3, 4, 5]
    add_timed_points(run, {"a": [(s, 100.0 + s, s) for s in range(6, 8)]})  # ... and the tail again
    assert json.loads(rc.compare_json([run], 2000))["runs"][0]["series"]["a"]["values"][6:] == [106.0, 107.0]


def test_fragment_cache_is_bounded(alice, fresh_caches):
    cache = rc.FragmentCache(max_bytes=1)  # every fragment is bigger: only the newest stays
    runs = [make_run(alice) for _ in range(2)]
    for run in runs:
        add_timed_points(run, {"a": [(0, 1.0, 0)]})
        cache.encode(run, 1, 10)
    assert cache.lookup(runs[0], 10) is None and cache.lookup(runs[1], 10).last_steps == (("a", 0),)
    assert cache.lookup(runs[1], 20) is None  # another max_points: another fragment


def test_a_settled_run_is_read_from_its_snapshot_in_a_process_that_never_encoded_it(alice, fresh_caches):
    """Another process (here: cleared caches) answers from the stored row, without reading the
    points (the series cache stays empty), and a row added afterwards still makes it encode anew."""
    from experiments.metric_series import SERIES_CACHE
    from experiments.models import SeriesSnapshot

    live, ended = make_run(alice, status="running"), make_run(alice, status="succeeded")
    for run in (live, ended):
        add_timed_points(run, {"a": [(s, float(s), s) for s in range(10)]})
    first = rc.compare_json([live, ended], max_points=4)
    assert list(SeriesSnapshot.objects.values_list("run_id", "max_points")) == [(ended.pk, 4)]  # not the live run

    rc.FRAGMENT_CACHE.clear()
    SERIES_CACHE.clear()
    misses = rc.FRAGMENT_CACHE.misses
    assert rc.compare_json([ended], max_points=4) == rc.compare_json([ended], max_points=4)
    assert json.loads(rc.compare_json([ended], max_points=4))["runs"][0] == json.loads(first)["runs"][1]
    assert rc.FRAGMENT_CACHE.misses == misses and len(SERIES_CACHE._runs) == 0  # no point was read

    rc.FRAGMENT_CACHE.clear()
    add_timed_points(ended, {"a": [(10, -1.0, 10)]})  # the stored row is stale now: encoded again
    assert json.loads(rc.compare_json([ended], max_points=4))["runs"][0]["series"]["a"]["values"][-1] == -1.0
    assert rc.FRAGMENT_CACHE.misses == misses + 1
    assert SeriesSnapshot.objects.get(run=ended).last_steps == [["a", 10]]


def test_snapshot_run_stores_an_ended_runs_series(alice, fresh_caches):
    from experiments.models import SeriesSnapshot

    run = make_run(alice, status="succeeded")
    add_timed_points(run, {"a": [(0, 1.0, 0), (1, 2.0, 1)]})
    rc.snapshot_run(run)
    row = SeriesSnapshot.objects.get(run=run)
    assert row.max_points == rc.DEFAULT_MAX_POINTS and row.last_steps == [["a", 1]]
    assert json.loads(row.series_json) == {"a": {"steps": [0, 1], "values": [1.0, 2.0], "elapsed_s": [0.0, 1.0]}}


# --- the endpoint ---------------------------------------------------------------------------------


def test_api_compare_answers_every_run_in_order(alice, bob, fresh_caches):
    mine = make_run(alice, status="succeeded", experiment=make_experiment(alice, name="lr 1e-3"))
    theirs = make_run(bob, status="succeeded")  # bob's, but shared with nobody
    second = make_run(alice, status="succeeded", experiment=make_experiment(alice, name="lr 3e-4"))
    add_timed_points(mine, {"learning_rate": [(s, 1e-3 * (1 + s), s) for s in range(3)]})
    add_timed_points(second, {"learning_rate": [(s, 3e-4, 2 * s) for s in range(3)], "reward/mean": [(1, 0.5, 2)]})
    client = token_client(alice)
    response = client.get(f"/api/runs/compare?runs={second.pk},{mine.pk}&max_points=2")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    body = response.json()
    assert [r["id"] for r in body["runs"]] == [second.pk, mine.pk]
    assert [r["experiment"] for r in body["runs"]] == ["lr 3e-4", "lr 1e-3"]
    assert body["metrics"] == ["learning_rate", "reward/mean"] and body["max_points"] == 2
    lr = body["runs"][0]["series"]["learning_rate"]
    assert len(lr["steps"]) <= 2 and set(lr["values"]) == {3e-4}
    # one bucket of 3 steps: its minimum (step 0) and maximum (step 2), seconds after the first point
    assert body["runs"][1]["series"]["learning_rate"] == {
        "steps": [0, 2],
        "values": [1e-3, 3e-3],
        "elapsed_s": [0.0, 2.0],
    }
    # someone else's run: 404, like one that does not exist
    response = client.get(f"/api/runs/compare?runs={mine.pk},{theirs.pk}")
    assert response.status_code == 404 and str(theirs.pk) in response.json()["error"]
    assert client.get(f"/api/runs/compare?runs={mine.pk},999999").status_code == 404
    assert token_client(bob).get(f"/api/runs/compare?runs={theirs.pk}").status_code == 200
    # max_points above the cap is served at the cap (2000), like the run chart
    assert client.get(f"/api/runs/compare/?runs={mine.pk}&max_points=99999").json()["max_points"] == 2000


@pytest.mark.parametrize(
    "query, field",
    [
        ("", "runs"),
        ("runs=", "runs"),
        ("runs=1,1", "runs"),
        ("runs=a", "runs"),
        ("runs=1;2", "runs"),
        ("runs=" + ",".join(str(i) for i in range(1, 22)), "runs"),
        ("runs=99999999999999999999", "runs"),
    ],
)
def test_api_compare_refuses_bad_runs(alice, query, field):
    response = token_client(alice).get(f"/api/runs/compare?{query}")
    assert response.status_code == 400 and field in response.json()["errors"]


@pytest.mark.parametrize("max_points", ["0", "-5", "x", "1e3"])
def test_api_compare_refuses_bad_max_points(alice, max_points):
    run = make_run(alice)
    response = token_client(alice).get(f"/api/runs/compare?runs={run.pk}&max_points={max_points}")
    assert response.status_code == 400 and "max_points" in response.json()["error"]


def test_api_compare_needs_a_login(client):
    assert client.get("/api/runs/compare?runs=1").status_code == 401

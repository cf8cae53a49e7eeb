"""experiments.run_filters: the runs table's parameters parsed (pure), then applied to hand-made runs
and metric points (filters, config values, sorts, each run's latest metric value) through the
queryset and through GET /api/runs."""

from __future__ import annotations

import pytest
from api_testlib import add_points, make_experiment, make_run, token_client

from experiments import run_filters
from experiments.models import Run, Tag
from experiments.run_filters import ConfigFilter, FilterError, RunQuery

# --- parse (no database) ------------------------------------------------------------------------


def test_parse_reads_every_parameter():
    query = run_filters.parse(
        {
            "status": ["running, queued", "running"],
            "experiment": ["12"],
            "owner": ["alice"],
            "tag": ["baseline", "sweep-3,baseline"],
            "config": ["grpo.beta:0.04", "rewards.0.name:exact_match"],
            "metrics": ["reward/mean,eval/pass@k", "kl"],
            "sort": ["-metric:kl"],
            "page": ["2"],
        }
    )
    assert query == RunQuery(
        statuses=("running", "queued"),
        experiment_id=12,
        owner="alice",
        tags=("baseline", "sweep-3"),
        config=(ConfigFilter(("grpo", "beta"), 0.04), ConfigFilter(("rewards", "0", "name"), "exact_match")),
        metrics=("reward/mean", "eval/pass@k", "kl"),
        sort="-metric:kl",
    )
    assert query.sort_metric == "kl" and query.descending and query.metric_columns == query.metrics


def test_parse_defaults_and_plain_strings():
    assert run_filters.parse({}) == RunQuery(sort="-created")
    query = run_filters.parse({"sort": "metric:loss/kl", "metrics": "kl", "config": 'data.task:"7"'})
    assert query.metric_columns == ("kl", "loss/kl") and not query.descending
    assert query.config == (ConfigFilter(("data", "task"), "7"),)  # quoted: the text "7", not the number


@pytest.mark.parametrize(
    "params, parameter, words",
    [
        ({"status": "sleeping"}, "status", "unknown status sleeping"),
        ({"experiment": "x"}, "experiment", "experiment's id"),
        ({"experiment": "1" * 19}, "experiment", "experiment's id"),
        ({"owner": "a b"}, "owner", "not a username"),
        ({"tag": "no spaces!"}, "tag", "not a tag name"),
        ({"config": "grpo.beta"}, "config", "PATH:VALUE"),
        ({"config": "grpo..beta:1"}, "config", "dotted config path"),
        ({"config": "grpo.beta:[1]"}, "config", "not an object or a list"),
        ({"config": "grpo.beta:1e400"}, "config", "a number between"),
        ({"metrics": "x" * 65}, "metrics", "not a metric name"),
        ({"metrics": ",".join(f"m{i}" for i in range(11))}, "metrics", "at most 10"),
        ({"sort": "size"}, "sort", "unknown sort 'size'"),
        ({"sort": "-metric:"}, "sort", "metric:NAME"),
    ],
)
def test_parse_refuses_bad_values_naming_the_parameter(params, parameter, words):
    with pytest.raises(FilterError) as caught:
        run_filters.parse(params)
    assert caught.value.parameter == parameter and words in caught.value.message


def test_params_round_trip_and_header_toggle():
    query = run_filters.parse(
        {
            "status": "running",
            "tag": "a,b",
            "config": ["grpo.beta:0.04", "data.task:gsm8k"],
            "metrics": "kl",
            "sort": "step",
        }
    )
    assert query.params() == [
        ("status", "running"),
        ("tag", "a,b"),
        ("config", "grpo.beta:0.04"),
        ("config", "data.task:gsm8k"),
        ("metrics", "kl"),
        ("sort", "step"),
    ]
    assert run_filters.parse(dict((k, [v for kk, v in query.params() if kk == k]) for k, _ in query.params())) == query
    assert query.params(sort="-created") == query.params()[:-1]  # the default sort is left out
    assert query.toggled_sort("step") == "-step" and query.toggled_sort("id") == "id"
    assert query.toggled_sort("created") == "-created" and query.toggled_sort("metric:kl") == "-metric:kl"
    assert run_filters.parse({"sort": "-step"}).toggled_sort("step") == "step"


# --- applied to the database --------------------------------------------------------------------


@pytest.fixture
def table(alice, bob):
    """Four runs of alice's and bob's with tags, configs and metric points, by hand."""
    alpha = make_experiment(alice, name="alpha")
    beta_exp = make_experiment(alice, name="beta", grpo__beta=0.04)
    zed = make_experiment(bob, name="zed")
    runs = {
        "a1": make_run(alice, experiment=alpha, status="running", step=5),
        "a2": make_run(alice, experiment=alpha, status="succeeded", step=9),
        "b1": make_run(alice, experiment=beta_exp, status="running", step=2),
        "z1": make_run(bob, experiment=zed, status="failed", step=7),
    }
    base, sweep = Tag.objects.create(name="baseline"), Tag.objects.create(name="sweep:3")
    runs["a1"].tags.add(base, sweep)
    runs["a2"].tags.add(base)
    runs["z1"].tags.add(base, sweep)
    add_points(runs["a1"], {"reward/mean": [(1, 0.1), (3, 0.5), (2, 0.9)], "kl": [(3, 0.01)]})
    add_points(runs["a2"], {"reward/mean": [(9, 0.7), (10, -0.2)]})
    add_points(runs["z1"], {"reward/mean": [(4, 0.3)], "kl": [(1, 0.5), (4, 0.2)]})
    return runs


def _ids(table, query: RunQuery) -> list[str]:
    names = {run.pk: name for name, run in table.items()}
    return [names[r.pk] for r in run_filters.apply(Run.objects.all(), query)]


def test_filters_select_the_hand_picked_runs(table, bob):
    q = run_filters.parse
    assert _ids(table, q({"status": "running", "sort": "id"})) == ["a1", "b1"]
    assert _ids(table, q({"experiment": str(table["a1"].experiment_id), "sort": "id"})) == ["a1", "a2"]
    assert _ids(table, q({"owner": "bob"})) == ["z1"]
    assert _ids(table, q({"owner": "nobody"})) == []
    assert _ids(table, q({"tag": "baseline", "sort": "id"})) == ["a1", "a2", "z1"]
    assert _ids(table, q({"tag": "baseline,sweep:3", "sort": "id"})) == ["a1", "z1"]  # every tag
    assert _ids(table, q({"tag": "baseline", "owner": "alice", "status": "running"})) == ["a1"]
    # config values compare as JSON: 0.04 == 0.040; the default beta of the others is 0.0 == 0
    assert _ids(table, q({"config": "grpo.beta:0.040"})) == ["b1"]
    assert _ids(table, q({"config": "grpo.beta:0", "sort": "id"})) == ["a1", "a2", "z1"]
    assert _ids(table, q({"config": ["grpo.beta:0", "data.task:arithmetic"], "sort": "id"})) == ["a1", "a2", "z1"]
    assert _ids(table, q({"config": "data.task:reverse"})) == []
    assert _ids(table, q({"config": 'grpo.beta:"0.04"'})) == []  # the text "0.04" is not the number
    assert _ids(table, q({"config": "no.such.field:1"})) == []


def test_sorts_by_every_key_with_ties_by_id(table):
    q = lambda sort: run_filters.parse({"sort": sort})  # noqa: E731
    assert _ids(table, q("id")) == ["a1", "a2", "b1", "z1"]
    assert _ids(table, q("-id")) == ["z1", "b1", "a2", "a1"]
    assert _ids(table, q("-created")) == ["z1", "b1", "a2", "a1"]
    assert _ids(table, q("step")) == ["b1", "a1", "z1", "a2"]
    assert _ids(table, q("status")) == ["z1", "a1", "b1", "a2"]  # failed, running x2 (by id), succeeded
    assert _ids(table, q("-experiment")) == ["z1", "b1", "a2", "a1"]  # zed, beta, alpha (ties by id, descending)
    assert _ids(table, q("owner")) == ["a1", "a2", "b1", "z1"]


def test_latest_metric_values_and_metric_sort(table, django_assert_num_queries):
    query = run_filters.parse({"metrics": "reward/mean,kl,missing", "sort": "-metric:reward/mean"})
    with django_assert_num_queries(1):  # one query for every run and every metric column
        rows = list(run_filters.apply(Run.objects.all(), query))
    values = {r.pk: run_filters.latest_values(r, query) for r in rows}
    # the value at the highest step, whatever order the points were written in
    assert values[table["a1"].pk] == {"reward/mean": 0.5, "kl": 0.01, "missing": None}
    assert values[table["a2"].pk] == {"reward/mean": -0.2, "kl": None, "missing": None}
    assert values[table["z1"].pk] == {"reward/mean": 0.3, "kl": 0.2, "missing": None}
    assert values[table["b1"].pk] == {"reward/mean": None, "kl": None, "missing": None}
    # by latest reward, descending; a run without the metric comes last either way
    assert _ids(table, query) == ["a1", "z1", "a2", "b1"]
    assert _ids(table, run_filters.parse({"sort": "metric:reward/mean"})) == ["a2", "z1", "a1", "b1"]
    assert _ids(table, run_filters.parse({"sort": "metric:kl"})) == ["a1", "z1", "a2", "b1"]


# --- through the API ----------------------------------------------------------------------------


def test_api_lists_with_filters_sort_and_metric_columns(table, alice, bob):
    client = token_client(alice)
    body = client.get("/api/runs", {"metrics": "reward/mean,kl", "sort": "-metric:reward/mean"}).json()
    assert [r["id"] for r in body["runs"]] == [table[n].pk for n in ("a1", "a2", "b1")]  # bob's run stays hidden
    assert body["count"] == 3 and body["metrics"] == ["reward/mean", "kl"] and body["sort"] == "-metric:reward/mean"
    first = body["runs"][0]
    assert first["metrics"] == {"reward/mean": 0.5, "kl": 0.01}
    assert first["tags"] == ["baseline", "sweep:3"] and first["owner"] == "alice" and first["notes"] == ""
    assert [r["id"] for r in client.get("/api/runs?tag=sweep:3").json()["runs"]] == [table["a1"].pk]
    assert [r["id"] for r in client.get("/api/runs?config=grpo.beta:0.04").json()["runs"]] == [table["b1"].pk]
    assert token_client(bob).get("/api/runs?owner=alice").json()["runs"] == []
    refused = client.get("/api/runs?sort=size")
    assert refused.status_code == 400 and "sort" in refused.json()["errors"]
    refused = client.get("/api/runs?config=grpo.beta")
    assert refused.status_code == 400 and "PATH:VALUE" in refused.json()["errors"]["config"]


def test_api_list_queries_stay_constant(alice, django_assert_max_num_queries):
    experiment = make_experiment(alice)
    for step in range(6):
        run = make_run(alice, experiment=experiment)
        run.tags.add(Tag.objects.get_or_create(name=f"t{step}")[0])
        add_points(run, {"reward/mean": [(1, 0.1), (2, 0.2)], "kl": [(2, 0.3)]})
    client = token_client(alice)
    # the token (and its last use), the permissions (2), the rows with their metric columns, the tags, the count
    with django_assert_max_num_queries(7):
        body = client.get("/api/runs?metrics=reward/mean,kl,accuracy&sort=-metric:kl").json()
    assert len(body["runs"]) == 6 and all(
        r["metrics"] == {"reward/mean": 0.2, "kl": 0.3, "accuracy": None} for r in body["runs"]
    )


@pytest.mark.parametrize(
    "params",
    [
        {"experiment": "\u00b2"},
        {"experiment": "99999999999999999999"},
        {"owner": "a\x00b"},
        {"tag": "t\x00"},
        {"metrics": "kl\x00"},
        {"sort": "-metric:kl\x00"},
        {"config": "data.task:a\x00b"},
        {"config": 'data.task:"\\ud800"'},
        {"config": "grpo.beta:99999999999999999999999"},
        {"config": "a." * 20 + "b:1"},
        {"sort": "x" * 3000},
    ],
)
def test_hostile_values_are_400s_on_the_api_and_the_page(alice, client, params):
    response = token_client(alice).get("/api/runs", params)
    assert response.status_code == 400 and len(response.json()["errors"]) == 1, response.content
    client.force_login(alice)
    assert client.get("/runs/", params).status_code == 400


def test_odd_but_valid_values_answer_200(alice, client):
    make_run(alice)
    for params in (
        {"config": "data.task:"},
        {"config": "rewards.0.name:exact_match"},
        {"config": "seed:null"},
        {"config": "async.enabled:false"},
        {"metrics": "eval/pass@k", "sort": "metric:eval/pass@k"},
        {"experiment": "999999999999999999"},
        {"tag": "a:b/c.d_e-f"},
        {"page": "999"},
    ):
        assert token_client(alice).get("/api/runs", params).status_code == 200, params
        client.force_login(alice)
        assert client.get("/runs/", params).status_code == 200, params
    # a config filter on a boolean and on a list item find the runs on both databases
    rewarded = make_run(alice, experiment=make_experiment(alice, rewards=[{"name": "prefix_match", "weight": 1.0}]))
    assert len(token_client(alice).get("/api/runs", {"config": "async.enabled:false"}).json()["runs"]) == 2
    found = token_client(alice).get("/api/runs", {"config": "rewards.0.name:prefix_match"}).json()["runs"]
    assert [r["id"] for r in found] == [rewarded.pk]
    assert token_client(alice).get("/api/runs", {"config": "rewards.0.name:exact_match"}).json()["runs"] == []

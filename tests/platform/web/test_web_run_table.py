"""The runs page (/runs/): filters, sortable headers, metric columns, tags, compare checkboxes and
pagination that keeps the query; a parameter it cannot use is a 400 naming it."""

from __future__ import annotations

import re

import pytest
from api_testlib import add_points
from django.urls import reverse
from platform_testlib import tiny_config
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    make_experiment,
    make_run,
)

from experiments.models import Tag

pytestmark = pytest.mark.django_db


def _row_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-run-id="(\d+)"', html)]


@pytest.fixture
def runs(alice, bob):
    alpha = make_experiment(alice, "alpha")
    beta = make_experiment(alice, "beta", config=tiny_config(grpo__beta=0.04))
    first = make_run(alpha, status="running", step=3)
    second = make_run(alpha, status="succeeded", step=6)
    third = make_run(beta, status="running", step=1)
    theirs = make_run(make_experiment(bob, "bob-exp"), status="running")
    first.tags.add(Tag.objects.create(name="baseline"))
    theirs.tags.add(Tag.objects.create(name="bobs-secret"))
    add_points(first, {"reward/mean": [(1, 0.1), (3, 0.75)]})
    add_points(second, {"reward/mean": [(6, 0.5)], "kl": [(6, 0.02)]})
    return first, second, third, theirs


def test_page_renders_with_filters_metric_columns_and_sort(alice_client, runs):
    first, second, third, theirs = runs
    html = alice_client.get(
        reverse("run-list"), {"metrics": "reward/mean,kl", "sort": "-metric:reward/mean"}
    ).content.decode()
    assert _row_ids(html) == [first.pk, second.pk, third.pk]  # 0.75, 0.5, none; bob's run is not listed
    # the metric columns' headers sort by them; the current one shows its direction and flips it
    assert (
        '<a href="?metrics=reward%2Fmean%2Ckl&amp;sort=metric%3Areward%2Fmean">reward/mean</a> <span class="sort-mark">'
        in html
    )
    assert '<a href="?metrics=reward%2Fmean%2Ckl&amp;sort=-metric%3Akl">kl</a></th>' in html
    assert '<a href="?metrics=reward%2Fmean%2Ckl&amp;sort=step">Progress</a>' in html
    cells = re.findall(r'<td data-col="metric" data-metric="([^"]+)">([^<]*)</td>', html)
    assert cells == [
        ("reward/mean", "0.75"),
        ("kl", "-"),
        ("reward/mean", "0.5"),
        ("kl", "0.02"),
        ("reward/mean", "-"),
        ("kl", "-"),
    ]
    # the metric picker shows the chosen columns ticked; every run has a compare checkbox
    assert re.search(r'<input type="checkbox" name="metrics" value="kl" checked>', html)
    assert not re.search(r'<input type="checkbox" name="metrics" value="entropy" checked>', html)
    assert html.count('<input type="checkbox" name="run" value=') == 3
    assert 'id="compare-selected" data-compare-url="/runs/compare/"' in html
    assert 'data-metrics="reward/mean,kl"' in html and "/static/web/run_list.js" in html
    # tags: shown and linked; the tag list offers only tags of runs alice may see
    assert '<a class="tag" href="?tag=baseline">baseline</a>' in html
    assert '<option value="baseline">' in html and "bobs-secret" not in html


def test_filters_narrow_the_rows_and_fill_their_inputs(alice_client, runs):
    first, second, third, _ = runs
    get = lambda **params: alice_client.get(reverse("run-list"), params).content.decode()  # noqa: E731
    html = get(status="running")
    assert _row_ids(html) == [third.pk, first.pk]
    assert '<option value="running" selected>running</option>' in html
    html = get(tag="baseline")
    assert _row_ids(html) == [first.pk] and 'id="filter-tag" value="baseline"' in html
    html = get(config="grpo.beta:0.04")
    assert _row_ids(html) == [third.pk] and 'value="grpo.beta:0.04"' in html
    assert _row_ids(get(experiment=str(first.experiment_id), sort="id")) == [first.pk, second.pk]
    assert _row_ids(get(owner="bob")) == []
    assert 'id="runs-empty">No runs match these filters' in get(owner="bob")


def test_bad_parameters_are_a_400_naming_them(alice_client, runs):
    for params, words in (
        ({"sort": "size"}, "sort: unknown sort"),
        ({"config": "grpo.beta"}, "config: "),
        ({"status": "bogus"}, "status: unknown status bogus"),
        ({"tag": "a b"}, "tag: "),
    ):
        response = alice_client.get(reverse("run-list"), params)
        assert response.status_code == 400, params
        assert re.search(r'id="run-filter-error">' + re.escape(words), response.content.decode()), params


def test_pages_keep_the_whole_query(alice_client, alice, monkeypatch):
    import web.views

    monkeypatch.setattr(web.views, "RUNS_PER_PAGE", 2)
    experiment = make_experiment(alice)
    made = [make_run(experiment) for _ in range(5)]
    params = {"config": ["grpo.beta:0", "data.task:arithmetic"], "sort": "id", "page": "2"}
    html = alice_client.get(reverse("run-list"), params).content.decode()
    assert _row_ids(html) == [made[2].pk, made[3].pk]
    base = "?config=grpo.beta%3A0&amp;config=data.task%3Aarithmetic&amp;sort=id&amp;"
    assert f'<a href="{base}page=1">&larr; previous</a>' in html
    assert f'<a href="{base}page=3">next &rarr;</a>' in html

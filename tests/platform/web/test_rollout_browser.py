"""The rollout browser: GET /api/runs/<id>/samples with filters and keyset pages, groups, one prompt
across steps, the JSONL export, 400s naming the parameter, 404 on another user's run, and
runner.db_hooks storing kind, group and prompt_hash."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_run, token_client
from samples_testlib import PROMPTS, fill, prompt_hash

from experiments import sample_query
from experiments.models import RolloutSample
from runner.db_hooks import DatabaseHooks


def completions(body) -> list[str]:
    return [s["completion"] for s in body["samples"]]


@pytest.fixture
def browsed(alice):
    run = make_run(alice)
    fill(run)
    client = token_client(alice)
    return run, client, f"/api/runs/{run.pk}/samples"


def test_pages_follow_the_keyset_both_ways(browsed):
    run, client, url = browsed
    first = client.get(url, {"limit": 5}).json()
    assert completions(first) == ["s1g0n0", "s1g0n1", "s1g1n0", "s1g1n1", "s2g0n0"]
    assert first["prev_before"] is None and first["next_after"] == first["samples"][-1]["id"]
    assert first["samples"][0] == {
        **first["samples"][0],
        "kind": "train",
        "step": 1,
        "group": 0,
        "generation": 0,
        "prompt_hash": prompt_hash(PROMPTS[0]),
        "reward": 0.0,
        "advantage": -0.5,
    }
    second = client.get(url, {"limit": 5, "after": first["next_after"]}).json()
    assert completions(second) == ["s2g0n1", "s2g1n0", "s2g1n1", "s3g0n0", "s3g0n1"]
    third = client.get(url, {"limit": 5, "after": second["next_after"]}).json()
    assert completions(third) == ["s3g1n0", "s3g1n1"] and third["next_after"] is None
    back = client.get(url, {"limit": 5, "before": third["prev_before"]}).json()
    assert completions(back) == completions(second) and back["prev_before"] == second["samples"][0]["id"]


def test_previous_page_of_the_second_is_the_first(browsed):
    run, client, url = browsed
    first = client.get(url, {"limit": 5}).json()
    second = client.get(url, {"limit": 5, "after": first["next_after"]}).json()
    back = client.get(url, {"limit": 5, "before": second["prev_before"]}).json()
    assert completions(back) == completions(first) and back["prev_before"] is None
    assert back["next_after"] == first["next_after"]


def test_filters(browsed):
    run, client, url = browsed
    step_2 = ["s2g0n0", "s2g0n1", "s2g1n0", "s2g1n1"]
    assert completions(client.get(url, {"step_min": 2, "step_max": 2}).json()) == step_2
    assert completions(client.get(url, {"reward_min": 1, "step_max": 1}).json()) == ["s1g0n1", "s1g1n1"]
    assert completions(client.get(url, {"advantage_max": 0, "step_min": 3}).json()) == ["s3g0n0", "s3g1n0"]
    assert completions(client.get(url, {"reward_min": 0.5, "reward_max": 0.7}).json()) == []
    assert completions(client.get(url, {"q": "S2G1"}).json()) == ["s2g1n0", "s2g1n1"]  # case-insensitive
    assert len(client.get(url, {"q": "colour", "step_min": 0}).json()["samples"]) == 6  # the prompt's text
    assert completions(client.get(url, {"q": "%"}).json()) == []  # a literal, not a LIKE wildcard
    assert completions(client.get(url, {"kind": "eval"}).json()) == ["eval s1", "eval s2", "eval s3"]


def test_text_search_reads_a_bounded_window_per_request(browsed, monkeypatch):
    run, client, url = browsed
    monkeypatch.setattr(sample_query, "SEARCH_SCAN_ROWS", 4)  # one step's 4 train samples a request
    pages, after = [], ""
    while True:
        body = client.get(url, {"q": "g1", "limit": 5, "after": after}).json()
        pages.append((completions(body), body["scanned_to_step"]))
        if body["next_after"] is None:
            break
        after = body["next_after"]
    assert pages == [(["s1g1n0", "s1g1n1"], 1), (["s2g1n0", "s2g1n1"], 2), (["s3g1n0", "s3g1n1"], 3), ([], None)]
    ids = {s.completion: s.pk for s in RolloutSample.objects.filter(run=run)}
    back = client.get(url, {"q": "g1", "limit": 5, "before": ids["s3g1n0"]}).json()
    assert completions(back) == ["s2g1n0", "s2g1n1"] and back["scanned_to_step"] == 2
    assert back["prev_before"] == ids["s2g1n0"] and back["next_after"] == ids["s2g1n1"]
    many = client.get(url, {"q": "s", "limit": 3}).json()  # the limit reached inside the window
    assert completions(many) == ["s1g0n0", "s1g0n1", "s1g1n0"] and many["scanned_to_step"] is None
    assert many["next_after"] == ids["s1g1n0"]


def test_group_and_prompt_across_steps(browsed):
    run, client, url = browsed
    group = client.get(url, {"step": 2, "group": 1}).json()
    assert completions(group) == ["s2g1n0", "s2g1n1"]
    assert [(s["generation"], s["reward"], s["advantage"]) for s in group["samples"]] == [(0, 0.0, -0.5), (1, 1.0, 0.5)]
    across = client.get(url, {"prompt_hash": prompt_hash(PROMPTS[1])}).json()
    assert completions(across) == ["s1g1n0", "s1g1n1", "s2g1n0", "s2g1n1", "s3g1n0", "s3g1n1"]
    assert {s["prompt"] for s in across["samples"]} == {PROMPTS[1]}


def test_step_alone_keeps_the_older_answer(browsed):
    run, client, url = browsed
    body = client.get(url, {"step": 2}).json()
    assert set(body) == {"steps", "step", "samples"} and body["steps"] == [3, 2, 1] and body["step"] == 2
    assert [s["completion"] for s in body["samples"]] == ["s2g0n0", "s2g0n1", "s2g1n0", "s2g1n1"]


def test_jsonl_export(browsed):
    run, client, url = browsed
    response = client.get(f"{url}.jsonl", {"step_min": 3})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [line["completion"] for line in lines] == ["s3g0n0", "s3g0n1", "s3g1n0", "s3g1n1"]
    assert lines[1] == {
        **lines[1],
        "kind": "train",
        "step": 3,
        "index": 1,
        "group": 0,
        "prompt": PROMPTS[0],
        "answer": "4",
        "reward": 1.0,
        "advantage": 0.5,
        "extra": {"generation": 1},
        "prompt_hash": prompt_hash(PROMPTS[0]),
    }
    eval_lines = b"".join(client.get(f"{url}.jsonl", {"kind": "eval"}).streaming_content).decode().splitlines()
    assert [json.loads(line)["completion"] for line in eval_lines] == ["eval s1", "eval s2", "eval s3"]
    assert client.get(f"{url}.jsonl", {"reward_min": "x"}).status_code == 400


def test_export_reads_in_chunks(alice):
    run = make_run(alice)
    fill(run, steps=range(5))
    every = [s.completion for s in sample_query.iterate(run, sample_query.SampleFilters(), chunk=3)]
    assert every == [f"s{step}g{g}n{n}" for step in range(5) for g in range(2) for n in range(2)]


@pytest.mark.parametrize(
    "params, name",
    [
        ({"kind": "both"}, "kind"),
        ({"step_min": "one"}, "step_min"),
        ({"step_max": "1.5"}, "step_max"),
        ({"reward_min": "nan"}, "reward_min"),
        ({"advantage_max": "inf"}, "advantage_max"),
        ({"reward_max": "high"}, "reward_max"),
        ({"limit": "0"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"after": "-1"}, "after"),
        ({"after": "999999999"}, "after"),
        ({"before": "x"}, "before"),
        ({"prompt_hash": "XYZ"}, "prompt_hash"),
        ({"q": "a" * 201}, "q"),
        ({"q": "a\x00b"}, "q"),
        ({"group": "1"}, "group"),
        ({"step_min": "9" * 30}, "step_min"),
        ({"step_min": str(2**31)}, "step_min"),
    ],
)
def test_bad_parameters_answer_400_naming_them(browsed, params, name):
    run, client, url = browsed
    response = client.get(url, params)
    assert response.status_code == 400, response.content
    assert name in response.json()["errors"]


def test_another_users_run_is_404(browsed, bob):
    run, client, url = browsed
    assert token_client(bob).get(url, {"limit": 5}).status_code == 404
    assert token_client(bob).get(f"{url}.jsonl").status_code == 404


def test_limit_is_capped(browsed):
    run, client, url = browsed
    assert client.get(url, {"limit": 10**6}).json()["limit"] == sample_query.MAX_LIMIT


def test_db_hooks_store_kind_group_and_promptprompt_hash(alice):
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_samples(
        4,
        [
            {
                "prompt": "p",
                "completion": "c",
                "reward": 1.0,
                "advantage": 0.0,
                "group": 1,
                "generation": 1,
                "correct": True,
            },
            {"prompt": "q", "completion": "e", "kind": "eval"},
        ],
    )
    hooks.flush()
    evaluated, train = RolloutSample.objects.filter(run=run).order_by("kind")  # "eval" < "train"
    assert (train.kind, train.group, train.prompt_hash, train.extra) == (
        "train",
        1,
        prompt_hash("p"),
        {"generation": 1, "correct": True},
    )
    assert (evaluated.kind, evaluated.group, evaluated.prompt_hash) == ("eval", 0, prompt_hash("q"))


def test_page_lists_filters_and_pages(browsed, alice_client):
    run, client, url = browsed
    page = alice_client.get(f"/runs/{run.pk}/samples/", {"limit": 5, "q": "s1g"})
    text = page.content.decode()
    assert page.status_code == 200 and text.count('class="group-link"') == 4 and "s1g1n1" in text
    assert f"/api/runs/{run.pk}/samples.jsonl?" in text and "q=s1g" in text  # the export keeps the filters
    first = alice_client.get(f"/runs/{run.pk}/samples/", {"limit": 5}).content.decode()  # opens at the newest step
    assert 'id="samples-prev"' in first and 'id="samples-next"' not in first and "s3g1n1" in first
    assert "s1g0n0" not in first
    group = alice_client.get(f"/runs/{run.pk}/samples/", {"step": 2, "group": 1}).content.decode()
    assert group.count('class="card sample-card"') == 2 and "s2g1n1" in group and "s2g0n0" not in group
    evaluated = alice_client.get(f"/runs/{run.pk}/samples/", {"kind": "eval"}).content.decode()
    assert "eval s2" in evaluated and "s2g0n0" not in evaluated
    bad = alice_client.get(f"/runs/{run.pk}/samples/", {"reward_min": "lots"})
    bad_text = bad.content.decode()
    assert bad.status_code == 200 and "reward_min" in bad_text and 'id="samples-error"' in bad_text
    assert f'href="/runs/{run.pk}/samples/"' in alice_client.get(f"/runs/{run.pk}/").content.decode()


def test_page_says_where_a_text_search_stopped(browsed, alice_client, monkeypatch):
    run, client, url = browsed
    monkeypatch.setattr(sample_query, "SEARCH_SCAN_ROWS", 4)
    text = alice_client.get(f"/runs/{run.pk}/samples/", {"q": "g1"}).content.decode()
    assert 'id="samples-scanned"' in text and "up to step 1" in text and 'id="samples-next"' in text
    assert "s1g1n1" in text and "s2g1n0" not in text


def test_page_escapes_model_text(alice, alice_client):
    run = make_run(alice)
    RolloutSample.objects.create(
        run=run,
        step=1,
        prompt="<|im_start|>user\nhi<|im_end|>",
        completion="<script>alert(1)</script>",
        prompt_hash=prompt_hash("x"),
    )
    text = alice_client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert "<script>alert(1)" not in text and "&lt;script&gt;alert(1)" in text
    assert '<span class="tok-special">&lt;|im_start|&gt;</span>' in text


def test_page_of_another_users_run_is_404(browsed, bob):
    from django.test import Client

    run, client, url = browsed
    other = Client()
    other.force_login(bob)
    assert other.get(f"/runs/{run.pk}/samples/").status_code == 404


def test_db_hooks_keep_a_steps_train_samples_when_its_eval_samples_follow(alice):
    # The trainer reports step s's train samples, then (evaluation at step s) its eval samples; the
    # background flusher may write the first before the second arrive.
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_samples(2, [{"prompt": "p", "completion": "trained", "group": 0}])
    hooks.flush()
    hooks.on_samples(2, [{"prompt": "q", "completion": "evaluated", "kind": "eval"}])
    hooks.flush()
    assert sorted(RolloutSample.objects.filter(run=run).values_list("kind", "completion")) == [
        ("eval", "evaluated"),
        ("train", "trained"),
    ]
    hooks.on_samples(2, [{"prompt": "p", "completion": "trained again", "group": 0}])  # a step reported again
    hooks.flush()
    assert sorted(RolloutSample.objects.filter(run=run).values_list("kind", "completion")) == [
        ("eval", "evaluated"),
        ("train", "trained again"),
    ]


def test_reward_and_advantage_filters_read_a_bounded_window_per_request(browsed, monkeypatch):
    # A rare reward has no index keeping the browse order: like text, it reads at most
    # SEARCH_SCAN_ROWS rows a request instead of the whole run.
    run, client, url = browsed
    monkeypatch.setattr(sample_query, "SEARCH_SCAN_ROWS", 4)  # one step's 4 train samples a request
    pages, after = [], ""
    while True:
        body = client.get(url, {"reward_min": 1, "advantage_min": 0.5, "step_min": 2, "after": after}).json()
        pages.append((completions(body), body["scanned_to_step"]))
        if body["next_after"] is None:
            break
        after = body["next_after"]
    assert pages == [(["s2g0n1", "s2g1n1"], 2), (["s3g0n1", "s3g1n1"], 3), ([], None)]
    group = client.get(url, {"step": 2, "group": 1, "reward_min": 1}).json()  # one step: no window
    assert completions(group) == ["s2g1n1"] and group["scanned_to_step"] is None


def test_a_search_window_after_a_cursor_holds_the_rows_after_it(browsed, monkeypatch):
    run, client, url = browsed
    monkeypatch.setattr(sample_query, "SEARCH_SCAN_ROWS", 6)
    ids = {s.completion: s.pk for s in RolloutSample.objects.filter(run=run, kind="train")}
    # the 6 rows after s1g1n0: s1g1n1, s2g0n0, s2g0n1, s2g1n0, s2g1n1, s3g0n0
    body = client.get(url, {"q": "g0", "after": ids["s1g1n0"]}).json()
    assert completions(body) == ["s2g0n0", "s2g0n1", "s3g0n0"] and body["scanned_to_step"] == 3
    assert body["next_after"] == ids["s3g0n0"]
    # the 6 rows before s3g0n1: s3g0n0, s2g1n1, s2g1n0, s2g0n1, s2g0n0, s1g1n1
    back = client.get(url, {"q": "g0", "before": ids["s3g0n1"]}).json()
    assert completions(back) == ["s2g0n0", "s2g0n1", "s3g0n0"] and back["prev_before"] == ids["s1g1n1"]
    assert back["scanned_to_step"] == 1


def test_text_of_three_characters_searches_the_whole_run_where_postgresql_has_the_trigram_index(browsed, monkeypatch):
    """Migration 0010 creates pg_trgm indexes on PostgreSQL: a text search of 3+ characters then has
    no bounded window (the index finds the rows); SQLite, and shorter text, keep the window."""
    from django.db import connection

    run, client, url = browsed
    monkeypatch.setattr(sample_query, "SEARCH_SCAN_ROWS", 4)  # one step's 4 train samples a request
    monkeypatch.setattr(sample_query, "_trigram_indexed", {})
    body = client.get(url, {"q": "s3g1", "limit": 5}).json()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'sample_%%_trgm' ORDER BY 1")
            assert [row[0] for row in cursor.fetchall()] == ["sample_completion_trgm", "sample_prompt_trgm"]
        assert completions(body) == ["s3g1n0", "s3g1n1"] and body["scanned_to_step"] is None
        assert body["next_after"] is None
    else:
        assert completions(body) == [] and body["scanned_to_step"] == 1  # the first window: step 1's rows
    short = client.get(url, {"q": "g1", "limit": 5}).json()  # 2 characters: no trigram, a window
    assert completions(short) == ["s1g1n0", "s1g1n1"] and short["scanned_to_step"] == 1
    reward = client.get(url, {"q": "s3g1", "reward_min": 1, "limit": 5}).json()  # a bound too: a window
    assert completions(reward) == [] and reward["scanned_to_step"] == 1

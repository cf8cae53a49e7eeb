"""Multi-turn episodes in the rollout browser: a sample's turns, reward parts and end reason
stored by runner.db_hooks in RolloutSample.extra, read back by experiments.sample_episodes, returned
by the samples API under "episode" and shown by /runs/<id>/samples/ turn by turn (role, token count,
escaped text), with filters on how episodes ended and whether they called a tool. Single-turn
samples are unchanged. Hand-made samples in the shape of the trainer's
Rollout.samples() (see /work/briefs/common.md's contract)."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from api_testlib import make_run, token_client

from experiments import sample_episodes
from experiments.models import RolloutSample
from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db

TOOL_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "39 - 28"}}</tool_call>'
TURNS = [
    {"role": "assistant", "text": TOOL_CALL, "tokens": 17},
    {"role": "tool", "text": "<tool_response>\n11\n</tool_response>", "tokens": 9},
    {"role": "assistant", "text": "The answer is 11.", "tokens": 6},
]
EPISODE = {
    "env": "calculator",
    "turns": TURNS,
    "reward_parts": {"math_answer": 1.0, "env/solved": 0.833333333},
    "end_reason": "done",
    "tool_calls": 1,
    "tool_errors": 0,
}
LABELS = ["tool call", "tool response", "assistant"]
SHOWN = {**EPISODE, "error": None, "turns": [{**turn, "label": label} for turn, label in zip(TURNS, LABELS)]}
HOSTILE_TURNS = [
    {"role": "assistant", "text": TOOL_CALL, "tokens": 17},
    {"role": "tool", "text": "<tool_response><script>alert(1)</script></tool_response>", "tokens": 12},
]


def report(run, samples, step=1) -> None:
    """Write `samples` as the trainer reports them (runner.db_hooks, flushed at once)."""
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_samples(step, samples)
    hooks.flush()


def sample(completion: str, **keys) -> dict:
    return {
        "prompt": "What is 39 - 28?",
        "completion": completion,
        "answer": "11",
        "reward": 1.0,
        "advantage": 0.5,
        "group": 0,
        "generation": 0,
        "correct": True,
        **keys,
    }


@pytest.fixture
def episode_run(alice):
    """Step 1: a calculator episode, a single-turn sample, an env_error episode with a hostile tool
    response, and one that hit max_turns with a non-finite reward part."""
    run = make_run(alice)
    run.config = {**run.config, "env": {"name": "calculator"}}
    run.save(update_fields=["config"])
    report(
        run,
        [
            sample("CALC " + TOOL_CALL + " 11 The answer is 11.", **EPISODE),
            sample("plain single turn"),
            sample(
                "HOSTILE",
                env="calculator",
                turns=HOSTILE_TURNS,
                reward_parts={"math_answer": 0.0},
                end_reason="env_error",
                error="ValueError: <b>bad</b> in /srv/secret/env.py",
                tool_calls=1,
                tool_errors=1,
            ),
            sample(
                "LONG",
                env="guess_number",
                turns=[
                    {"role": "assistant", "text": "50", "tokens": 2},
                    {"role": "user", "text": "higher", "tokens": 3},
                ],
                reward_parts={"solved": float("nan")},
                end_reason="max_turns",
                tool_calls=0,
                tool_errors=0,
            ),
        ],
    )
    return run


# --- storage --------------------------------------------------------------------------------------


def test_db_hooks_keep_the_episode_keys_in_extra(episode_run):
    stored = RolloutSample.objects.get(run=episode_run, completion__startswith="CALC")
    assert stored.extra == {"generation": 0, "correct": True, **EPISODE}
    assert stored.completion == "CALC " + TOOL_CALL + " 11 The answer is 11."  # the whole episode text, searchable


def test_a_single_turn_sample_is_stored_as_before(episode_run):
    stored = RolloutSample.objects.get(run=episode_run, completion="plain single turn")
    assert stored.extra == {"generation": 0, "correct": True}
    assert sample_episodes.episode(stored.extra) is None


def test_a_non_finite_reward_part_is_stored_as_a_string(episode_run):
    """NaN is not JSON: SQLite's JSON_VALID check (and PostgreSQL's jsonb) would refuse the whole flush."""
    stored = RolloutSample.objects.get(run=episode_run, completion="LONG")
    assert stored.extra["reward_parts"] == {"solved": "NaN"}


def test_the_episode_reads_back_from_the_database(episode_run):
    stored = RolloutSample.objects.get(run=episode_run, completion__startswith="CALC")
    assert sample_episodes.episode(stored.extra) == SHOWN


def test_json_safe_spells_non_finite_values_at_any_depth():
    value = {"a": [1.5, float("inf"), {"b": float("-inf")}], "c": float("nan"), "d": "x", "e": 2}
    assert sample_episodes.json_safe(value) == {
        "a": [1.5, "Infinity", {"b": "-Infinity"}],
        "c": "NaN",
        "d": "x",
        "e": 2,
    }


def test_episode_reads_wrong_types_as_none():
    extra = {
        "turns": [{"role": "assistant", "text": "hi", "tokens": "many"}, "not a turn", {"text": 5}],
        "reward_parts": {"a": True, "b": "high", "c": 2, "d": "Infinity"},
        "end_reason": 3,
        "tool_calls": 1.5,
        "env": None,
    }
    assert sample_episodes.episode(extra) == {
        "env": None,
        "turns": [
            {"role": "assistant", "label": "assistant", "text": "hi", "tokens": None},
            {"role": "?", "label": "?", "text": "5", "tokens": None},
        ],
        "reward_parts": {"a": 1.0, "b": None, "c": 2.0, "d": "Infinity"},
        "end_reason": None,
        "error": None,
        "tool_calls": None,
        "tool_errors": None,
    }
    assert sample_episodes.episode({"turns": "not a list"}) is None
    assert sample_episodes.episode(None) is None


def test_turn_labels():
    assert sample_episodes.turn_label("assistant", "I will call " + TOOL_CALL) == "tool call"
    assert sample_episodes.turn_label("assistant", "The answer is 11.") == "assistant"
    assert sample_episodes.turn_label("tool", "<tool_response>11</tool_response>") == "tool response"
    assert sample_episodes.turn_label("user", "higher") == "user"


# --- the API ------------------------------------------------------------------------------------


def by_completion(samples: list[dict], start: str) -> dict:
    (found,) = [s for s in samples if s["completion"].startswith(start)]
    return found


def test_the_browse_api_returns_the_episode(episode_run):
    body = (
        token_client(episode_run.experiment.owner).get(f"/api/runs/{episode_run.pk}/samples", {"kind": "train"}).json()
    )
    calc = by_completion(body["samples"], "CALC")
    assert calc["episode"] == SHOWN
    assert "episode" not in by_completion(body["samples"], "plain")
    hostile = by_completion(body["samples"], "HOSTILE")["episode"]
    assert hostile["end_reason"] == "env_error" and hostile["tool_errors"] == 1
    assert hostile["turns"][1]["text"] == "<tool_response><script>alert(1)</script></tool_response>"  # JSON: as written
    assert by_completion(body["samples"], "LONG")["episode"]["reward_parts"] == {"solved": "NaN"}


def test_the_step_api_returns_the_episode_and_single_turn_unchanged(episode_run):
    body = token_client(episode_run.experiment.owner).get(f"/api/runs/{episode_run.pk}/samples", {"step": 1}).json()
    assert by_completion(body["samples"], "CALC")["episode"]["turns"] == SHOWN["turns"]
    plain = by_completion(body["samples"], "plain")
    assert set(plain) == {
        "index",
        "prompt",
        "prompt_messages",
        "prompt_segments",
        "completion",
        "completion_segments",
        "answer",
        "reward",
        "advantage",
        "truncated",
        "in_loss",
        "overlong_penalty",
    }


def test_the_jsonl_export_keeps_the_episode_keys(episode_run):
    response = token_client(episode_run.experiment.owner).get(f"/api/runs/{episode_run.pk}/samples.jsonl")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    calc = by_completion(lines, "CALC")
    assert calc["extra"] == {"generation": 0, "correct": True, **EPISODE}


# --- the page -----------------------------------------------------------------------------------


def row_of(page: str, completion_start: str) -> str:
    """The table row (or group card) holding the sample whose episode or completion starts so."""
    blocks = re.split(r"<tr data-sample-id=|<section class=\"card sample-card\"", page)
    (block,) = [b for b in blocks if completion_start in b]
    return block


def turns_of(block: str) -> list[tuple[str, str]]:
    """(role label, token count text) of each turn block."""
    return re.findall(r'<span class="turn-role">([^<]*)</span>\s*<span class="turn-tokens">([^<]*)</span>', block)


def test_the_browser_shows_the_turns_with_roles_and_tokens(episode_run, alice_client):
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/").content.decode()
    calc = row_of(page, "The answer is 11.")
    assert turns_of(calc) == [("tool call", "17 tokens"), ("tool response", "9 tokens"), ("assistant", "6 tokens")]
    assert 'class="turn turn-tool-call"' in calc and 'class="turn turn-tool-response"' in calc
    assert re.findall(r'<span class="reward-part-name">([^<]*)</span> <b title="[^"]*">([^<]*)</b>', calc) == [
        ("env/solved", "0.833"),
        ("math_answer", "1.0"),
    ]  # by name (PostgreSQL's jsonb keeps no key order)
    assert '<b class="episode-end">done</b>' in calc and "1 tool call" in calc
    guess = row_of(page, "higher")
    assert turns_of(guess) == [("assistant", "2 tokens"), ("user", "3 tokens")]
    assert '<b class="episode-end">max_turns</b>' in guess and ">NaN</b>" in guess


def test_the_browser_escapes_model_and_tool_text(episode_run, alice_client):
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/").content.decode()
    assert "<script>alert(1)</script>" not in page
    hostile = row_of(page, "&lt;script&gt;alert(1)&lt;/script&gt;")
    assert turns_of(hostile) == [("tool call", "17 tokens"), ("tool response", "12 tokens")]
    assert '<b class="episode-end">env_error</b>' in hostile
    error = re.search(r'<span class="episode-error">([^<]*)</span>', hostile).group(1)
    assert html_lib.unescape(error) == "ValueError: <b>bad</b> in /srv/secret/env.py"
    assert "1 tool call, 1 failed" in hostile


def test_a_single_turn_sample_shows_its_completion_as_before(episode_run, alice_client):
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/").content.decode()
    plain = row_of(page, "plain single turn")
    assert 'class="episode"' not in plain and 'class="turn' not in plain
    assert '<td class="sample-text">plain single turn</td>' in plain


def test_the_group_view_shows_the_episodes(episode_run, alice_client):
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/", {"step": 1, "group": 0}).content.decode()
    assert page.count('class="card sample-card"') == 4
    assert turns_of(row_of(page, "The answer is 11."))[0] == ("tool call", "17 tokens")


def test_text_search_finds_text_inside_a_turn(episode_run, alice_client):
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/", {"q": "the answer is"}).content.decode()
    assert page.count("<tr data-sample-id=") == 1 and "The answer is 11." in page


# --- filters ------------------------------------------------------------------------------------


def starts(samples: list[dict]) -> list[str]:
    return [s["completion"].split(" ", 1)[0] for s in samples]


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"end_reason": "done"}, ["CALC"]),
        ({"end_reason": "env_error"}, ["HOSTILE"]),
        ({"end_reason": "max_turns"}, ["LONG"]),
        ({"end_reason": "max_total_tokens"}, []),
        ({"tool": "yes"}, ["CALC", "HOSTILE"]),
        ({"tool": "no"}, ["LONG"]),  # the single-turn sample is no episode: in neither
        ({"tool": "yes", "end_reason": "done"}, ["CALC"]),
        ({"tool": "yes", "q": "hostile"}, ["HOSTILE"]),
    ],
)
def test_the_api_filters_episodes(episode_run, params, expected):
    client = token_client(episode_run.experiment.owner)
    body = client.get(f"/api/runs/{episode_run.pk}/samples", params).json()
    assert starts(body["samples"]) == expected
    response = client.get(f"/api/runs/{episode_run.pk}/samples.jsonl", params)
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert starts(lines) == expected


@pytest.mark.parametrize("params, field", [({"end_reason": "finished"}, "end_reason"), ({"tool": "maybe"}, "tool")])
def test_bad_episode_filters_answer_400_naming_the_parameter(episode_run, params, field):
    response = token_client(episode_run.experiment.owner).get(f"/api/runs/{episode_run.pk}/samples", params)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_the_page_offers_the_episode_filters_for_a_multi_turn_run(episode_run, alice_client, alice):
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/", {"end_reason": "max_turns"}).content.decode()
    assert '<option value="max_turns" selected>max_turns</option>' in page
    assert page.count("<tr data-sample-id=") == 1 and "higher" in page
    page = alice_client.get(f"/runs/{episode_run.pk}/samples/", {"tool": "yes"}).content.decode()
    assert '<option value="yes" selected>used a tool</option>' in page and page.count("<tr data-sample-id=") == 2
    single = make_run(alice)
    page = alice_client.get(f"/runs/{single.pk}/samples/").content.decode()
    assert 'name="end_reason"' not in page and 'name="tool"' not in page


def test_a_bad_filter_on_the_page_is_an_error_message(episode_run, alice_client):
    response = alice_client.get(f"/runs/{episode_run.pk}/samples/", {"end_reason": "<b>x</b>"})
    assert response.status_code == 200
    error = re.search(r'<div class="error-box" id="samples-error">([^<]*)</div>', response.content.decode()).group(1)
    assert error.startswith("end_reason: must be one of done, max_turns, max_total_tokens, env_error, got ")
    assert "&lt;b&gt;x&lt;/b&gt;" in error


def test_an_environment_error_shows_no_server_directory(alice, alice_client, settings):
    """An env_error's message may be a traceback: the API, the export and the page show server paths
    relative to their root (experiments.shown_paths), like every error that leaves the server."""
    run = make_run(alice)
    path = f"{settings.REPO_ROOT}/trainers/envs/calculator.py"
    report(
        run,
        [
            sample(
                "ERR",
                env="calculator",
                turns=[{"role": "assistant", "text": "x", "tokens": 1}],
                end_reason="env_error",
                error=f'File "{path}", line 3: ZeroDivisionError',
            )
        ],
    )
    shown = 'File "<code>/trainers/envs/calculator.py", line 3: ZeroDivisionError'
    client = token_client(alice)
    (api,) = client.get(f"/api/runs/{run.pk}/samples", {"kind": "train"}).json()["samples"]
    assert api["episode"]["error"] == shown
    response = client.get(f"/api/runs/{run.pk}/samples.jsonl")
    (line,) = [json.loads(x) for x in b"".join(response.streaming_content).decode().splitlines()]
    assert line["extra"]["error"] == shown
    page = alice_client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert str(settings.REPO_ROOT) not in page and html_lib.escape(shown) in page
    assert RolloutSample.objects.get(run=run).extra["error"].startswith(f'File "{path}"')  # stored whole

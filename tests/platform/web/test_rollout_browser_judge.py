"""A sample's judge verdict in the rollout browser and the samples API: the trainer's judge reward
reports, per sample, `reward_details: {"judge": {"mode", "score", "verdict", ...}}` (runner.db_hooks
keeps it in RolloutSample.extra). experiments.reward_details.judge reads it back (text capped, wrong
shapes tolerated); /runs/<id>/samples/ shows the verdict, the score, the mode and the reason; the
API returns the same under `judge`."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from api_testlib import make_run, token_client

from experiments import reward_details
from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db

YES = {"mode": "yes_no", "score": 0.8125, "verdict": "yes", "logprob_yes": -0.3, "logprob_no": -1.77}
NUMBER = {"mode": "number", "score": 0.0, "verdict": "<b>none</b>", "output": " <b>none</b>", "reason": "no number"}
LONG = {"mode": "number", "score": 1.0, "verdict": "9" * 400, "output": "9" * 400, "reason": "clipped from 999"}


def sample(completion: str, **keys) -> dict:
    base = {"prompt": "What is 2 + 3?", "completion": completion, "answer": "5", "reward": 0.5, "advantage": 0.0}
    return {**base, "group": 0, **keys}


@pytest.fixture
def judged_run(alice):
    """Step 1, one group: samples with good, odd and no judge verdicts, written through db_hooks."""
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_samples(
        1,
        [
            sample("SAIDYES", generation=0, reward_details={"judge": YES}),
            sample("NONUMBER", generation=1, reward_details={"judge": NUMBER}),
            sample("LONGVERDICT", generation=2, reward_details={"judge": LONG}),
            sample("ODDJUDGE", generation=3, reward_details={"judge": {"score": "high", "verdict": 7, "mode": 3}}),
            sample("NOTAMAPPING", generation=4, reward_details={"judge": "yes"}),
            sample("PLAIN", generation=5),
        ],
    )
    hooks.flush()
    return run


def test_judge_reads_the_verdict_and_tolerates_wrong_shapes():
    assert reward_details.judge({"reward_details": {"judge": YES}}) == {
        "mode": "yes_no",
        "score": 0.8125,
        "verdict": "yes",
        "reason": "",
    }
    long = reward_details.judge({"reward_details": {"judge": LONG}})
    assert long["verdict"] == "9" * 299 + "…" and long["reason"] == "clipped from 999"
    odd = reward_details.judge({"reward_details": {"judge": {"score": float("nan"), "verdict": 7, "mode": 3}}})
    assert odd == {"mode": "", "score": None, "verdict": "7", "reason": ""}
    for extra in (None, "x", {}, {"reward_details": "x"}, {"reward_details": {"judge": "yes"}}, {"reward_details": {}}):
        assert reward_details.judge(extra) is None


def by_completion(samples: list[dict]) -> dict[str, dict]:
    return {s["completion"]: s for s in samples}


def test_the_api_returns_the_verdict(judged_run):
    client = token_client(judged_run.experiment.owner)
    for params in ({"step": 1}, {"kind": "train"}):
        response = client.get(f"/api/runs/{judged_run.pk}/samples", params)
        assert response.status_code == 200
        samples = by_completion(response.json()["samples"])
        assert samples["SAIDYES"]["judge"] == {"mode": "yes_no", "score": 0.8125, "verdict": "yes", "reason": ""}
        assert samples["NONUMBER"]["judge"] == {
            "mode": "number",
            "score": 0.0,
            "verdict": "<b>none</b>",
            "reason": "no number",
        }
        assert samples["ODDJUDGE"]["judge"] == {"mode": "", "score": None, "verdict": "7", "reason": ""}
        for name in ("NOTAMAPPING", "PLAIN"):
            assert "judge" not in samples[name], name


VERDICT = re.compile(
    r'<div class="(judge-verdict[^"]*)">.*?<p class="judge-summary"><b>judge: (.*?)</b> '
    r'<span class="judge-score"[^>]*>score ([^<]*)</span>'
    r'(?: <span class="judge-mode">\((.*?)\)</span>)?(?: <span class="judge-reason">(.*?)</span>)?</p>',
    re.S,
)


def block_of(page: str, completion: str) -> str:
    blocks = re.split(r"<tr data-sample-id=|<section class=\"card sample-card\"", page)
    (block,) = [b for b in blocks if f">{completion}<" in b]
    return block


def verdict_of(block: str) -> tuple[str, str, str, str, str] | None:
    """(box class, verdict, score, mode, reason) of the block's judge verdict, the texts unescaped."""
    found = VERDICT.findall(block)
    assert len(found) <= 1
    return tuple(html_lib.unescape(part) for part in found[0]) if found else None


@pytest.mark.parametrize("params", [{}, {"step": 1, "group": 0}], ids=["browse table", "group view"])
def test_the_page_shows_the_verdict_and_its_score(judged_run, alice_client, params):
    response = alice_client.get(f"/runs/{judged_run.pk}/samples/", params)
    assert response.status_code == 200
    page = response.content.decode()
    assert verdict_of(block_of(page, "SAIDYES")) == ("judge-verdict judge-verdict-high", "yes", "0.812", "yes_no", "")
    assert verdict_of(block_of(page, "NONUMBER")) == ("judge-verdict", "<b>none</b>", "0.000", "number", "no number")
    assert verdict_of(block_of(page, "LONGVERDICT"))[1] == "9" * 299 + "…"
    assert verdict_of(block_of(page, "ODDJUDGE")) == ("judge-verdict", "7", "?", "", "")
    for name in ("NOTAMAPPING", "PLAIN"):
        assert verdict_of(block_of(page, name)) is None and "judge-verdict" not in block_of(page, name), name
    assert "<b>none</b>" not in page and "&lt;b&gt;none&lt;/b&gt;" in page  # model text is escaped

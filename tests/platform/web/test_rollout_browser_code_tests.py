"""A sample's unit test results in the rollout browser and the samples API: the trainer's code_tests
reward reports, per sample, `reward_details: {"code_tests": [{"test", "passed", "reason"}, ...]}`
(runner.db_hooks keeps it in RolloutSample.extra). experiments.reward_details.code_tests reads it
back (text capped, wrong shapes tolerated, other reward names ignored); /runs/<id>/samples/ shows a
summary ("3/5 tests passed") and each test's mark, escaped statement and reason; the API returns the
same list under `code_tests`."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from api_testlib import make_run, token_client

from experiments import reward_details
from experiments.models import RolloutSample
from runner.db_hooks import DatabaseHooks

pytestmark = pytest.mark.django_db

HOSTILE_TEST = "assert f('<script>alert(1)</script>') == '&amp;'"
LONG_TEST = "assert g(" + "1, " * 400 + "1) == 0"  # > 500 characters
OTHER = {"score": 0.5, "verdict": "OTHER-DETAILS-TEXT"}  # a reward the pages do not read: ignored


def five_tests(repo_root) -> list[dict]:
    """Three passed, two failed: one with a plain reason, one whose reason names a server path."""
    return [
        {"test": "assert clamp(0) == 0", "passed": True, "reason": "", "checked": "outside"},
        {"test": "assert clamp(-10) == -3", "passed": False, "reason": "AssertionError", "checked": "inside"},
        {"test": HOSTILE_TEST, "passed": True, "reason": "", "checked": "elsewhere"},
        {"test": "assert clamp(9) == 3", "passed": False, "reason": f'File "{repo_root}/sandbox/run.py", line 3'},
        {"test": "assert clamp(1) == 1", "passed": True, "reason": None},
    ]


def sample(completion: str, **keys) -> dict:
    base = {"prompt": "Write clamp.", "completion": completion, "answer": "", "reward": 0.6, "advantage": 0.1}
    return {**base, "group": 0, **keys}


@pytest.fixture
def code_run(alice, settings):
    """Step 1, one group: samples with good, odd and no test results, written through db_hooks."""
    run = make_run(alice)
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=3600, background_flush=False)
    hooks.on_samples(
        1,
        [
            sample(
                "FIVE",
                generation=0,
                reward_details={"code_tests": five_tests(settings.REPO_ROOT), "other_reward": OTHER},
            ),
            sample("LONGTEST", generation=1, reward_details={"code_tests": [{"test": LONG_TEST, "passed": True}]}),
            sample("STRINGDETAILS", generation=2, reward_details="not a mapping"),
            sample("NONDICTS", generation=3, reward_details={"code_tests": ["x", 3, None]}),
            sample(
                "MISSINGKEYS",
                generation=4,
                reward_details={"code_tests": [{}, {"test": 5, "passed": "yes", "reason": ["r"]}]},
            ),
            sample("NOTALIST", generation=5, reward_details={"code_tests": "assert x"}),
            sample("ONLYOTHER", generation=6, reward_details={"other_reward": OTHER}),
            sample("PLAIN", generation=7),
        ],
    )
    hooks.flush()
    return run


SHOWN_FIVE = [
    {"test": "assert clamp(0) == 0", "passed": True, "reason": "", "checked": "outside"},
    {"test": "assert clamp(-10) == -3", "passed": False, "reason": "AssertionError", "checked": "inside"},
    {"test": HOSTILE_TEST, "passed": True, "reason": "", "checked": ""},  # an unknown word is not shown
    {"test": "assert clamp(9) == 3", "passed": False, "reason": 'File "<code>/sandbox/run.py", line 3', "checked": ""},
    {"test": "assert clamp(1) == 1", "passed": True, "reason": "", "checked": ""},
]
SHOWN_MISSING = [
    {"test": "", "passed": None, "reason": "", "checked": ""},
    {"test": "5", "passed": None, "reason": "['r']", "checked": ""},
]


# --- the reader -----------------------------------------------------------------------------------


def test_code_tests_reads_the_results_in_order(settings):
    extra = {"reward_details": {"code_tests": five_tests(settings.REPO_ROOT), "other_reward": OTHER}}
    assert reward_details.code_tests(extra) == SHOWN_FIVE
    assert reward_details.tests_summary(SHOWN_FIVE) == "3/5 tests passed"
    assert reward_details.tests_summary(SHOWN_FIVE[:1]) == "1/1 test passed"
    assert reward_details.tests_summary([]) == "0/0 tests passed"


def test_code_tests_caps_the_test_and_the_reason():
    (long,) = reward_details.code_tests(
        {"reward_details": {"code_tests": [{"test": LONG_TEST, "passed": False, "reason": "r" * 1000}]}}
    )
    assert len(long["test"]) == reward_details.MAX_TEST_CHARS == 500
    assert long["test"] == LONG_TEST[:499] + "…"
    assert long["reason"] == "r" * 299 + "…"
    exact = "x" * 500
    assert reward_details.code_tests({"reward_details": {"code_tests": [{"test": exact}]}})[0]["test"] == exact


def test_code_tests_tolerates_every_wrong_shape():
    assert reward_details.code_tests(None) is None
    assert reward_details.code_tests("extra") is None
    assert reward_details.code_tests({}) is None
    assert reward_details.code_tests({"reward_details": "not a mapping"}) is None
    assert reward_details.code_tests({"reward_details": ["code_tests"]}) is None
    assert reward_details.code_tests({"reward_details": {"code_tests": "assert x"}}) is None
    assert reward_details.code_tests({"reward_details": {"other_reward": OTHER}}) is None  # another reward only
    assert reward_details.code_tests({"reward_details": {"code_tests": ["x", 3, None]}}) == []
    missing = {"code_tests": [{}, {"test": 5, "passed": "yes", "reason": ["r"]}]}
    assert reward_details.code_tests({"reward_details": missing}) == SHOWN_MISSING


# --- storage and the API --------------------------------------------------------------------------


def test_db_hooks_keep_reward_details_in_extra(code_run, settings):
    stored = RolloutSample.objects.get(run=code_run, completion="FIVE")
    assert stored.extra["reward_details"] == {"code_tests": five_tests(str(settings.REPO_ROOT)), "other_reward": OTHER}


def by_completion(samples: list[dict]) -> dict[str, dict]:
    return {s["completion"]: s for s in samples}


def test_the_api_returns_the_normalised_tests(code_run):
    client = token_client(code_run.experiment.owner)
    for params in ({"step": 1}, {"kind": "train"}):  # the run page's step view and the browse view
        response = client.get(f"/api/runs/{code_run.pk}/samples", params)
        assert response.status_code == 200
        samples = by_completion(response.json()["samples"])
        assert samples["FIVE"]["code_tests"] == SHOWN_FIVE
        assert samples["LONGTEST"]["code_tests"] == [
            {"test": LONG_TEST[:499] + "…", "passed": True, "reason": "", "checked": ""}
        ]
        assert samples["NONDICTS"]["code_tests"] == []
        assert samples["MISSINGKEYS"]["code_tests"] == SHOWN_MISSING
        for name in ("STRINGDETAILS", "NOTALIST", "ONLYOTHER", "PLAIN"):
            assert "code_tests" not in samples[name], name
        assert "OTHER-DETAILS-TEXT" not in response.content.decode()


def test_the_export_keeps_reward_details_without_server_paths(code_run, settings):
    response = token_client(code_run.experiment.owner).get(f"/api/runs/{code_run.pk}/samples.jsonl")
    lines = by_completion(json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines())
    details = lines["FIVE"]["extra"]["reward_details"]
    assert details["other_reward"] == OTHER
    assert details["code_tests"][3]["reason"] == 'File "<code>/sandbox/run.py", line 3'
    assert str(settings.REPO_ROOT) not in json.dumps(lines["FIVE"])
    assert lines["STRINGDETAILS"]["extra"]["reward_details"] == "not a mapping"


# --- the page -------------------------------------------------------------------------------------

TEST_ITEM = re.compile(
    r'<li class="code-test code-test-(\w+)"><span class="code-test-mark" role="img" aria-label="\w+" '
    r'title="\w+">(.)</span> <code class="code-test-text">(.*?)</code>'
    r'( <span class="code-test-inside" title="[^"]*">checked inside the sandbox</span>)?'
    r'(?: <span class="code-test-reason">(.*?)</span>)?</li>',
    re.S,
)


def block_of(page: str, completion: str) -> str:
    """The table row (or group card) that shows `completion`."""
    blocks = re.split(r"<tr data-sample-id=|<section class=\"card sample-card\"", page)
    (block,) = [b for b in blocks if f">{completion}<" in b]
    return block


def summary_of(block: str) -> str | None:
    found = re.findall(r'<p class="code-tests-summary"><b>([^<]*)</b></p>', block)
    assert len(found) <= 1
    return found[0] if found else None


def listed_tests(block: str) -> list[tuple[str, str, str, str]]:
    """(state, mark, test, reason) of each listed test, the test and reason unescaped; a test checked
    inside the sandbox has " (inside)" after its statement."""
    return [
        (state, mark, html_lib.unescape(test) + (" (inside)" if inside else ""), html_lib.unescape(reason))
        for state, mark, test, inside, reason in TEST_ITEM.findall(block)
    ]


FIVE_ITEMS = [
    ("passed", "✓", "assert clamp(0) == 0", ""),
    ("failed", "✗", "assert clamp(-10) == -3 (inside)", "AssertionError"),
    ("passed", "✓", HOSTILE_TEST, ""),
    ("failed", "✗", "assert clamp(9) == 3", 'File "<code>/sandbox/run.py", line 3'),
    ("passed", "✓", "assert clamp(1) == 1", ""),
]


@pytest.mark.parametrize("params", [{}, {"step": 1, "group": 0}], ids=["browse table", "group view"])
def test_the_page_shows_each_test_and_the_summary(code_run, alice_client, params):
    response = alice_client.get(f"/runs/{code_run.pk}/samples/", params)
    assert response.status_code == 200
    page = response.content.decode()
    five = block_of(page, "FIVE")
    assert summary_of(five) == "3/5 tests passed"
    assert 'class="code-tests"' in five  # not all passed: no green summary
    assert listed_tests(five) == FIVE_ITEMS
    longtest = block_of(page, "LONGTEST")
    assert summary_of(longtest) == "1/1 test passed" and 'class="code-tests code-tests-all-passed"' in longtest
    assert listed_tests(longtest) == [("passed", "✓", LONG_TEST[:499] + "…", "")]


def test_the_page_escapes_test_text(code_run, alice_client):
    page = alice_client.get(f"/runs/{code_run.pk}/samples/").content.decode()
    five = block_of(page, "FIVE")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in five and "&amp;amp;" in five
    assert "<script>alert(1)" not in page
    assert "&lt;code&gt;/sandbox/run.py" in five  # the shown path, escaped too


def test_the_page_tolerates_odd_reward_details(code_run, alice_client):
    """A non-mapping, a list of non-mappings, entries missing their keys, a non-list code_tests and
    another reward's details: the page renders, showing what it can."""
    response = alice_client.get(f"/runs/{code_run.pk}/samples/")
    assert response.status_code == 200
    page = response.content.decode()
    for name in ("STRINGDETAILS", "NOTALIST", "ONLYOTHER", "PLAIN"):
        block = block_of(page, name)
        assert summary_of(block) is None and "code-tests" not in block, name
    nondicts = block_of(page, "NONDICTS")
    assert summary_of(nondicts) == "0/0 tests passed" and listed_tests(nondicts) == []
    missing = block_of(page, "MISSINGKEYS")
    assert summary_of(missing) == "0/2 tests passed"
    assert listed_tests(missing) == [("unknown", "?", "", ""), ("unknown", "?", "5", "['r']")]
    assert "OTHER-DETAILS-TEXT" not in page

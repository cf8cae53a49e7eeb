"""What a sample's rewards found, read back from `RolloutSample.extra` for the API and the rollout
browser (like experiments.sample_episodes for episodes).

The trainer's `Rollout.samples()` adds, for a sample whose reward functions gave details, the key

    "reward_details": {"code_tests": [{"test": "assert clamp(0) == 0", "passed": true, "reason": "",
                                       "checked": "outside"},
                                      {"test": "assert clamp(-10) == -3", "passed": false,
                                       "reason": "AssertionError"}, ...]}

(reward function name -> what it found for that completion), or for the judge reward

    "reward_details": {"judge": {"mode": "yes_no", "score": 0.83, "verdict": "yes", ...}}
                      {"judge": {"mode": "number", "score": 0.7, "verdict": "7", "output": " 7",
                                 "reason": ""}}

Two are read: `code_tests` (trainers.data.rewards: each of the example's unit tests run after the
completion's code in the sandbox) and `judge` (a judge model's verdict, trainers.rollout.judge); any
other name is ignored, whatever its shape. runner.db_hooks keeps the key in `extra` (no migration:
older rows have none). The tests, reasons and verdicts come from a dataset and from model output: they are
text for the template's escaping, cut to a bounded length here, and a value of the wrong shape
never fails the page or the API.

Pure but for `shown` (a sandbox error may name a server path): tests call `code_tests` and `judge`
with hand-made dicts.
"""

from __future__ import annotations

from typing import Any

from experiments.shown_paths import shown

MAX_TEST_CHARS = 500  # a test statement as shown: a longer one is cut and ends in "…"
MAX_REASON_CHARS = 300  # a failure reason as shown (the trainer already keeps it this short)
MAX_VERDICT_CHARS = 300  # what a judge wrote, as shown
ELLIPSIS = "…"
CHECKED = ("outside", "inside")
"""Where a test's result was decided: compared outside the sandbox (the code cannot forge it) or a
statement that ran inside it."""


def _capped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _text(value: Any) -> str:
    """A string as it is, None as "", anything else as Python writes it."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _test_result(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    passed = value.get("passed")
    return {
        "test": _capped(_text(value.get("test")), MAX_TEST_CHARS),
        "passed": passed if isinstance(passed, bool) else None,
        "reason": _capped(shown(_text(value.get("reason"))), MAX_REASON_CHARS),
        "checked": value.get("checked") if value.get("checked") in CHECKED else "",
    }


def code_tests(extra: Any) -> list[dict[str, Any]] | None:
    """A sample's unit test results from its stored `extra` (`extra["reward_details"]["code_tests"]`),
    or None when it has none (no reward_details mapping, or no code_tests list in it).

    [{"test": str, "passed": bool | None, "reason": str, "checked": str}, ...] in the trainer's order: `test` at most
    MAX_TEST_CHARS characters and `reason` at most MAX_REASON_CHARS (a longer one cut, ending in "…";
    server paths shown relative to their root); `passed` None when the stored value is not a bool
    (neither passed nor failed); `checked` "outside", "inside", or "" where the trainer stored
    neither; a missing or null text reads as "", another type as its str(). An
    entry that is not a mapping is left out."""
    details = extra.get("reward_details") if isinstance(extra, dict) else None
    tests = details.get("code_tests") if isinstance(details, dict) else None
    if not isinstance(tests, list):
        return None
    return [t for t in (_test_result(v) for v in tests) if t is not None]


def tests_summary(tests: list[dict[str, Any]]) -> str:
    """ "3/5 tests passed" of code_tests' list ("1/1 test passed" for a single test)."""
    passed = sum(1 for t in tests if t["passed"] is True)
    return f"{passed}/{len(tests)} test{'' if len(tests) == 1 else 's'} passed"


def _score(value: Any) -> float | None:
    """A finite number as a float, anything else (a bool, NaN, text) as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        return None
    return float(value)


def judge(extra: Any) -> dict[str, Any] | None:
    """A sample's judge verdict from its stored `extra` (`extra["reward_details"]["judge"]`), or None
    when it has none (no reward_details mapping, or no judge mapping in it).

    {"mode": str ("yes_no", "number", or "" when not stored as text), "score": float | None (None
    when not a finite number), "verdict": str (yes_no: "yes" or "no"; number: what the judge wrote,
    stripped), "reason": str (why the score is 0 or clipped; "" when none)}, the texts at most
    MAX_VERDICT_CHARS / MAX_REASON_CHARS characters (a longer one cut, ending in "…")."""
    details = extra.get("reward_details") if isinstance(extra, dict) else None
    verdict = details.get("judge") if isinstance(details, dict) else None
    if not isinstance(verdict, dict):
        return None
    mode = verdict.get("mode")
    return {
        "mode": mode if isinstance(mode, str) else "",
        "score": _score(verdict.get("score")),
        "verdict": _capped(_text(verdict.get("verdict")), MAX_VERDICT_CHARS),
        "reason": _capped(_text(verdict.get("reason")), MAX_REASON_CHARS),
    }

"""`python -m trainers sandbox PROGRAM.py --test STATEMENT ...`: run a program against tests in the
code sandbox, as the `code_tests` reward does, and print each test's result, so that a dataset's
author can check their tests (and the sandbox) before a run relies on them.

Exit status: 0 when every test passed, 1 when one failed, 2 when the sandbox could not run the
program (its error is printed; with --json, in "error").
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from trainers.sandbox.runner import Limits, Outcome, run_program

EXIT_FAILED_TEST = 1
EXIT_NO_SANDBOX = 2


def check_program(code: str, tests: Sequence[str], limits: Limits) -> tuple[Outcome, dict]:
    """The program's outcome and its JSON report: {"results": [{"test", "passed", "reason",
    "checked"}], "error"}."""
    outcome = run_program(code, tests, limits)
    report = {
        "results": [
            {"test": test, "passed": r.passed, "reason": r.reason, "checked": r.checked}
            for test, r in zip(tests, outcome.results)
        ],
        "error": outcome.error or None,
    }
    return outcome, report


def lines(report: dict) -> list[str]:
    """The report for a person: a line per test, then the count."""
    if report["error"]:
        return [f"sandbox: {report['error']}"]
    out = []
    for r in report["results"]:
        mark = "pass" if r["passed"] else "FAIL"
        where = "compared outside the sandbox" if r["checked"] == "outside" else "checked inside the sandbox"
        out.append(f"{mark}  {r['test']}  ({where})")
        if r["reason"]:
            out.append(f"      {r['reason']}")
    passed = sum(r["passed"] for r in report["results"])
    out.append(f"{passed} of {len(report['results'])} tests passed")
    return out


def exit_status(report: dict) -> int:
    if report["error"]:
        return EXIT_NO_SANDBOX
    return 0 if all(r["passed"] for r in report["results"]) else EXIT_FAILED_TEST


def main(code: str, tests: Sequence[str], limits: Limits, as_json: bool) -> int:
    _, report = check_program(code, tests, limits)
    print(json.dumps(report) if as_json else "\n".join(lines(report)))
    return exit_status(report)

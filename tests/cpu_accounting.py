"""Where the test command's CPU goes: each test's CPU seconds, written beside the lane logs.

`pytest --durations` gives wall time, which on a 2-core machine running four lanes at once says
more about the neighbours than about the test. This plugin (loaded by `-p tests.cpu_accounting` in
pytest.ini) adds, per test, the CPU seconds (user + system) of the pytest process and of the child
processes that ended during it (a platform test's worker, beat and trainer processes, a CLI test's
subprocess), and appends one line per test to $TEST_CPU_LOG (unset: nothing is written):

    <cpu_s>\t<wall_s>\t<nodeid>

`scripts/test.sh` sets TEST_CPU_LOG to var/test-logs/cpu-<lane>.tsv; `python -m tests.cpu_report`
sums the lanes' files by test file. A child process still running at the end of a test (a
module-wide worker) is counted in the test during which it ends.
"""

from __future__ import annotations

import os
import resource
import time

import pytest


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("TEST_CPU_LOG")
    if not path:
        yield
        return
    cpu_before, wall_before = _cpu_s(), time.perf_counter()
    yield
    cpu_s, wall_s = _cpu_s() - cpu_before, time.perf_counter() - wall_before
    with open(path, "a") as log:  # one short write per line: the xdist workers of a lane share the file
        log.write(f"{cpu_s:.2f}\t{wall_s:.2f}\t{item.nodeid}\n")

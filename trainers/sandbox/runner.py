"""Run untrusted code against its tests in the sandbox, many at once, from the trainer's process.

`Sandbox(limits, concurrency)` starts one child process per program (`child.py`, under the
isolation of `isolation.py`: bubblewrap with its own file system by allow-list, namespaces, no
capabilities, a seccomp filter) from a bounded pool of threads, so at most `concurrency` run at a
time while the calling thread waits only for the batch it asked for; each child runs in a memory
cgroup of its own where the machine allows one (`memory_cgroup.py`: all of its processes and its
tmpfs under `Limits.sandbox_memory_bytes` together). Each `Outcome` has one
`TestResult` per test (passed, the reason when not, and where it was checked), or the `error` that
kept the program from running at all.

Each test is first read by `checks.parse`: one of the form `assert <expression> == <literal>` (and
the few others listed there) is checked here, outside the code's reach, against the value the
sandbox sends back (`checked == "outside"`); any other statement runs inside and passes when it
runs to its end (`checked == "inside"`: code in the same process could forge that).

The child enforces each test's limits itself; a child that overruns its whole budget anyway (every
test's wall-clock limit, plus `START_S` to start and `HANG_S` of slack) is killed with its process
group, and at most `OUTPUT_BYTES` of its answer are read; nothing the code does reaches the
calling process. Where the isolation is not available (no bubblewrap, no libseccomp, no user
namespaces, not Linux) every outcome carries that error: `validate` and `run` refuse a config
with a `code_tests` reward before anything starts (`available`, through trainers.cli), and a run
that meets it anyway fails at its first step rather than learn from rewards that say nothing.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from trainers.sandbox import checks, isolation
from trainers.sandbox.memory_cgroup import MemoryCgroup

CHILD = Path(__file__).with_name("child.py")
START_S = 1.0
"""What a child's start (Python's start-up, the namespaces) takes on an idle machine: the target
bench/sandbox.py holds an attack's outcome to, on top of its limit."""
HANG_S = 10.0
"""Slack before a child is killed from outside: the child stops a test at its own limit, so this
only ends a child that hangs outside its tests. Generous, since on a loaded machine Python's
start alone can take seconds, and a child killed from outside loses every test's result."""
OUTPUT_BYTES = 1 << 20
SANDBOX_OWN_BYTES = 64 << 20
"""What the sandbox's own program (Python and the harness, in PID 1 and each test's fork) may use
beside the code's memory."""
ERROR_BYTES = 4096
UNAVAILABLE = "the sandbox cannot isolate code here"


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one program may use. test_timeout_s: wall clock per test; cpu_s: CPU seconds per test;
    memory_bytes: address space per process; file_bytes: largest file it may write; disk_bytes:
    everything it may write (its working directory, a tmpfs); max_processes: processes and threads
    it may add (a fork bomb stops there)."""

    test_timeout_s: float = 2.0
    cpu_s: int = 2
    memory_bytes: int = 512 << 20
    file_bytes: int = 16 << 20
    disk_bytes: int = 64 << 20
    max_processes: int = 32

    def budget_s(self, tests: int) -> float:
        return START_S + HANG_S + self.test_timeout_s * max(tests, 1)

    def sandbox_memory_bytes(self) -> int:
        """The memory cgroup's limit for the whole sandbox, where the machine allows one: one
        process's address space, its tmpfs and /dev/shm filled, and SANDBOX_OWN_BYTES for the child."""
        return self.memory_bytes + self.disk_bytes + isolation.SHM_BYTES + SANDBOX_OWN_BYTES


@dataclasses.dataclass(frozen=True)
class TestResult:
    """passed; reason: why not ("" when it passed); checked: "outside" (its expression's value was
    compared here, out of the code's reach) or "inside" (a statement that ran in the sandbox)."""

    passed: bool
    reason: str = ""
    checked: str = "inside"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One program's results, in test order; `error` (and no results) when it could not run."""

    results: tuple[TestResult, ...] = ()
    error: str = ""
    seconds: float = 0.0

    @property
    def passed_fraction(self) -> float:
        return sum(r.passed for r in self.results) / len(self.results) if self.results else 0.0


def _seccomp_fd() -> int:
    """A fresh file holding the seccomp filter, at offset 0, for one bwrap to read."""
    fd = os.memfd_create("sandbox-seccomp", 0)
    os.write(fd, isolation.seccomp_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _start(job: dict, limits: Limits) -> tuple[subprocess.Popen, MemoryCgroup | None]:
    """bwrap with the child in it, in a memory cgroup of its own where the machine allows one, its
    stdin fed with the job; IsolationUnavailable when it cannot be."""
    fd = _seccomp_fd()
    cgroup = None
    try:
        args, as_nobody = isolation.command(fd, limits.disk_bytes, CHILD.read_text())
        user = {"user": isolation.NOBODY, "group": isolation.NOBODY, "extra_groups": []} if as_nobody else {}
        cgroup = MemoryCgroup.create(limits.sandbox_memory_bytes(), isolation.NOBODY if as_nobody else None)
        if cgroup is not None:
            args = cgroup.wrap(args)
        stderr = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            pass_fds=(fd,),
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            start_new_session=True,
            **user,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    finally:
        os.close(fd)
    proc.stderr = stderr  # read back only when the child gave no answer
    try:
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc, cgroup


def _read_bounded(proc: subprocess.Popen, deadline: float) -> tuple[bytes, str]:
    """Up to OUTPUT_BYTES of the child's stdout until it closes it; ('', why) when the budget ran out
    or the answer is too long (the child is killed either way)."""
    out = b""
    fd = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return out, "timeout"
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return out, ""
        out += chunk
        if len(out) > OUTPUT_BYTES:
            return b"", f"the sandbox's answer exceeded {OUTPUT_BYTES >> 20} MiB"


def run_program(code: str, tests: Sequence[str], limits: Limits) -> Outcome:
    """Run `code` then each of `tests` (Python source) in a fresh sandbox child, each test checked
    outside where its form allows (module docstring); blocks until it is done or its budget is spent."""
    started = time.monotonic()
    parsed = [checks.parse(test) for test in tests]
    job = {
        "code": code,
        "tests": [check.job() for check in parsed],
        "test_timeout_s": limits.test_timeout_s,
        "cpu_s": limits.cpu_s,
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.file_bytes,
        "max_processes": limits.max_processes,
    }
    if sys.platform != "linux":
        return Outcome(error=f"{UNAVAILABLE}: it needs Linux (bubblewrap); this is {sys.platform}")
    try:
        proc, cgroup = _start(job, limits)
    except (isolation.IsolationUnavailable, OSError) as exc:
        return Outcome(error=f"{UNAVAILABLE}: {exc}", seconds=_since(started))
    try:
        out, problem = _read_bounded(proc, started + limits.budget_s(len(tests)))
    finally:
        _kill_group(proc)
        if cgroup is not None:
            cgroup.remove()
    if problem == "timeout":
        return Outcome(
            error=f"the sandbox did not finish within {limits.budget_s(len(tests)):g} s", seconds=_since(started)
        )
    if problem:
        return Outcome(error=problem, seconds=_since(started))
    return _parse(out, parsed, _since(started), proc)


def _since(started: float) -> float:
    return time.monotonic() - started


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    proc.stdout.close()


def _stderr(proc: subprocess.Popen) -> str:
    proc.stderr.seek(0)
    text = proc.stderr.read(ERROR_BYTES).decode(errors="replace").strip()
    proc.stderr.close()
    return " ".join(text.split())


def _parse(out: bytes, parsed: list[checks.Check], seconds: float, proc: subprocess.Popen) -> Outcome:
    try:
        answer = json.loads(out.decode(errors="replace"))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        why = _stderr(proc)
        if why.startswith("bwrap:"):  # bubblewrap could not build the sandbox: nothing ran
            return Outcome(error=f"{UNAVAILABLE}: {why}", seconds=seconds)
        return Outcome(error="the sandbox gave no answer" + (f": {why}" if why else ""), seconds=seconds)
    proc.stderr.close()
    if answer.get("error"):
        return Outcome(error=str(answer["error"]), seconds=seconds)
    raw = answer.get("results")
    if not isinstance(raw, list) or len(raw) != len(parsed):
        count = len(raw) if isinstance(raw, list) else 0
        return Outcome(error=f"the sandbox answered for {count} of {len(parsed)} tests", seconds=seconds)
    return Outcome(results=tuple(_result(check, r) for check, r in zip(parsed, raw)), seconds=seconds)


def _result(check: checks.Check, raw: object) -> TestResult:
    where = "outside" if check.outside else "inside"
    if not isinstance(raw, dict):
        return TestResult(False, "the sandbox gave no result for this test", where)
    if check.outside and "value" in raw:
        try:
            value = checks.decode(raw["value"])
        except checks.NotPlain as exc:
            return TestResult(False, str(exc), where)
        passed, reason = check.verdict(value)
        return TestResult(passed, reason, where)
    passed = bool(raw.get("passed")) and not check.outside  # an outside check passes only on its value
    return TestResult(passed, str(raw.get("reason", "")), where)


class Sandbox:
    """A bounded pool: `run_many` runs programs `concurrency` at a time (default: the CPU count)."""

    def __init__(self, limits: Limits | None = None, concurrency: int | None = None):
        self.limits = limits or Limits()
        self.concurrency = max(1, concurrency or os.cpu_count() or 1)
        self._pool = concurrent.futures.ThreadPoolExecutor(self.concurrency, thread_name_prefix="sandbox")

    def run_many(self, programs: Sequence[tuple[str, Sequence[str]]]) -> list[Outcome]:
        """[(code, tests)] -> their outcomes, in order."""
        futures = [self._pool.submit(run_program, code, tests, self.limits) for code, tests in programs]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def available() -> str:
    """'' when this machine can run the sandbox, else why not (a sentence)."""
    outcome = run_program("", ["pass"], Limits(test_timeout_s=5.0))
    return outcome.error

"""Run untrusted code against its tests in the sandbox, many at once, from the trainer's process.

`Sandbox(limits, concurrency)` starts one child process per program (`child.py`: namespaces, a
read-only file system but a fresh working directory, no network, resource limits; its docstring
says how) from a bounded pool of threads, so at most `concurrency` run at a time while the calling
thread waits only for the batch it asked for. Each `Outcome` has one `TestResult` per test (passed,
and the reason when not), or the `error` that kept the program from running at all. The child
enforces each test's limits itself; a child that overruns its whole budget anyway (every test's
wall-clock limit, plus `START_S` to start and `HANG_S` of slack) is killed with its process group;
nothing the code does reaches the calling process.

Linux only (user namespaces: `unshare`); elsewhere every outcome carries that error, and the
config checks refuse a `code_tests` reward before a run starts (`available`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")
START_S = 1.0
"""What a child's start (Python's start-up, the namespaces) takes on an idle machine: the target
bench/sandbox.py holds an attack's outcome to, on top of its limit."""
HANG_S = 10.0
"""Slack before a child is killed from outside: the child stops a test at its own limit, so this
only ends a child that hangs outside its tests. Generous, since on a loaded machine Python's
start alone can take seconds, and a child killed from outside loses every test's result."""
OUTPUT_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one program may use. test_timeout_s: wall clock per test; cpu_s: CPU seconds per test;
    memory_bytes: address space per process; file_bytes: largest file it may write;
    max_processes: processes and threads it may add (a fork bomb stops there)."""

    test_timeout_s: float = 2.0
    cpu_s: int = 2
    memory_bytes: int = 512 << 20
    file_bytes: int = 16 << 20
    max_processes: int = 32

    def budget_s(self, tests: int) -> float:
        return START_S + HANG_S + self.test_timeout_s * max(tests, 1)


@dataclasses.dataclass(frozen=True)
class TestResult:
    passed: bool
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One program's results, in test order; `error` (and no results) when it could not run."""

    results: tuple[TestResult, ...] = ()
    error: str = ""
    seconds: float = 0.0

    @property
    def passed_fraction(self) -> float:
        return sum(r.passed for r in self.results) / len(self.results) if self.results else 0.0


def _hidden_folders() -> list[str]:
    """Folders covered inside the sandbox: this project's var/ (data, models, the platform's
    database and runs), PLATFORM_DATA_DIR, and this user's home unless Python itself is installed
    in it (pyenv: hiding it would hide the standard library)."""
    root = Path(__file__).resolve().parents[2]
    folders = [str(root / "var")]
    if os.environ.get("PLATFORM_DATA_DIR"):
        folders.append(os.environ["PLATFORM_DATA_DIR"])
    home = Path.home().resolve()
    pythons = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    if not any(p == home or home in p.parents for p in pythons):
        folders.append(str(home))
    return [f for f in folders if os.path.isdir(f)]


def run_program(code: str, tests: Sequence[str], limits: Limits) -> Outcome:
    """Run `code` then each of `tests` (Python source; a test passes when it runs to its end) in a
    fresh sandbox child; blocks until it is done or its budget is spent."""
    started = time.monotonic()
    job = {
        "code": code,
        "tests": list(tests),
        "test_timeout_s": limits.test_timeout_s,
        "cpu_s": limits.cpu_s,
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.file_bytes,
        "max_processes": limits.max_processes,
        "hide": _hidden_folders(),
    }
    with tempfile.TemporaryDirectory(prefix="sandbox-") as workdir:
        os.chmod(workdir, 0o777)  # the child may run as nobody
        env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(json.dumps(job).encode(), timeout=limits.budget_s(len(tests)))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Outcome(
                error=f"the sandbox did not finish within {limits.budget_s(len(tests)):g} s", seconds=_since(started)
            )
        finally:
            _kill_group(proc)
    return _parse(out[:OUTPUT_BYTES], len(tests), _since(started))


def _since(started: float) -> float:
    return time.monotonic() - started


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _parse(out: bytes, tests: int, seconds: float) -> Outcome:
    try:
        answer = json.loads(out.decode(errors="replace"))
    except ValueError:
        return Outcome(error="the sandbox gave no answer", seconds=seconds)
    if not isinstance(answer, dict):
        return Outcome(error="the sandbox gave no answer", seconds=seconds)
    if answer.get("error"):
        return Outcome(error=str(answer["error"]), seconds=seconds)
    results = tuple(TestResult(bool(r.get("passed")), str(r.get("reason", ""))) for r in answer.get("results", []))
    if len(results) != tests:
        return Outcome(error=f"the sandbox answered for {len(results)} of {tests} tests", seconds=seconds)
    return Outcome(results=results, seconds=seconds)


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
    if sys.platform != "linux":
        return f"the code sandbox needs Linux (user namespaces); this is {sys.platform}"
    outcome = run_program("", ["pass"], Limits(test_timeout_s=5.0))
    return outcome.error

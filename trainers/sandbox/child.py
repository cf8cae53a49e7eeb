"""The sandbox's child program: runs one completion's code against its tests, inside bubblewrap.

Started by `trainers.sandbox.runner` as `python -I -S -B -c <this source>` under the isolation of
`trainers.sandbox.isolation` (its own file system by allow-list, namespaces, no capabilities, a
seccomp filter), as PID 1 of its PID namespace. Standard library only; it must not import anything
of this project.

stdin: one JSON object {"code": str, "tests": [{"expression": str} | {"statement": str}],
"test_timeout_s": float, "cpu_s": int, "memory_bytes": int, "file_bytes": int, "max_processes": int}.
stdout: one JSON object {"results": [{"value": <plain JSON>} | {"passed": bool, "reason": str}]} or
{"error": str}.

Per test, a fresh fork runs the code then the test, with CPU, address-space, file-size, open-file
and process-count limits, no file descriptor but /dev/null and its own result pipe, and a
wall-clock limit enforced here (SIGKILL). An expression's test sends back the expression's value as
plain data (trainers.sandbox.checks says the encoding); the runner compares it, outside, with a
literal this program never sees. A statement's test passes when the fork reports the round's
secret after the statement ran (so code that calls exit(0) early does not pass); code in the same
process could forge that, which is why the runner marks those results as checked inside.

This program makes itself non-dumpable first, so that a test's fork cannot open its /proc/1/fd/*
(the answer's pipe) or /proc/1/mem; once every test has run, it kills whatever the code left
running (as PID 1, `kill(-1)` reaches every other process of the namespace).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import secrets
import select
import signal
import sys
import time
import traceback

PR_SET_DUMPABLE = 4
FORK_RETRY_S = 3.0
REASON_CHARS = 300
RESULT_BYTES = 64 << 10
NESTING = 64
RESULT_FD = 3
_exec = exec
_eval = eval
_compile = compile


def limit(cpu_s: int, memory_bytes: int, file_bytes: int, max_processes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    # counted per user namespace: this program and the test's fork are the 2 beside the code's own
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes + 2, max_processes + 2))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return _short(text or type(exc).__name__)


def plain(value, depth: int = 0):
    """`value` as JSON-ready plain data (trainers.sandbox.checks.decode reads it back); TypeError
    for anything but exactly None, bool, int, float, str, list, tuple, dict, set, frozenset and
    bytes (a subclass is not plain: its __eq__ could answer anything)."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if depth >= NESTING:
        raise TypeError("a value nested too deeply")
    if kind is list:
        return [plain(item, depth + 1) for item in value]
    if kind is tuple:
        return {"tuple": [plain(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        return {"set": [plain(item, depth + 1) for item in value]}
    if kind is bytes:
        return {"bytes": value.hex()}
    raise TypeError(f"a {kind.__qualname__}, not a plain value (None, bool, int, float, str, or a container of them)")


def _send(message: dict) -> None:
    os.write(RESULT_FD, json.dumps(message).encode()[:RESULT_BYTES])


def run_one(code: str, test: dict, job: dict, secret: str) -> None:
    """In the test's fork: limits, silence, then the code and the test; its answer last."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(RESULT_FD + 1, 1 << 16)
    limit(job["cpu_s"], job["memory_bytes"], job["file_bytes"], job["max_processes"])
    namespace: dict = {"__name__": "__main__"}
    try:
        _exec(_compile(code, "<completion>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the code's own failure is the test's result
        _send({"error": "the code failed: " + _describe(exc)})
        os._exit(1)
    try:
        if "expression" in test:
            value = _eval(_compile(test["expression"], "<test>", "eval"), namespace)
        else:
            _exec(_compile(test["statement"], "<test>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001
        _send({"error": _describe(exc)})
        os._exit(1)
    if "expression" not in test:
        _send({"secret": secret})
        os._exit(0)
    try:
        text = json.dumps({"value": plain(value)})
    except (TypeError, ValueError, RecursionError) as exc:
        _send({"error": f"the test's expression gave {_short(str(exc))}"})
        os._exit(1)
    if len(text) > RESULT_BYTES:
        _send({"error": f"the test's expression gave a value over {RESULT_BYTES >> 10} KiB as JSON"})
        os._exit(1)
    os.write(RESULT_FD, text.encode())
    os._exit(0)


def run_tests(job: dict) -> list[dict]:
    """Each test in a fork of its own (module docstring); results in test order."""
    results = []
    for test in job["tests"]:
        secret = secrets.token_hex(16)
        read_fd, write_fd = os.pipe()
        pid = _fork()
        if pid == 0:
            os.close(read_fd)
            try:
                os.dup2(write_fd, RESULT_FD)
                run_one(job["code"], test, job, secret)
            except BaseException as exc:  # noqa: BLE001 - the sandbox's own failure, said as such
                _send({"error": "the sandbox failed: " + _describe(exc)})
            finally:
                os._exit(3)
        os.close(write_fd)
        results.append(_wait(pid, read_fd, test, secret, job["test_timeout_s"]))
        os.close(read_fd)
        _end_leftovers()
    return results


def _fork() -> int:
    """os.fork, tried again for up to FORK_RETRY_S while the process limit is reached."""
    deadline = time.monotonic() + FORK_RETRY_S
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _read_answer(read_fd: int, data: bytes) -> dict:
    while len(data) <= RESULT_BYTES:
        ready, _, _ = select.select([read_fd], [], [], 0)
        chunk = os.read(read_fd, RESULT_BYTES) if ready else b""
        if not chunk:
            break
        data += chunk
    try:
        message = json.loads(data.decode(errors="replace")) if data else {}
    except ValueError:
        message = {}
    return message if isinstance(message, dict) else {}


def _wait(pid: int, read_fd: int, test: dict, secret: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    data = b""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"passed": False, "reason": f"timed out after {timeout_s:g} s"}
        ready, _, _ = select.select([read_fd], [], [], min(left, 0.05))
        if ready and len(data) <= RESULT_BYTES:
            data += os.read(read_fd, RESULT_BYTES) or b""
    message = _read_answer(read_fd, data)
    exited_cleanly = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    if exited_cleanly and "expression" in test and "value" in message:
        return {"value": message["value"]}
    if exited_cleanly and "statement" in test and message.get("secret") == secret:
        return {"passed": True, "reason": ""}
    if message.get("error"):
        return {"passed": False, "reason": _short(str(message["error"]))}
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
        why = " (CPU time limit)" if signum == signal.SIGXCPU else ""
        return {"passed": False, "reason": f"killed by {name}{why}"}
    return {"passed": False, "reason": f"exited with status {os.WEXITSTATUS(status)} before the test ended"}


def _end_leftovers() -> None:
    """As PID 1: kill every other process of the namespace (what the code started and left running,
    a fork bomb's), then collect them."""
    try:
        os.kill(-1, signal.SIGKILL)  # from PID 1 of a namespace: all of its processes but itself
    except ProcessLookupError:
        pass
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print(json.dumps({"error": "the sandbox could not make itself non-dumpable"}), flush=True)
        return 0
    job = json.loads(sys.stdin.read())
    try:
        results = run_tests(job)
        print(json.dumps({"results": results}), flush=True)
    except BaseException as exc:  # noqa: BLE001
        print(json.dumps({"error": f"the sandbox failed: {_describe(exc)}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

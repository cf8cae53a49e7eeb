"""The code sandbox against the attacks a policy's code may make: each ends as a failed test with its
reason, leaves nothing behind, and this process lives on. (How long each takes against its limit is
measured by bench/sandbox_attacks.py, not here: no wall-clock assertion in tests.)"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trainers.sandbox import memory_cgroup, runner
from trainers.sandbox.runner import Limits, Sandbox, run_program

REPO = Path(__file__).resolve().parents[3]

FAST = Limits(test_timeout_s=2.0, cpu_s=2, memory_bytes=256 << 20)
ADD = "def add(a, b):\n    return a + b\n"


def only(outcome):
    assert outcome.error == "", outcome.error
    (result,) = outcome.results
    return result


def test_the_fraction_of_tests_passed_and_why_the_others_failed():
    outcome = run_program(ADD, ["assert add(1, 2) == 3", "assert add(1, 1) == 3, 'one and one'", "add(1)"], FAST)
    assert [r.passed for r in outcome.results] == [True, False, False]
    assert outcome.results[1].reason == "AssertionError: one and one"
    assert outcome.results[2].reason.startswith("TypeError: add() missing 1 required positional argument")
    assert outcome.passed_fraction == pytest.approx(1 / 3)


@pytest.mark.parametrize("exit_call", ["import os; os._exit(0)", "import sys; sys.exit(0)", "raise SystemExit"])
def test_exiting_early_with_success_does_not_pass(exit_call):
    """Code that ends its process with status 0 before the test ran never reports the round's secret."""
    result = only(run_program(ADD + exit_call, ["assert add(1, 2) == 3"], FAST))
    assert not result.passed
    assert "exit" in result.reason.lower() or "SystemExit" in result.reason


def test_code_that_does_not_parse_fails_every_test_with_the_syntax_error():
    outcome = run_program("def add(a, b) return a + b", ["assert add(1, 2) == 3"] * 2, FAST)
    assert [r.passed for r in outcome.results] == [False, False]
    assert outcome.results[0].reason == "the code failed: SyntaxError: expected ':' (line 1)"


def test_an_infinite_loop_is_killed_at_the_wall_clock_limit():
    result = only(run_program("while True:\n    pass\n", ["pass"], Limits(test_timeout_s=1.0, cpu_s=10)))
    assert result == result.__class__(False, "timed out after 1 s")


def test_a_busy_loop_is_stopped_by_the_cpu_limit_first():
    # a wall-clock limit far above the CPU one: on a loaded machine the loop may get a fifth of a core
    result = only(run_program("while True:\n    pass\n", ["pass"], Limits(test_timeout_s=60.0, cpu_s=1)))
    assert not result.passed and result.reason in ("killed by SIGXCPU (CPU time limit)", "killed by SIGKILL")


def test_a_huge_allocation_fails_with_a_memory_error():
    result = only(run_program("x = bytearray(10 * 1024 ** 3)\n", ["pass"], FAST))
    assert not result.passed and result.reason == "the code failed: MemoryError"


def _processes_named(name: str) -> list[str]:
    """The pids on this machine whose command name is `name` (a name only the bomb below takes, so
    other test workers' sandboxes never count)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and open(f"/proc/{pid}/comm").read().strip() == name:
                found.append(pid)
        except OSError:
            pass
    return found


def test_a_fork_bomb_is_capped_and_nothing_outlives_the_sandbox():
    name = f"bomb{os.getpid() % 10**8}"
    bomb = (
        "import ctypes, os, time\n"
        f"ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\n"  # PR_SET_NAME: its children inherit it
        "def bomb():\n"
        "    forks = 0\n"
        "    while True:\n"
        "        try:\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(3600)\n"
        "        except OSError:\n"
        "            return forks\n"
        "        forks += 1\n"
    )
    # it may add max_processes processes of its own, then every fork fails (and it stops, here)
    outcome = run_program(bomb, ["assert bomb() == 16"], Limits(test_timeout_s=10.0, cpu_s=5, max_processes=16))
    assert only(outcome).passed, outcome
    # every process of the bomb died with the sandbox's PID namespace
    assert _processes_named(name) == []
    # a bomb that never stops ends at its time limit
    result = only(
        run_program(
            bomb + "bomb()\ntime.sleep(3600)\n", ["pass"], Limits(test_timeout_s=1.0, cpu_s=1, max_processes=16)
        )
    )
    assert result == result.__class__(False, "timed out after 1 s")
    assert _processes_named(name) == []
    # and the sandbox still works afterwards
    assert run_program(ADD, ["assert add(2, 2) == 4"], FAST).passed_fraction == 1.0


def test_writing_outside_its_directory_is_refused():
    """Its file system is read-only but its own working folder (/tmp, a tmpfs of its own)."""
    result = only(run_program("open('/usr/escaped.txt', 'w').write('x')\n", ["pass"], FAST))
    assert not result.passed and "Read-only file system" in result.reason
    assert not os.path.exists("/usr/escaped.txt")
    # its own directory is writable, and fresh for each program
    outcome = run_program("open('mine.txt', 'w').write('x')\n", ["assert open('mine.txt').read() == 'x'"], FAST)
    assert outcome.passed_fraction == 1.0
    assert run_program("import os\n", ["assert os.listdir('.') == []"], FAST).passed_fraction == 1.0


def test_no_network_not_even_this_machine():
    accepted = []
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(3)

    def serve():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')\n"
    result = only(run_program(code, ["pass"], FAST))
    thread.join()
    server.close()
    # the sandbox's network namespace has its own loopback and nothing else: no one listens there
    assert result == result.__class__(False, "the code failed: ConnectionRefusedError: [Errno 111] Connection refused")
    assert accepted == []
    interfaces = run_program("import socket\n", ["assert [n for _, n in socket.if_nameindex()] == ['lo']"], FAST)
    assert interfaces.passed_fraction == 1.0, interfaces


def test_killing_its_parent_or_this_process_fails():
    code = f"import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill({os.getpid()}, signal.SIGKILL)\n"
    result = only(run_program(code, ["pass"], FAST))
    assert not result.passed and result.reason.startswith("the code failed: ProcessLookupError")
    # the sandbox's PID 1 ignored the signal: the next test of the same program still ran
    outcome = run_program("import os, signal\nos.kill(1, signal.SIGKILL)\n", ["pass", "pass"], FAST)
    assert outcome.passed_fraction == 1.0


def test_the_pool_runs_many_programs_and_keeps_their_order():
    sandbox = Sandbox(FAST, concurrency=2)
    try:
        programs = [(f"def f():\n    return {i}\n", [f"assert f() == {i}", "assert f() == -1"]) for i in range(6)]
        outcomes = sandbox.run_many(programs)
    finally:
        sandbox.close()
    assert [[r.passed for r in o.results] for o in outcomes] == [[True, False]] * 6


class _CountingOs:
    """The os module as the runner sees it, counting the bytes its reads return."""

    def __init__(self):
        self.read_bytes = 0

    def __getattr__(self, name):
        return getattr(os, name)

    def read(self, fd, n):
        data = os.read(fd, n)
        self.read_bytes += len(data)
        return data


def test_an_answer_over_output_bytes_is_refused_and_read_no_further(monkeypatch, tmp_path):
    """A sandbox child whose answer (its stdout) is a well-formed pass four times OUTPUT_BYTES long:
    the runner stops reading a read past OUTPUT_BYTES and answers an error; read whole, the answer
    would have counted as a pass."""
    flood = tmp_path / "flood.py"
    flood.write_text(
        "import json, sys\n"
        f"answer = {{'results': [{{'passed': True, 'reason': 'x' * {4 * runner.OUTPUT_BYTES}}}]}}\n"
        "sys.stdout.buffer.write(json.dumps(answer).encode())\n"
        "sys.stdout.buffer.flush()\n"
    )
    monkeypatch.setattr(runner, "CHILD", flood)  # its source runs in the sandbox as the child would
    counting = _CountingOs()
    monkeypatch.setattr(runner, "os", counting)
    outcome = run_program("", ["pass"], FAST)
    assert (outcome.error, outcome.results) == (f"the sandbox's answer exceeded {runner.OUTPUT_BYTES >> 20} MiB", ())
    assert runner.OUTPUT_BYTES < counting.read_bytes <= runner.OUTPUT_BYTES + (1 << 16)


PARENT = """
import sys
from trainers.sandbox.runner import Limits, run_program
run_program(sys.argv[1], ["pass"], Limits(test_timeout_s=3600.0))
"""


def _running(name: str) -> list[str]:
    """`_processes_named(name)` but the zombies (dead, not yet collected)."""
    alive = []
    for pid in _processes_named(name):
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(pid)
        except OSError:
            pass
    return alive


def _until(condition, seconds: float) -> bool:
    """Polls `condition` until it holds or `seconds` have passed: whether it held."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_the_sandbox_dies_with_the_process_that_started_it(tmp_path):
    """bubblewrap's --die-with-parent: a trainer killed with SIGKILL (no cleanup of its own runs)
    takes its sandboxes' processes with it; the code's sleep, an hour long, ends with it."""
    name = f"orphan{os.getpid() % 10**8}"
    code = f"import ctypes, time\nctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\ntime.sleep(3600)\n"
    log = tmp_path / "parent.log"
    with open(log, "wb") as stderr:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, code], cwd=REPO, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr
        )
    try:
        assert _until(lambda: _running(name) or parent.poll() is not None, 120)
        assert _running(name), f"the sandbox never started: {log.read_text()[-2000:]}"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _until(lambda: not _running(name), 30), f"still running after its parent died: {_running(name)}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in _running(name):  # only on a failure: this test's own sandboxed processes
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        for parent_folder, _, _ in memory_cgroup._candidates():  # the killed runner could not remove its cgroup
            for folder in parent_folder.glob(f"grpo-sandbox-{parent.pid}-*"):
                memory_cgroup._rmdir(folder)

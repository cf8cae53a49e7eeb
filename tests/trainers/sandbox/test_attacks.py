"""The code sandbox against code that tries to get out, or to pass tests it fails, under a trainer run
as root and under one run as an ordinary user (`nobody` here, as a production worker should be).

Each attack is a program the sandbox runs; the test says what the attack would have got on the old,
hand-made sandbox and asserts it gets nothing now. The non-root worker runs the same runner in a
process of user nobody, with the system's Python (pyenv's, in root's home, is not readable by it)."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from trainers.sandbox import memory_cgroup
from trainers.sandbox.runner import Limits, run_program

REPO = Path(__file__).resolve().parents[3]
SITE = next((REPO / ".venv" / "lib").glob("python3*/site-packages"))
FAST = Limits(test_timeout_s=5.0, cpu_s=5, memory_bytes=256 << 20, disk_bytes=8 << 20)
NOBODY = 65534
WORKER_SCRIPT = """
import dataclasses, json, sys
from trainers.sandbox import memory_cgroup
from trainers.sandbox.runner import Limits, run_program
job = json.loads(sys.stdin.read())
outcome = run_program(job["code"], job["tests"], Limits(**job["limits"]))
print(json.dumps(dataclasses.asdict(outcome)))
"""


def _as_nobody(code: str, tests: list[str], limits: Limits) -> dict:
    """The runner in a process of user nobody (a non-root worker): its outcome as a dict."""
    job = {"code": code, "tests": tests, "limits": {f: getattr(limits, f) for f in limits.__dataclass_fields__}}
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", WORKER_SCRIPT],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{SITE}", "PYTHONDONTWRITEBYTECODE": "1"},
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _in_process(code: str, tests: list[str], limits: Limits) -> dict:
    outcome = run_program(code, tests, limits)
    return {
        "error": outcome.error,
        "results": [{"passed": r.passed, "reason": r.reason, "checked": r.checked} for r in outcome.results],
    }


@pytest.fixture(params=["root", "nobody"])
def sandbox(request):
    """run(code, tests, limits=FAST) -> the outcome as a dict, under a root or a non-root worker."""
    if request.param == "root" and os.getuid() != 0:
        return _in_process  # the tests run as an ordinary user: both cases are that user's
    return _in_process if request.param == "root" else _as_nobody


def results(outcome: dict) -> list[tuple[bool, str]]:
    assert outcome["error"] == "", outcome["error"]
    return [(r["passed"], r["reason"]) for r in outcome["results"]]


def test_the_code_has_no_capabilities_no_new_privileges_and_a_seccomp_filter(sandbox):
    code = "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
    tests = [
        "assert status['CapEff'].strip() == '0000000000000000'",
        "assert status['CapBnd'].strip() == '0000000000000000'",
        "assert status['NoNewPrivs'].strip() == '1'",
        "assert status['Seccomp'].strip() == '2'",
    ]
    assert results(sandbox(code, tests, FAST)) == [(True, "")] * 4


SYSCALLS = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return 0 if result == 0 else ctypes.get_errno()
"""


def test_mounts_and_namespaces_are_refused(sandbox):
    """The old sandbox let the code umount2() the empty file system over the data folder and remount
    / read-write: every such call now answers EPERM."""
    tests = [
        "assert errno_of(libc.umount2(b'/tmp', 2)) == errno.EPERM",
        "assert errno_of(libc.umount2(b'/usr', 2)) == errno.EPERM",
        "assert errno_of(libc.mount(None, b'/', None, 0x20 | 0x1000, None)) == errno.EPERM",  # remount rw
        "assert errno_of(libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, b'size=2g')) == errno.EPERM",
        "assert errno_of(libc.unshare(0x10000000)) == errno.EPERM",  # a user namespace of its own
        "assert errno_of(libc.unshare(0x00020000)) == errno.EPERM",  # a mount namespace
        "assert errno_of(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)) == errno.EPERM",  # clone(CLONE_NEWUSER)
        "assert errno_of(libc.syscall(101, 16, 1, 0, 0)) == errno.EPERM",  # ptrace(PTRACE_ATTACH, 1)
        "assert errno_of(libc.syscall(155, b'/tmp', b'/tmp')) == errno.EPERM",  # pivot_root
        "assert errno_of(libc.chroot(b'/tmp')) == errno.EPERM",
    ]
    assert results(sandbox(SYSCALLS, tests, FAST)) == [(True, "")] * len(tests)


def test_no_unix_socket_of_the_host_is_reachable(sandbox):
    """PostgreSQL's socket answered 'trust' to the old sandbox; no AF_UNIX socket can be made now, and
    the host's socket folders are not there at all."""
    code = (
        "import os, socket\n"
        "def refused():\n"
        "    try:\n"
        "        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "    except PermissionError:\n"
        "        return True\n"
        "    return False\n"
    )
    tests = [
        "assert refused()",
        "assert os.path.exists('/run/postgresql') is False",
        "assert os.path.exists('/var/run') is False",
        "assert os.path.exists('/tmp/.s.PGSQL.5432') is False",
    ]
    assert results(sandbox(code, tests, FAST)) == [(True, "")] * len(tests)


def test_only_the_allowed_folders_exist_whatever_the_spelling(sandbox, tmp_path, monkeypatch):
    """Hidden by allow-list: the data folder (absolute or relative), a dataset folder outside it, the
    models folder, the SQLite file, the project and every home are simply not in the sandbox's file
    system, by any path to them."""
    secret_dir = Path(tempfile.mkdtemp(prefix="sandbox-secret-", dir="/tmp"))
    try:
        (secret_dir / "platform.sqlite3").write_text("password hashes")
        (secret_dir / "secret_key").write_text("key")
        os.chmod(secret_dir / "secret_key", 0o600)
        os.chown(secret_dir, NOBODY, NOBODY)
        os.chown(secret_dir / "secret_key", NOBODY, NOBODY)
        monkeypatch.setenv("PLATFORM_DATA_DIR", os.path.relpath(secret_dir))
        monkeypatch.setenv("PLATFORM_SQLITE_PATH", str(secret_dir / "platform.sqlite3"))
        paths = [
            str(secret_dir / "platform.sqlite3"),
            str(secret_dir / "secret_key"),
            str(REPO / "var"),
            str(REPO / "trainers"),
            "/root",
            "/home",
            "/etc/passwd",
            "/work",
        ]
        spellings = []
        for path in paths:
            spellings += [
                path,
                "//" + path.lstrip("/"),
                "/usr/.." + path,
                "/proc/1/root" + path,
                "/proc/self/root" + path,
            ]
            spellings.append("../" * 8 + path.lstrip("/"))
        code = "import os\n"
        tests = [f"assert os.path.exists({p!r}) is False" for p in spellings]
        tests.append("assert sorted(os.listdir('/')) == ['bin', 'dev', 'lib', 'lib64', 'proc', 'sbin', 'tmp', 'usr']")
        assert results(sandbox(code, tests, FAST)) == [(True, "")] * len(tests)
    finally:
        shutil.rmtree(secret_dir)


def test_the_disk_limit_holds_and_nothing_written_outlives_the_run(sandbox):
    """The old sandbox's code mounted a tmpfs of its own (1.5 GB against a 512 MiB limit) and left
    files behind after a remount: its working folder is now a tmpfs of `disk_bytes`, the only
    writable place beside a 1 MiB /dev/shm, and both vanish with it."""
    mark = f"sandbox-mark-{os.getpid()}"
    code = (
        "import errno\n"
        "def fill(path, size):\n"
        "    try:\n"
        "        with open(path, 'wb') as f:\n"
        "            for _ in range(size >> 20):\n"
        "                f.write(b'x' * (1 << 20))\n"
        "    except OSError as exc:\n"
        "        return exc.errno\n"
        "    return 0\n"
        f"open('/tmp/{mark}', 'w').write('x')\n"
        f"open('/dev/shm/{mark}', 'w').write('x')\n"
    )
    tests = [
        "assert fill('/tmp/big', 16 << 20) == errno.ENOSPC",  # FAST's disk_bytes is 8 MiB
        "assert fill('/dev/shm/big', 4 << 20) == errno.ENOSPC",
        "assert fill('/dev/big', 1 << 20) == errno.EROFS",
        "assert fill('/usr/big', 1 << 20) == errno.EROFS",
    ]
    assert results(sandbox(code, tests, Limits(**{**FAST.__dict__, "file_bytes": 64 << 20}))) == [(True, "")] * 4
    assert not os.path.exists(f"/tmp/{mark}") and not os.path.exists(f"/dev/shm/{mark}")
    # a second program starts with an empty working folder
    check = ["assert os.listdir('/tmp') == []", "assert os.listdir('/dev/shm') == []"]
    assert results(sandbox("import os\n", check, FAST)) == [(True, "")] * 2


def test_the_answer_channel_and_the_sandbox_process_are_out_of_reach(sandbox):
    """On a non-root worker the old sandbox's code wrote forged JSON to /proc/1/fd/1 and flooded it
    (the runner grew to 1.1 GiB): the sandbox's PID 1 is not dumpable, so none of its files are open
    to the code."""
    code = (
        "import os\n"
        "def blocked(path, mode):\n"
        "    try:\n"
        "        open(path, mode)\n"
        "    except PermissionError:\n"
        "        return True\n"
        "    return False\n"
    )
    tests = [
        "assert blocked('/proc/1/fd/1', 'w')",
        "assert blocked('/proc/1/fd/0', 'r')",
        "assert blocked('/proc/1/mem', 'rb')",
        "assert blocked('/proc/1/environ', 'rb')",
    ]
    assert results(sandbox(code, tests, FAST)) == [(True, "")] * 4


ADD_WRONG = "def add(a, b):\n    return a - b\n"
TESTS = ["assert add(1, 1) == 2", "assert add(2, 3) == 5"]
FORGERIES = {
    "the pass secret from the harness's frame, written to the result pipe": (
        "import sys, os, json\n"
        "frame = sys._getframe(0)\n"
        "while frame is not None:\n"
        "    if 'secret' in frame.f_locals:\n"
        "        os.write(3, json.dumps({'secret': frame.f_locals['secret']}).encode())\n"
        "        os._exit(0)\n"
        "    frame = frame.f_back\n"
    ),
    "exec and eval replaced before the test runs": (
        "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.eval = lambda *a, **k: True\n"
    ),
    "forged answers written to the sandbox's stdout": (
        "import json\n"
        "for path in ('/proc/1/fd/1', '/proc/self/fd/1', '/dev/stdout'):\n"
        "    try:\n"
        "        open(path, 'w').write(json.dumps({'results': [{'passed': True, 'reason': ''}] * 2}))\n"
        "    except OSError:\n"
        "        pass\n"
    ),
    "an object equal to everything": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b):\n    return Anything()\n"
    ),
    "an int that is equal to everything": (
        "class Int(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Int(0)\n"
    ),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_failing_program_cannot_forge_a_pass(sandbox, forgery):
    """Tests of the form `assert <expression> == <literal>` are compared outside: the expected value
    never enters the sandbox, so no trick inside can make a wrong answer pass."""
    outcome = sandbox(ADD_WRONG + FORGERIES[forgery], TESTS, FAST)
    assert outcome["error"] == "", outcome["error"]
    assert [r["passed"] for r in outcome["results"]] == [False, False], outcome["results"]
    assert [r["checked"] for r in outcome["results"]] == ["outside", "outside"]


def test_a_statement_test_is_marked_as_checked_inside(sandbox):
    """A test that is not of a form compared outside still runs, and says so: the frame forgery
    above does pass it, which is why its result is marked."""
    tests = ["assert add(1, 1) == 2 or add(1, 1) == 3", "for n in range(3):\n    assert add(n, 0) == n"]
    outcome = sandbox("def add(a, b):\n    return a + b\n", tests, FAST)
    assert [(r["passed"], r["checked"]) for r in outcome["results"]] == [(True, "inside"), (True, "inside")]


ALLOCATORS = """
import os, time
def survivors(n, mib):
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            block = bytearray(mib << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(0.5)
            os._exit(0)
        pids.append(pid)
    return sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)
"""


def test_a_fork_bomb_of_allocators_shares_one_memory_limit():
    """The address-space limit is per process: six children of 200 MiB each under a 256 MiB limit
    would take 1.2 GiB. A trainer run as root (as the tests are) puts each sandbox in a memory cgroup
    of its own, so together they get memory_bytes + disk_bytes + 65 MiB, and all but one are killed.
    (An ordinary user without a delegated cgroup has the per-process limits only: docs/rewards.md.)"""
    assert os.getuid() == 0, "the tests run as root on this project's machines"
    limits = Limits(test_timeout_s=20.0, cpu_s=20, memory_bytes=256 << 20, disk_bytes=8 << 20)
    assert limits.sandbox_memory_bytes() == (256 + 8 + 1 + 64) << 20
    outcome = _in_process(ALLOCATORS, ["assert survivors(6, 200) <= 1", "assert survivors(1, 200) == 1"], limits)
    assert results(outcome) == [(True, ""), (True, "")]
    parents = [parent for parent, _, _ in memory_cgroup._candidates()]
    assert parents  # this machine has a memory hierarchy the sandbox used
    leftovers = [p for parent in parents for p in parent.glob(f"grpo-sandbox-{os.getpid()}-*")]
    assert leftovers == []  # each sandbox's cgroup is removed after it

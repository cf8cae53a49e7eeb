"""The sandbox's child program: runs one completion's code against its tests, isolated.

Run as `python -I -S -B child.py` (no site-packages, no environment, no user site) by
`trainers.sandbox.runner`, with a fresh empty working directory and a clean environment. Standard
library only; it must not import anything of this project.

stdin: one JSON object {"code": str, "tests": [str], "test_timeout_s": float, "cpu_s": int,
"memory_bytes": int, "file_bytes": int, "max_processes": int, "hide": [str]}. stdout: one JSON object
{"results": [{"passed": bool, "reason": str}], "isolation": str} or {"error": str}.

How it isolates (Linux):
  1. as root, it first becomes `nobody` (so the process-count limit applies and nothing of root's
     is writable);
  2. new user, mount, network and PID namespaces (`unshare`): no network interface but a loopback
     that is down, so every connection fails; this program is PID 1 of its namespace, so every
     process the code starts dies with it, and no process outside can be seen or signalled;
  3. every mount read-only except the working directory (a bind mount of it, writable); a /proc of
     its own PID namespace; the folders the job names in "hide" (the platform's data, the user's
     home) covered by empty read-only file systems;
  4. per test, a fresh fork runs the code then the test, with CPU, address-space, file-size,
     open-file and process-count limits, stdout and stderr sent to /dev/null, and a wall-clock
     limit enforced here (SIGKILL).
A test passes only when the fork reports the round's secret after the test ran, so code that calls
exit(0) or os._exit(0) early does not pass.
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

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_NOEXEC = 0x8
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 0x400,
    "nodiratime": 0x800,
    "relatime": 0x200000,
    "strictatime": 1 << 24,
}
"""A mount's locked flags must be given again when it is remounted read-only, or the kernel refuses."""
NOBODY = 65534
PR_SET_DUMPABLE = 4
FORK_RETRY_S = 3.0
REASON_CHARS = 300
RESULT_BYTES = 4096


class IsolationError(RuntimeError):
    """The sandbox could not isolate the code: nothing is run."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise IsolationError(f"{what}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mounts() -> dict[str, int]:
    """Every mount point of this mount namespace and its per-mount flags, from /proc/self/mountinfo
    (fields 5 and 6)."""
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            flags = 0
            for option in fields[5].split(","):
                flags |= MOUNT_OPTION_FLAGS.get(option, 0)
            mounts[fields[4].replace("\\040", " ")] = flags
    return mounts


def _count_tasks(uid: int) -> int:
    """Processes and threads of `uid` on this machine (RLIMIT_NPROC counts both)."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def isolate(workdir: str, hide: list[str]) -> int:
    """Steps 1 to 3 of the module docstring (the /proc of the PID namespace comes in `mount_proc`,
    inside it). Returns how many processes and threads this user already has. IsolationError when
    the kernel refuses a step."""
    libc = _libc()
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # a changed user is not dumpable: /proc/self/*_map would be root's
    uid, gid = os.getuid(), os.getgid()
    tasks = _count_tasks(uid)
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID), "unshare (user namespaces)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    work = workdir.encode()
    _check(libc.mount(work, work, None, MS_BIND | MS_REC, None), "bind mount of the working directory")
    for path in hide:
        if os.path.isdir(path) and not workdir.startswith(path.rstrip("/") + "/"):
            _check(
                libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, b"size=4k"),
                f"hide {path}",
            )
    for point, flags in sorted(_mounts().items(), key=lambda item: len(item[0])):
        if point == workdir:
            continue
        # a mount this user cannot change (one of proc's own) stays as it is; the probe below checks
        libc.mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None)
    probe = os.path.join(os.path.dirname(workdir) or "/", f".sandbox-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY, 0o600)
    except OSError:
        pass
    else:
        os.close(fd)
        os.unlink(probe)
        raise IsolationError(f"the file system outside {workdir} is still writable")
    return tasks


def mount_proc() -> None:
    """A /proc that shows only this PID namespace (the code cannot read other processes' details)."""
    _check(_libc().mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def limit(cpu_s: int, memory_bytes: int, file_bytes: int, max_processes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def run_one(code: str, test: str, job: dict, secret: str, out_fd: int) -> None:
    """In the test's fork: limits, silence, then the code and the test; the secret only at the end."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    limit(job["cpu_s"], job["memory_bytes"], job["file_bytes"], job["max_processes"])
    namespace: dict = {"__name__": "__main__"}
    try:
        exec(compile(code, "<completion>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the code's own failure is the test's result
        os.write(out_fd, json.dumps({"error": "the code failed: " + _describe(exc)}).encode()[:RESULT_BYTES])
        os._exit(1)
    try:
        exec(compile(test, "<test>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001
        os.write(out_fd, json.dumps({"error": _describe(exc)}).encode()[:RESULT_BYTES])
        os._exit(1)
    os.write(out_fd, json.dumps({"secret": secret}).encode())
    os._exit(0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno})"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return _short(text or type(exc).__name__)


def run_tests(job: dict) -> list[dict]:
    """Each test in a fork of its own (module docstring, step 4); results in test order."""
    results = []
    for test in job["tests"]:
        secret = secrets.token_hex(16)
        read_fd, write_fd = os.pipe()
        pid = _fork()
        if pid == 0:
            os.close(read_fd)
            try:
                run_one(job["code"], test, job, secret, write_fd)
            except BaseException as exc:  # noqa: BLE001 - the sandbox's own failure, said as such
                os.write(
                    write_fd, json.dumps({"error": "the sandbox failed: " + _describe(exc)}).encode()[:RESULT_BYTES]
                )
            finally:
                os._exit(3)
        os.close(write_fd)
        results.append(_wait(pid, read_fd, secret, job["test_timeout_s"]))
        os.close(read_fd)
        _end_leftovers()
    return results


def _fork() -> int:
    """os.fork, tried again for up to FORK_RETRY_S while the process limit is reached (another
    sandbox's fork bomb holds the user's shared slots until its test ends and its namespace dies)."""
    deadline = time.monotonic() + FORK_RETRY_S
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _wait(pid: int, read_fd: int, secret: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    data = b""
    status = None
    while True:
        done, status_now = os.waitpid(pid, os.WNOHANG)
        if done:
            status = status_now
            break
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"passed": False, "reason": f"timed out after {timeout_s:g} s"}
        ready, _, _ = select.select([read_fd], [], [], min(left, 0.05))
        if ready and len(data) < RESULT_BYTES:
            data += os.read(read_fd, RESULT_BYTES) or b""
    while len(data) < RESULT_BYTES:
        ready, _, _ = select.select([read_fd], [], [], 0)
        chunk = os.read(read_fd, RESULT_BYTES) if ready else b""
        if not chunk:
            break
        data += chunk
    try:
        message = json.loads(data.decode(errors="replace")) if data else {}
    except ValueError:
        message = {}
    if not isinstance(message, dict):
        message = {}
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and message.get("secret") == secret:
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


PRELOADED = (
    "abc", "array", "base64", "bisect", "cmath", "collections", "contextlib", "copy", "dataclasses",
    "datetime", "decimal", "encodings.idna", "enum", "fractions", "functools", "hashlib", "heapq", "io",
    "itertools", "math", "numbers", "operator", "random", "re", "socket", "statistics", "string", "struct",
    "textwrap", "typing", "unicodedata",
)  # fmt: skip
"""Standard modules imported before the sandbox drops root: run as root, it becomes `nobody`, who may
not read a Python installed in root's home (pyenv); these stay importable whatever the code asks."""


def main() -> int:
    if os.getuid() == 0:
        for name in PRELOADED:
            __import__(name)
    job = json.loads(sys.stdin.read())
    workdir = os.getcwd()
    try:
        tasks = isolate(workdir, job.get("hide", []))
    except (IsolationError, OSError) as exc:
        print(json.dumps({"error": f"the sandbox cannot isolate code here: {exc}"}), flush=True)
        return 0
    job["max_processes"] += tasks  # the limit counts every process of the user, these too
    pid = _fork()  # the first child is PID 1 of the new PID namespace
    if pid == 0:
        try:
            mount_proc()
            os.chdir(workdir)
            results = run_tests(job)
            print(json.dumps({"results": results, "isolation": "namespaces"}), flush=True)
        except BaseException as exc:  # noqa: BLE001
            print(json.dumps({"error": f"the sandbox failed: {_describe(exc)}"}), flush=True)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return 0 if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main())

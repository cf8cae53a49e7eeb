"""How the sandbox's child is isolated: bubblewrap's command line and the seccomp filter it installs.

The child runs under `bwrap` (Debian's bubblewrap, what Flatpak uses), which builds, before it
starts the child:

  - a file system of its own, by allow-list: an empty root holding only /usr (read-only: the
    system's libraries), the Python install the child runs with (read-only), a /proc of its own PID
    namespace, a minimal /dev (null, zero, random, urandom...; read-only), and a tmpfs of
    `disk_bytes` as its working directory /tmp. Nothing else of the host exists in there: no
    project folder, no data folder, no home, no /etc, no /run (so no host Unix socket); the whole
    file system is read-only but /tmp and a 1 MiB /dev/shm, and both vanish with the sandbox;
  - new user, PID, network, IPC, UTS and cgroup namespaces: the code runs as uid 65534 of its own
    user namespace, sees only its own processes, and has a network of its own with nothing on it;
  - no capabilities at all, `no_new_privs`, no further user namespaces, a new session (no
    terminal to inject into), and death with its parent (`--die-with-parent`);
  - a seccomp filter (`seccomp_program`) that answers EPERM to the system calls that change mounts,
    namespaces or another process (mount, umount2, pivot_root, chroot, unshare, setns, ptrace, the
    process_vm_* calls...), to the kernel's key store, bpf, perf, io_uring and module calls, to
    `clone` with any namespace flag, and to `socket(AF_UNIX)`; `clone3` answers ENOSYS, so that
    libc falls back to `clone`, whose flags the filter can read. System calls of another
    architecture's ABI kill the process.

When the trainer runs as root, bubblewrap itself is started as user `nobody` (65534), so that the
code's processes are nobody's on the host too; if nobody cannot read this Python install (pyenv in
root's home), the child runs with the system's /usr/bin/python3 instead (it needs only the standard
library). Where bubblewrap or libseccomp is missing, or the kernel refuses user namespaces,
`command` raises IsolationUnavailable and nothing runs.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

NOBODY = 65534
WORKDIR = "/tmp"
SHM_BYTES = 1 << 20

DENIED_CALLS = (
    # mounts and the root
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    # namespaces
    "unshare", "setns",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # the kernel's keys, programs, counters, asynchronous I/O that bypasses this filter
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # file handles that bypass paths, modules, the machine itself
    "open_by_handle_at", "name_to_handle_at", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog",
    "personality",
)  # fmt: skip
"""System calls the sandbox's code is refused (EPERM), beside `clone` with a namespace flag,
`socket(AF_UNIX)` and `clone3` (ENOSYS)."""

CLONE_NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
AF_UNIX = 1


class IsolationUnavailable(RuntimeError):
    """This machine cannot isolate the code (a sentence saying why): nothing is run."""


@functools.cache
def seccomp_program() -> bytes:
    """The compiled BPF filter (module docstring) that bwrap's `--seccomp` installs, built with
    libseccomp (through `pyseccomp`) for this machine's architecture."""
    try:
        import pyseccomp as seccomp  # lazy: loads libseccomp.so through ctypes, only where a sandbox runs
    except (ImportError, OSError, RuntimeError) as exc:
        raise IsolationUnavailable(f"the sandbox's seccomp filter needs libseccomp (pyseccomp): {exc}") from None
    refuse = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED_CALLS:
        rules.add_rule(refuse, name)
    for flag_bit in range(32):  # any one of the namespace flags set refuses the call
        bit = 1 << flag_bit
        if CLONE_NAMESPACE_FLAGS & bit:
            rules.add_rule(refuse, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, bit, bit))
    rules.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.EQ, AF_UNIX))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


def _world_readable(path: Path) -> bool:
    """Whether a user with no rights of its own could reach and read `path` (o+x on every folder
    above it, o+r on it)."""
    for folder in path.parents:
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def interpreter(as_nobody: bool) -> tuple[str, list[str]]:
    """The Python the child runs with, and the folders outside /usr it needs bound read-only:
    this process's own Python install, or the system's /usr/bin/python3 when `nobody` (as which the
    sandbox runs under a root trainer) cannot read ours."""
    executable = Path(os.path.realpath(sys.executable))
    prefix = Path(os.path.realpath(sys.base_prefix))
    if not as_nobody or (_world_readable(executable) and _world_readable(prefix)):
        return str(executable), [] if prefix.is_relative_to("/usr") else [str(prefix)]
    system = shutil.which("python3", path="/usr/bin")
    if system and _world_readable(Path(os.path.realpath(system))):
        return os.path.realpath(system), []
    raise IsolationUnavailable(
        f"the sandbox runs as nobody, who can read neither {executable} nor a system /usr/bin/python3"
    )


def bwrap() -> str:
    path = shutil.which("bwrap")
    if not path:
        raise IsolationUnavailable(
            "the code sandbox needs bubblewrap (bwrap): ./scripts/setup.sh installs it, or apt-get install bubblewrap"
        )
    return path


def command(seccomp_fd: int, disk_bytes: int, child_source: str) -> tuple[list[str], bool]:
    """bwrap's command line for one child (module docstring), reading the filter from `seccomp_fd`
    (passed to it), and whether it must be started as user nobody (this process is root)."""
    as_nobody = os.getuid() == 0
    python, extra_folders = interpreter(as_nobody)
    args = [
        bwrap(),
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid", str(NOBODY),
        "--gid", str(NOBODY),
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--cap-drop", "ALL",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/sbin", "/sbin",
    ]  # fmt: skip
    for folder in extra_folders:
        args += ["--ro-bind", folder, folder]
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--size", str(disk_bytes), "--tmpfs", WORKDIR,
        "--chdir", WORKDIR,
        "--remount-ro", "/",
        "--seccomp", str(seccomp_fd),
        "--clearenv",
        "--setenv", "HOME", WORKDIR,
        "--setenv", "TMPDIR", WORKDIR,
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "LANG", "C.UTF-8",
        "--",
        python, "-I", "-S", "-B", "-c", child_source,
    ]  # fmt: skip
    return args, as_nobody

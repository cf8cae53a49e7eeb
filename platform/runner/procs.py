"""Small process helpers shared by the supervisor, the trainer child and `serve` (Linux first).

- `die_with_parent(sig)`: ask the kernel to send `sig` to this process when its parent exits
  (prctl PR_SET_PDEATHSIG); a no-op where prctl is missing.
- `signal_group`: signal a child and everything in its process group.
- `tail_text(path, max_lines)`: the last lines of a log file.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1
# The supervisor's pid, in its trainer child's environment (the child stops if it is orphaned).
SUPERVISOR_PID_ENV = "PLATFORM_SUPERVISOR_PID"


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send `sig` to this process when its parent thread exits. Returns whether it
    took effect (Linux only). Survives exec, so it can be called in a preexec_fn too."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # this process's own symbols: libc is among them
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the process group `proc` leads (started with start_new_session), which may
    outlive `proc` itself; to `proc` alone if it leads no group."""
    try:
        os.killpg(proc.pid, sig)
        return
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def tail_text(path: str | os.PathLike, max_lines: int = 30, max_bytes: int = 64_000) -> str:
    """The last `max_lines` lines of a text file (reading at most `max_bytes` from its end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-max_lines:])

"""`HostProcess`: the Ray actor that runs one host's trainer process of a multi-host run.

The actor itself stays small: it starts the trainer as a CHILD process (`jax.distributed` initialises
once per process, and a child's memory, the accelerator's included, is freed when it exits), then
answers `poll()` and `signal()` from the gang's driver (runner.ray_gang). The child dies with the
actor (PR_SET_PDEATHSIG), so a killed actor, or a driver whose actors Ray cleans up, leaves no
trainer behind.

This module imports only the standard library (and Ray inside methods): the driver registers it to
be pickled by value, so a Ray worker on another host needs no `platform/` on its sys.path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: the kernel SIGKILLs the child when the actor's thread that started it exits."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


class HostProcess:
    """One host of a gang: its node's address, a free port for process 0's coordinator, and the
    trainer child (start / poll / signal). Ray calls these one at a time (max_concurrency 1)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None

    def node(self) -> dict:
        """Where this actor runs: {"ip", "hostname", "pid", "node_id"}."""
        import ray

        return {
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    def free_port(self) -> int:
        """A TCP port free on this host now (for process 0's jax.distributed coordinator)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def start(self, argv: list[str], env_changes: dict[str, str | None], cwd: str, log_path: str) -> int:
        """Start the trainer child: this actor's environment with `env_changes` applied (None removes
        a variable), output appended to `log_path`, leading a process group of its own. Returns its pid."""
        env = dict(os.environ)
        for key, value in env_changes.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                process_group=0,
            )
        return self.proc.pid

    def poll(self) -> int | None:
        """The child's exit code (negative: killed by that signal), or None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def signal(self, signum: int) -> None:
        """Send `signum` to the child (SIGKILL: to its whole process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            if signum == signal.SIGKILL:
                os.killpg(self.proc.pid, signum)
            else:
                self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

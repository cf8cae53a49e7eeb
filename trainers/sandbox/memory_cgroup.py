"""A memory cgroup around one sandbox, where this process may make one: every process the code
starts, and what it writes to its tmpfs, count against one limit together (an address-space limit
alone is per process, so a fork bomb of allocators could take memory_bytes times max_processes).

`MemoryCgroup.create(limit_bytes, owner_uid)` makes a child of this process's own memory cgroup
(cgroup v2 where the memory controller is enabled for children, else v1's memory hierarchy), sets
its limit (with swap, on v1, where the kernel counts it), and gives it to `owner_uid`, the user the
sandbox is started as, so that the sandbox's first process can move itself in (`wrap`). It answers
None where the machine does not allow it (no such hierarchy, no right to write there: an ordinary
user without a delegated cgroup); the sandbox then runs with its per-process limits alone.
`remove` deletes the cgroup once its processes are gone.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
REMOVE_WAIT_S = 2.0
_names = itertools.count()


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy, from /proc/self/cgroup: {"": v2 path, "memory": v1 path}."""
    paths = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _candidates() -> list[tuple[Path, str, str]]:
    """(parent folder, limit file, swap limit file or "") for v2 then v1."""
    paths = _own_paths()
    found = []
    if "" in paths:
        parent = CGROUP_ROOT / paths[""].lstrip("/")
        if not (parent / "cgroup.controllers").exists():  # a hybrid machine: v2 is mounted under unified/
            parent = CGROUP_ROOT / "unified" / paths[""].lstrip("/")
        try:
            if "memory" in (parent / "cgroup.subtree_control").read_text().split():
                found.append((parent, "memory.max", "memory.swap.max"))
        except OSError:
            pass
    if "memory" in paths:
        found.append(
            (
                CGROUP_ROOT / "memory" / paths["memory"].lstrip("/"),
                "memory.limit_in_bytes",
                "memory.memsw.limit_in_bytes",
            )
        )
    return found


class MemoryCgroup:
    def __init__(self, folder: Path):
        self.folder = folder

    @classmethod
    def create(cls, limit_bytes: int, owner_uid: int | None) -> MemoryCgroup | None:
        for parent, limit_file, swap_file in _candidates():
            folder = parent / f"grpo-sandbox-{os.getpid()}-{next(_names)}"
            try:
                folder.mkdir()
            except OSError:
                continue
            try:
                (folder / limit_file).write_text(str(limit_bytes))
                swap = folder / swap_file
                if swap.exists():
                    swap.write_text("0" if swap_file == "memory.swap.max" else str(limit_bytes))
                if owner_uid is not None:
                    os.chown(folder, owner_uid, -1)
                    os.chown(folder / "cgroup.procs", owner_uid, -1)
            except OSError:
                _rmdir(folder)
                continue
            return cls(folder)
        return None

    def wrap(self, args: list[str]) -> list[str]:
        """`args` run by a shell that first moves itself into this cgroup (its children follow)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.folder / "cgroup.procs"), *args]

    def remove(self) -> None:
        _rmdir(self.folder)


def _rmdir(folder: Path) -> None:
    """rmdir, tried again while the kernel still counts the cgroup's last processes as exiting."""
    deadline = time.monotonic() + REMOVE_WAIT_S
    while True:
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left behind, empty: the kernel frees it when the parent goes
            time.sleep(0.01)

"""Where the trainer is, for whoever watches it from outside: the phase each of its threads is in,
and every thread's Python stack on request. JAX-free and Django-free (the platform's worker reads
what this writes; runner.stalls).

The trainer's side:

- `phase(name, detail="")`: a context manager around one stretch of work. Phases nest, per thread;
  the trainer marks its own (trainers.loop.trainer: "setup", "restore", "step", "generation",
  "rollout wait", "training", "evaluation", "checkpoint"; the collector thread of an asynchronous
  run: "generation"; scoring: "rewards" (a judge model, the sandbox's programs); a run of several
  processes: "gang" while its processes agree on the control, or join).
- `install(phase_path, stacks_path)`: from then on every phase change rewrites `phase_path` (JSON,
  `snapshot()`: the pid, each thread's open phases and since when), and SIGUSR1 makes the process
  append every thread's Python stack to `stacks_path`. The stacks are written by faulthandler from
  the signal handler itself, in C, so a thread stuck where Python cannot run a handler (an XLA
  compilation, a blocking call in C) is dumped too. Until `install`, phases live in memory only: a
  list push and pop.

The watcher's side: `read(phase_path)`, `parse_stacks(text)` (faulthandler's dump, thread by thread),
`annotate(text, snapshot)` (each thread's header gets its name and phases), `waits_on(frames,
phases)` (what a thread waits on, from its stack and phases) and `summary(...)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator

STACKS_SIGNAL = signal.SIGUSR1

_lock = threading.Lock()
_open: dict[int, list[dict]] = {}  # thread ident -> its open phases, outermost first
_names: dict[int, str] = {}
_phase_path: str | None = None
_stacks_path: str | None = None
_stacks_file = None  # kept open: faulthandler writes to its descriptor from the signal handler


def thread_id(ident: int) -> str:
    """A thread's ident as faulthandler prints it ("0x" and 16 hex digits on a 64-bit machine)."""
    return f"0x{ident:016x}"


def install(phase_path: str, stacks_path: str) -> None:
    """Write the phase marker to `phase_path` from now on, and dump every thread's stack to
    `stacks_path` (appended) on SIGUSR1. Call from the main thread; again to move the files."""
    global _phase_path, _stacks_path, _stacks_file
    uninstall()
    for path in (phase_path, stacks_path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _stacks_file = open(stacks_path, "a", encoding="utf-8")  # noqa: SIM115 - open until uninstall
    faulthandler.register(STACKS_SIGNAL, file=_stacks_file, all_threads=True, chain=False)
    with _lock:
        _phase_path, _stacks_path = phase_path, stacks_path
        _write_locked()


def uninstall() -> None:
    """Stop writing the marker and answering SIGUSR1 (its default action, ending the process, is back)."""
    global _phase_path, _stacks_path, _stacks_file
    if _stacks_file is not None:
        faulthandler.unregister(STACKS_SIGNAL)
        _stacks_file.close()
        _stacks_file = None
    with _lock:
        _phase_path = _stacks_path = None


@contextlib.contextmanager
def phase(name: str, detail: str = "") -> Iterator[None]:
    """Mark the enclosed work as phase `name` of this thread (`detail`: e.g. "step 12")."""
    ident = threading.get_ident()
    entry = {"name": name, "detail": str(detail), "since": time.time()}
    with _lock:
        _open.setdefault(ident, []).append(entry)
        _names[ident] = threading.current_thread().name
        _write_locked()
    try:
        yield
    finally:
        with _lock:
            stack = _open.get(ident, [])
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] is entry:
                    del stack[i:]
                    break
            if not stack:
                _open.pop(ident, None)
                _names.pop(ident, None)
            _write_locked()


def current(ident: int | None = None) -> list[str]:
    """The open phases of a thread (default: this one), outermost first, as "name detail"."""
    with _lock:
        stack = list(_open.get(threading.get_ident() if ident is None else ident, []))
    return [label(p) for p in stack]


def label(entry: dict) -> str:
    return f"{entry.get('name', '?')} {entry.get('detail', '')}".strip()


def snapshot() -> dict:
    """What the marker file holds: this process, and each thread's open phases (outermost first)."""
    with _lock:
        return _snapshot_locked()


def _snapshot_locked() -> dict:
    return {
        "pid": os.getpid(),
        "updated_at": time.time(),
        "stacks_signal": STACKS_SIGNAL.name if _stacks_path else "",
        "stacks_path": _stacks_path or "",
        "threads": [
            {"ident": thread_id(ident), "name": _names.get(ident, ""), "phases": [dict(p) for p in stack]}
            for ident, stack in _open.items()
        ],
    }


def _write_locked() -> None:
    if _phase_path is None:
        return
    tmp = f"{_phase_path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(_snapshot_locked(), f)
        os.replace(tmp, _phase_path)  # a reader sees the old marker or the new one, never half of one
    except OSError:
        pass  # a marker that cannot be written never fails the run


def read(path: str | os.PathLike) -> dict | None:
    """A marker file written by `install`'s process (None when absent or unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# -- reading a dump -------------------------------------------------------------------------------


@dataclasses.dataclass
class ThreadStack:
    """One thread of a faulthandler dump: its id, whether it was the thread the signal ran on, and
    its frames as (file, line, function), innermost first (as faulthandler prints them)."""

    ident: str
    current: bool
    frames: list[tuple[str, int, str]]
    header: str


_HEADER = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_stacks(text: str) -> list[ThreadStack]:
    """The threads of one faulthandler dump (`faulthandler.dump_traceback(all_threads=True)`)."""
    threads: list[ThreadStack] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            threads.append(ThreadStack(header.group(2).lower(), header.group(1) == "Current thread", [], line))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1].frames.append((frame.group(1), int(frame.group(2)), frame.group(3)))
    return threads


def _threads_by_id(marker: dict | None) -> dict[str, dict]:
    return {t.get("ident", "").lower(): t for t in (marker or {}).get("threads", []) if isinstance(t, dict)}


def phases_text(phases: list[dict], now: float) -> str:
    """ "step 3 > generation (for 312 s)": a thread's open phases, outermost first."""
    if not phases:
        return ""
    since = phases[-1].get("since")
    age = f" (for {max(0.0, now - since):.0f} s)" if isinstance(since, (int, float)) else ""
    return " > ".join(label(p) for p in phases) + age


def annotate(text: str, marker: dict | None, now: float | None = None) -> str:
    """The dump with each thread's header followed by its name and open phases (from the marker the
    process wrote), so a reader sees which stack is the main thread's and what each was doing."""
    now = time.time() if now is None else now
    threads = _threads_by_id(marker)
    out = []
    for line in text.splitlines():
        out.append(line)
        header = _HEADER.match(line)
        if header is None:
            continue
        known = threads.get(header.group(2).lower())
        if known is not None:
            phases = phases_text(known.get("phases", []), now)
            out.append(f"  [thread {known.get('name') or '?'}{'; in ' + phases if phases else ''}]")
    return "\n".join(out)


# What a frame's file says a thread waits on, checked innermost first.
_WAITS = (
    ("jax/_src/compiler.py", "XLA compilation"),
    ("/trainers/sandbox/", "the sandbox (code-test programs)"),
    ("jax/experimental/multihost_utils.py", "the other hosts of the gang"),
    ("jax/_src/distributed.py", "the other hosts of the gang"),
    ("/trainers/parallel/distributed.py", "the other hosts of the gang"),
    ("/orbax/", "a checkpoint write"),
)
# ... and its innermost phase, when the stack names nothing above.
_PHASE_WAITS = {
    "rewards": "the reward functions (a judge model, the sandbox's programs)",
    "gang": "the other hosts of the gang",
    "generation": "generation",
    "rollout wait": "rollouts from the collector thread",
    "checkpoint": "a checkpoint write",
    "restore": "a checkpoint read",
    "training": "the training update",
    "evaluation": "evaluation",
    "setup": "setup (loading the model and data)",
}


def waits_on(frames: list[tuple[str, int, str]], phases: list[dict]) -> str:
    """What a thread waits on: from its stack (XLA compilation, the sandbox, the gang's other hosts,
    a checkpoint write), else from its innermost phase; "" when neither says."""
    for file, _line, _function in frames:
        normalized = file.replace(os.sep, "/")
        for needle, what in _WAITS:
            if needle in normalized:
                return what
    for entry in reversed(phases):
        what = _PHASE_WAITS.get(entry.get("name", ""))
        if what:
            return what
    return ""


def summary(stacks: list[ThreadStack], marker: dict | None, now: float | None = None) -> str:
    """One line per thread that is in a phase or waits on something known, the main thread first:
    "MainThread: in step 3 > generation (for 312 s), waiting on XLA compilation"."""
    now = time.time() if now is None else now
    threads = _threads_by_id(marker)
    seen = {t.ident for t in stacks}
    lines: list[tuple[int, str]] = []
    for stack in stacks:
        known = threads.get(stack.ident, {})
        phases = known.get("phases", [])
        what = waits_on(stack.frames, phases)
        if not phases and not what:
            continue
        name = known.get("name") or f"thread {stack.ident}"
        text = f"{name}: " + (f"in {phases_text(phases, now)}" if phases else "in no phase")
        lines.append((name != "MainThread", text + (f", waiting on {what}" if what else "")))
    for ident, known in threads.items():  # in a phase, but missing from the dump (none taken)
        if ident not in seen and known.get("phases"):
            name = known.get("name") or f"thread {ident}"
            phases = known["phases"]
            what = waits_on([], phases)
            text = f"{name}: in {phases_text(phases, now)}" + (f", waiting on {what}" if what else "")
            lines.append((name != "MainThread", text))
    return "\n".join(text for _, text in sorted(lines, key=lambda pair: pair[0]))

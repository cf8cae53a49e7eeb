"""Where a quiet trainer is stuck: the supervisor's stall watch (runner.supervisor).

The trainer child marks its phases and answers SIGUSR1 with every thread's Python stack
(trainers.step.phases, installed by runner.attempt at the start of the attempt): the marker is
`<run dir>/logs/attempt-N.phase.json`, the stacks go to `attempt-N.stacks.txt` (the processes of a
multi-host run: `attempt-N-host-I.*`, in the run directory all hosts share).

`StallWatch` tells the supervisor when the trainer has reported nothing (no new step, no phase
change) for PLATFORM_STALL_FACTOR times its usual step time, never sooner than PLATFORM_STALL_MIN_S;
before the attempt's first step, which compiles, never sooner than PLATFORM_STALL_FIRST_STEP_S. The
usual step time is the median of the intervals between the steps the supervisor saw this attempt,
until there are some the median `timing/step_s` of the run's newest steps (a resumed run's earlier
attempts).

`collect_report` then reads the phase markers, sends SIGUSR1 to the trainer (only to a process that
installed the handler and is the supervisor's own child: SIGUSR1's default action would end it),
waits up to STACKS_WAIT_S for the dump and returns a `StallReport`: a headline, one line per thread
with the phases it is in and what it waits on (an XLA compilation, generation, the sandbox, the
other hosts of the gang: `trainers.step.phases.waits_on`), then the stacks, each thread's header
annotated with its name and phases. The supervisor writes it into the attempt's log and the run's
events and sends experiments.signals.run_stalled, from which the alerts app records a `stalled`
notification carrying the same text. Once per stall: another report needs the trainer to report
something first. The stacks of a multi-host run's processes on other hosts cannot be taken from
here: their phase markers are reported.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import statistics
import time
from collections import deque

from trainers.step import phases

STACKS_WAIT_S = 3.0  # how long the supervisor waits for the trainer's dump
STEP_WINDOW = 20  # the usual step time is the median of this many recent intervals
STEP_METRIC = "timing/step_s"
MAX_EVENT_CHARS = 20_000  # a report in the run's events is cut to this


def phase_path(run_dir: str, attempt: int, host: int | None = None) -> str:
    stem = f"attempt-{attempt}" if host is None else f"attempt-{attempt}-host-{host}"
    return os.path.join(run_dir, "logs", f"{stem}.phase.json")


def stacks_path(run_dir: str, attempt: int, host: int | None = None) -> str:
    stem = f"attempt-{attempt}" if host is None else f"attempt-{attempt}-host-{host}"
    return os.path.join(run_dir, "logs", f"{stem}.stacks.txt")


def marker_paths(run_dir: str, attempt: int) -> list[str]:
    """The attempt's phase markers that exist: the trainer's own, then each host's of a gang."""
    own = phase_path(run_dir, attempt)
    hosts = sorted(glob.glob(os.path.join(run_dir, "logs", f"attempt-{attempt}-host-*.phase.json")))
    return ([own] if os.path.exists(own) else []) + hosts


def progress_stamp(run_dir: str, attempt: int) -> tuple:
    """What changes whenever a trainer process of the attempt enters or leaves a phase."""
    stamp = []
    for path in marker_paths(run_dir, attempt):
        try:
            stamp.append((path, os.stat(path).st_mtime_ns))
        except OSError:
            pass
    return tuple(stamp)


def checkpointing(run_dir: str, attempt: int) -> bool:
    """Whether a trainer process of the attempt is writing a checkpoint now (phase "checkpoint")."""
    for path in marker_paths(run_dir, attempt):
        for thread in (phases.read(path) or {}).get("threads", []):
            if any(p.get("name") == "checkpoint" for p in thread.get("phases", [])):
                return True
    return False


class StallWatch:
    """When the trainer has been quiet too long (see the module docstring). Times are monotonic."""

    def __init__(self, factor: float, min_s: float, first_step_s: float, prior_step_s: float | None, now: float):
        self.factor, self.min_s, self.first_step_s = factor, min_s, first_step_s
        self.prior_step_s = prior_step_s
        self.quiet_since = now
        self.last_step: int | None = None
        self.last_step_at = now
        self.stepped = False  # a step was completed in this attempt
        self.intervals: deque[float] = deque(maxlen=STEP_WINDOW)
        self.stamp: tuple | None = None
        self.reported = False  # this quiet stretch was reported
        self.stalls = 0  # reports made in this attempt

    def _progress(self, now: float) -> None:
        self.quiet_since = now
        self.reported = False

    def saw_step(self, step: int | None, now: float) -> None:
        """The run's step as just read. A higher one is a step done; a lower one (a resume) is news too."""
        if step is None or step == self.last_step:
            return
        if self.last_step is not None and step > self.last_step:
            if self.stepped:  # the first step of the attempt compiles: not a usual step
                self.intervals.append((now - self.last_step_at) / (step - self.last_step))
            self.stepped = True
        if self.last_step is not None:
            self._progress(now)
        self.last_step, self.last_step_at = step, now

    def saw_stamp(self, stamp: tuple, now: float) -> None:
        """The phase markers' `progress_stamp`; a change is a phase boundary."""
        if stamp != self.stamp:
            if stamp:
                self._progress(now)
            self.stamp = stamp

    def usual_step_s(self) -> float | None:
        return statistics.median(self.intervals) if self.intervals else self.prior_step_s

    def threshold_s(self) -> float:
        usual = self.usual_step_s()
        floor = self.min_s if self.stepped else self.first_step_s
        return max(floor, self.factor * usual) if usual else floor

    def quiet_s(self, now: float) -> float:
        return now - self.quiet_since

    def due(self, now: float) -> bool:
        return not self.reported and self.quiet_s(now) >= self.threshold_s()


def take_stacks(pid: int, path: str, wait_s: float = STACKS_WAIT_S) -> str:
    """Send SIGUSR1 to `pid` (a trainer that installed trainers.step.phases) and return the dump it
    appends to `path`: what was added, once it stops growing; "" if nothing came within `wait_s`."""
    try:
        offset = os.path.getsize(path)
    except OSError:
        offset = 0
    try:
        os.kill(pid, phases.STACKS_SIGNAL)
    except ProcessLookupError:
        return ""
    deadline = time.monotonic() + wait_s
    last, stable_since = offset, None
    while time.monotonic() < deadline:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = offset
        if size > offset and size == last:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 0.1:
                break
        else:
            stable_since = None
        last = size
        time.sleep(0.02)
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@dataclasses.dataclass
class StallReport:
    headline: str  # "the trainer reported nothing for 312 s after step 12 (...)"
    where: str  # one line per thread: its phases and what it waits on
    stacks: str  # the annotated dump ("" when none could be taken)

    def text(self) -> str:
        parts = [f"stalled: {self.headline}", self.where]
        if self.stacks:
            parts.append("Python stacks of the trainer's threads (most recent call first):\n" + self.stacks)
        return "\n".join(p for p in parts if p)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def collect_report(
    pid: int | None, run_dir: str, attempt: int, quiet_s: float, step: int | None, watch: StallWatch
) -> StallReport:
    """Read the markers, take the trainer's stacks (`pid`: the supervisor's child) and describe it."""
    usual = watch.usual_step_s()
    after = f"after step {step}" if step else "before its first step"
    usual_text = f"its usual step: {_seconds(usual)}" if usual else "no usual step time yet"
    first = "" if watch.stepped else " before the attempt's first step"
    headline = (
        f"the trainer reported nothing for {quiet_s:.0f} s {after} "
        f"({usual_text}; {_seconds(watch.threshold_s())} of quiet counts as a stall{first})"
    )
    own_path = phase_path(run_dir, attempt)
    own = phases.read(own_path)
    dump = ""
    if own and own.get("stacks_signal") and pid is not None and own.get("pid") == pid:
        dump = take_stacks(pid, own.get("stacks_path") or stacks_path(run_dir, attempt))
    now = time.time()
    where_lines = []
    if own is not None:
        where_lines.append(phases.summary(phases.parse_stacks(dump), own, now))
    for path in marker_paths(run_dir, attempt):
        if path == own_path:
            continue
        host = os.path.basename(path).removeprefix(f"attempt-{attempt}-").removesuffix(".phase.json")
        text = phases.summary([], phases.read(path), now)
        if text:
            where_lines.extend(f"{host} {line}" for line in text.splitlines())
    where = "\n".join(line for line in where_lines if line)
    if not where:
        where = "the trainer has marked no phase (it is still starting: importing its libraries)"
    elif own is not None and not dump and own.get("pid") == pid:
        where += "\n(no stack dump came back within the wait)"
    return StallReport(headline, where, phases.annotate(dump, own, now) if dump else "")

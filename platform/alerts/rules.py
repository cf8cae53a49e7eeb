"""Pure rule logic: which run status is an alert event, whether a metric's newest points meet a
condition (crossing a threshold at each of the newest `for_steps` points, or stuck: varying by at
most the threshold over them), when a crossing is new, when a run has stalled, the notification's
text, and the collapse detectors offered as presets. No database here."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import math
import operator

STATUS_EVENTS = {"failed": "failed", "succeeded": "succeeded", "pruned": "pruned"}
COMPARISONS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
STUCK = "~"
"""The comparison `stuck`: the newest for_steps points are all finite and max - min <= threshold."""
MAX_FOR_STEPS = 1000


def status_event(status: str) -> str | None:
    """The alert event a run status is (failed, succeeded, pruned), or None."""
    return STATUS_EVENTS.get(status)


@dataclasses.dataclass(frozen=True)
class Condition:
    """`metric comparison threshold` at each of the newest `for_steps` points, e.g. entropy < 0.05 for
    5 steps; or `metric ~ threshold`: stuck, the newest for_steps points vary by at most threshold."""

    metric: str
    comparison: str
    threshold: float
    for_steps: int = 1

    @property
    def stuck(self) -> bool:
        return self.comparison == STUCK

    def holds(self, value: float | None) -> bool:
        """Whether one point `value` crosses the threshold (the comparisons >, >=, <, <=; being stuck
        is a property of several points: `holds_over`). NaN (None: how NaN is stored) never does, as
        in Python's comparisons; +inf and -inf compare as themselves."""
        if self.stuck:
            raise ValueError("a stuck condition holds over several points: use holds_over")
        if value is None or math.isnan(value):
            return False
        return COMPARISONS[self.comparison](value, self.threshold)

    def holds_over(self, values: list[float | None]) -> bool:
        """Whether the condition holds at the newest of `values` (ordered by step, oldest first): over
        its newest for_steps values, each crosses, or (stuck) each is finite and they vary by at most
        the threshold. Fewer than for_steps values never hold."""
        return len(values) >= self.for_steps and holding(self, values[-self.for_steps :])[-1]

    def describe(self) -> str:
        """'reward/mean < 0.1', 'entropy < 0.05 for 5 steps', 'reward/mean stuck within 0.005 over 20 steps'."""
        steps = f"{self.for_steps} step{'s' if self.for_steps != 1 else ''}"
        if self.stuck:
            return f"{self.metric} stuck within {self.threshold:g} over {steps}"
        text = f"{self.metric} {self.comparison} {self.threshold:g}"
        return text if self.for_steps == 1 else f"{text} for {steps}"


def holding(condition: Condition, values: list[float | None]) -> list[bool]:
    """For each of `values` (ordered by step, oldest first): whether the condition holds over the
    window of for_steps values ending there (False while fewer than for_steps values lead to it).
    One pass: a run of crossing values, or (stuck) of finite values with the window's max and min
    kept in monotonic queues."""
    n = condition.for_steps
    out: list[bool] = []
    run = 0
    if not condition.stuck:
        for value in values:
            run = run + 1 if condition.holds(value) else 0
            out.append(run >= n)
        return out
    highs: collections.deque[int] = collections.deque()
    lows: collections.deque[int] = collections.deque()
    for i, value in enumerate(values):
        if value is None or not math.isfinite(value):
            run = 0
            highs.clear()
            lows.clear()
            out.append(False)
            continue
        run += 1
        while highs and values[highs[-1]] <= value:
            highs.pop()
        highs.append(i)
        while lows and values[lows[-1]] >= value:
            lows.pop()
        lows.append(i)
        while highs[0] <= i - n:
            highs.popleft()
        while lows[0] <= i - n:
            lows.popleft()
        out.append(run >= n and values[highs[0]] - values[lows[0]] <= condition.threshold)
    return out


def fell_back(condition: Condition, values: list[float | None], since: int) -> bool:
    """Whether the condition did not hold at some value from index `since` on (values ordered by step,
    oldest first): at a window ending there that misses a crossing value, a finite one, or spreads
    wider than the threshold, or that is incomplete."""
    return not all(holding(condition, values)[since:])


def new_crossing(
    condition: Condition, newest_values: list[float | None], notified_before: bool, fell_back_since: bool
) -> bool:
    """Notify once per crossing: the condition holds over the newest values, and either this run never
    notified this rule's condition, or it did not hold at some step since that notification (the
    metric came back, and has crossed again)."""
    return condition.holds_over(newest_values) and (not notified_before or fell_back_since)


def is_stalled(heartbeat_at: dt.datetime | None, now: dt.datetime, stall_after_s: float) -> bool:
    """An active run is stalled when its last heartbeat is older than stall_after_s (its worker went
    silent; a quiet trainer of a live worker is reported by its supervisor: runner.stalls)."""
    return heartbeat_at is not None and (now - heartbeat_at).total_seconds() > stall_after_s


def run_title(run_label: str, experiment_name: str) -> str:
    return f"Run {run_label} of \"{experiment_name}\""


def status_message(title: str, event: str, step: int, max_steps: int, error: str, url: str) -> str:
    """The text of a failed / succeeded / pruned notification."""
    text = f"{title} {event} at step {step}/{max_steps}."
    if event == "failed" and error:
        first_line = error.strip().splitlines()[0] if error.strip() else ""
        text += f" Error: {first_line[:300]}"
    return f"{text} {url}".strip()


def stalled_message(title: str, heartbeat_age_s: float, step: int, url: str) -> str:
    """A run whose worker went silent (no heartbeat)."""
    return f"{title} has stalled: no heartbeat for {heartbeat_age_s:.0f} s (at step {step}). {url}".strip()


MAX_ALERT_STACK_CHARS = 8000
"""A trainer stall's notification carries at most this much of the stacks (the run's log has them all)."""


def trainer_stalled_message(title: str, headline: str, where: str, stacks: str, url: str) -> str:
    """A run whose trainer went quiet while its worker beats on (runner.stalls' report): where it is
    stuck (each thread's phases, what it waits on), then the trainer's Python stacks."""
    text = f"{title} has stalled: {headline}. {url}".strip()
    if where:
        text += f"\nWhere it is: {where}"
    if stacks:
        shown = stacks[:MAX_ALERT_STACK_CHARS]
        if len(stacks) > MAX_ALERT_STACK_CHARS:
            shown += "\n[... cut; the run's log has them all]"
        text += f"\n\nPython stacks of the trainer's threads (most recent call first):\n{shown}"
    return text


def metric_message(title: str, condition: Condition, value: float, step: int, url: str) -> str:
    return f"{title}: {condition.metric} = {value:g} at step {step} ({condition.describe()}). {url}".strip()


def with_held_back(message: str, held_back: int) -> str:
    """A sent message mentions the notifications its rule's rate limit held back since the last one."""
    if not held_back:
        return message
    plural = "s" if held_back > 1 else ""
    return f"{message} (+{held_back} more alert{plural} held back by the rate limit; see the delivery log)"


def retry_delay_s(attempts: int, base_s: float) -> float:
    """Backoff before try number attempts + 1: base, 2 x base, 4 x base, ..."""
    return base_s * 2 ** max(attempts - 1, 0)


def rate_limited(last_sent_at: dt.datetime | None, now: dt.datetime, min_interval_s: float) -> bool:
    """Whether a rule that last sent at last_sent_at must hold back a notification now."""
    return last_sent_at is not None and (now - last_sent_at).total_seconds() < min_interval_s


@dataclasses.dataclass(frozen=True)
class Preset:
    """A named metric rule the new-alert form can start from."""

    slug: str
    title: str
    metric: str
    comparison: str
    threshold: float
    for_steps: int
    why: str

    @property
    def condition(self) -> Condition:
        return Condition(self.metric, self.comparison, self.threshold, self.for_steps)


COLLAPSE_DETECTORS = (
    Preset(
        "entropy-collapse",
        "Entropy collapse",
        "entropy",
        "<",
        0.05,
        5,
        "the policy has turned near-deterministic: it stops exploring, and the groups' rewards stop differing",
    ),
    Preset(
        "reward-stuck",
        "Reward stuck",
        "reward/mean",
        STUCK,
        0.005,
        20,
        "the mean reward has not moved for 20 steps: nothing is being learned",
    ),
    Preset(
        "sampler-mismatch",
        "Sampler mismatch",
        "mismatch/kl",
        ">",
        0.01,
        3,
        "the generation copy samples from another distribution than the trained weights (KL(sampler || trainer))",
    ),
)
"""The collapse detectors: presets of the new-alert form."""


def preset(slug: str) -> Preset | None:
    return next((p for p in COLLAPSE_DETECTORS if p.slug == slug), None)

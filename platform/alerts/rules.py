"""Pure rule logic: which run status is an alert event, whether a metric value crosses a threshold,
when a crossing is new, when a run has stalled, and the notification's text. No database here."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import operator

STATUS_EVENTS = {"failed": "failed", "succeeded": "succeeded", "pruned": "pruned"}
COMPARISONS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def status_event(status: str) -> str | None:
    """The alert event a run status is (failed, succeeded, pruned), or None."""
    return STATUS_EVENTS.get(status)


@dataclasses.dataclass(frozen=True)
class Condition:
    """`metric comparison threshold`, e.g. reward/mean < 0.1."""

    metric: str
    comparison: str
    threshold: float

    def holds(self, value: float | None) -> bool:
        """Whether `value` crosses the threshold. NaN (None: how NaN is stored) never does, as in
        Python's comparisons; +inf and -inf compare as themselves."""
        if value is None or math.isnan(value):
            return False
        return COMPARISONS[self.comparison](value, self.threshold)

    def describe(self) -> str:
        return f"{self.metric} {self.comparison} {self.threshold:g}"


def new_crossing(
    condition: Condition, newest_value: float | None, notified_before: bool, fell_back_since: bool
) -> bool:
    """Notify once per crossing: the newest point crosses, and either this run never notified this
    rule's condition, or a point since that notification did not cross (the metric came back, and
    has crossed again)."""
    return condition.holds(newest_value) and (not notified_before or fell_back_since)


def is_stalled(heartbeat_at: dt.datetime | None, now: dt.datetime, stall_after_s: float) -> bool:
    """An active run is stalled when its last heartbeat is older than stall_after_s."""
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
    return f"{title} has stalled: no heartbeat for {heartbeat_age_s:.0f} s (at step {step}). {url}".strip()


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

"""Recording and sending notifications.

`record_status_event(run_id, status)` (the run_status_changed receiver calls it on commit) records a
pending delivery for every enabled rule of the run's owner that watches that event;
`record_trainer_stall(run_id, key, report)` (the run_stalled receiver) records a `stalled` one when a
worker's supervisor finds its trainer quiet for several times its usual step time, with where it is
stuck and its Python stacks (runner.stalls), once per stall (`key`). `tick()` runs in
the scheduler's process every PLATFORM_ALERT_TICK_S (settings.PLATFORM_PERIODIC_JOBS) and
  1. records a `stalled` delivery for each active run whose heartbeat is older than
     PLATFORM_ALERT_STALL_AFTER_S: its worker went silent (once per stall: the key names the attempt
     and the last heartbeat),
  2. records a `metric` delivery when a rule's condition holds over an active run's newest
     `for_steps` points of its metric (each crosses the threshold, or they are stuck), once per
     crossing: again only after a step in between at which it did not hold (read over at most
     SCAN_POINTS points since the last notification),
  3. sends the pending deliveries that are due: a rule that sent less than `min_interval_s` ago
     logs a stalled or metric delivery as rate_limited instead (its next message counts them), and
     keeps a run's end (failed, succeeded, pruned: once per attempt) pending until the interval has
     passed, so a metric notice just before it never swallows it; a webhook or mail failure keeps the
     delivery pending with its error and a backoff (PLATFORM_ALERT_RETRY_S, doubled each time) until
     PLATFORM_ALERT_MAX_ATTEMPTS tries, then marks it failed. Nothing is dropped silently. A delivery
     that went out is `sent`, or `written` when it is an e-mail the file backend wrote under
     EMAIL_FILE_PATH (no mail server set: nothing left the machine).
A delivery is claimed by a compare-and-set on its attempts (two schedulers never send it twice);
one whose sender died mid-send is tried again after PLATFORM_ALERT_CLAIM_S.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from alerts import rules, webhook
from alerts.models import DELIVERED_STATUSES, END_EVENTS, AlertDelivery, AlertEvent, AlertRule, Channel, DeliveryStatus
from experiments.models import ACTIVE_STATUSES, MetricPoint, Run

log = logging.getLogger(__name__)
SEND_BATCH = 100
SCAN_POINTS = 2000
"""At most this many of a run's points since a rule's last notification are read to tell whether
its condition stopped holding in between. Beyond them only the newest SCAN_POINTS count: a crossing
that began earlier than that is no news (the tick, every few seconds, would have seen it begin)."""


def run_url(run: Run) -> str:
    return f"{settings.PLATFORM_BASE_URL.rstrip('/')}/runs/{run.pk}/"


def _title(run: Run) -> str:
    return rules.run_title(run.label, run.experiment.name)


def record(rule: AlertRule, run: Run, event: str, key: str, message: str) -> AlertDelivery | None:
    """A pending delivery, unless this (rule, run, key) was recorded before (None then)."""
    try:
        with transaction.atomic():
            return AlertDelivery.objects.create(rule=rule, run=run, event=event, key=key, message=message)
    except IntegrityError:
        return None


def record_status_event(run_id: int, status: str) -> int:
    """Record the deliveries a run's new status calls for; returns how many."""
    event = rules.status_event(status)
    if event is None:
        return 0
    run = Run.objects.select_related("experiment").filter(pk=run_id).first()
    if run is None:
        return 0
    recorded = 0
    for rule in AlertRule.objects.for_run(run):
        if event in rule.events:
            message = rules.status_message(_title(run), event, run.step, run.max_steps, run.error, run_url(run))
            recorded += record(rule, run, event, f"{event}:{run.attempt}", message) is not None
    return recorded


def record_trainer_stall(run_id: int, key: str, report) -> int:
    """Record a `stalled` delivery for every enabled rule watching the run's stalls: its trainer is
    quiet (`report`: runner.stalls.StallReport). Returns how many; a key seen before records none."""
    run = Run.objects.select_related("experiment").filter(pk=run_id).first()
    if run is None:
        return 0
    recorded = 0
    for rule in AlertRule.objects.for_run(run):
        if AlertEvent.STALLED in rule.events:
            message = rules.trainer_stalled_message(
                _title(run), report.headline, report.where, report.stacks, run_url(run)
            )
            recorded += record(rule, run, AlertEvent.STALLED, key, message) is not None
    return recorded


def _watched_active_runs(rule: AlertRule):
    runs = Run.objects.filter(status__in=sorted(ACTIVE_STATUSES), experiment__owner_id=rule.owner_id)
    if rule.experiment_id is not None:
        runs = runs.filter(experiment_id=rule.experiment_id)
    return runs.select_related("experiment")


def record_stalls(now: dt.datetime) -> int:
    cutoff = now - dt.timedelta(seconds=settings.PLATFORM_ALERT_STALL_AFTER_S)
    recorded = 0
    for rule in AlertRule.objects.filter(enabled=True):
        if AlertEvent.STALLED not in rule.events:
            continue
        for run in _watched_active_runs(rule).filter(heartbeat_at__lt=cutoff):
            age_s = (now - run.heartbeat_at).total_seconds()
            key = f"stalled:{run.attempt}:{run.heartbeat_at.isoformat()}"
            message = rules.stalled_message(_title(run), age_s, run.step, run_url(run))
            recorded += record(rule, run, AlertEvent.STALLED, key, message) is not None
    return recorded


def _fell_back_since(condition: rules.Condition, points: QuerySet, last_step: int) -> bool:
    """Whether the condition did not hold at some step after last_step (`points`: the run's points of
    the metric, newest first). Windows that end after last_step reach for_steps - 1 points back."""
    after = list(points.filter(step__gt=last_step).values_list("value", flat=True)[: SCAN_POINTS + 1])
    if len(after) > SCAN_POINTS:  # only the newest SCAN_POINTS, and the windows wholly among them
        return rules.fell_back(condition, after[:SCAN_POINTS][::-1], condition.for_steps - 1)
    before = list(points.filter(step__lte=last_step).values_list("value", flat=True)[: condition.for_steps - 1])
    return rules.fell_back(condition, before[::-1] + after[::-1], len(before))


def record_metric_crossings() -> int:
    recorded = 0
    for rule in AlertRule.objects.filter(enabled=True):
        condition = rule.condition
        if condition is None:
            continue
        for run in _watched_active_runs(rule):
            points = MetricPoint.objects.filter(run=run, name=condition.metric).order_by("-step")
            newest = list(points.values_list("step", "value")[: condition.for_steps])[::-1]  # oldest first
            window = [value for _, value in newest]
            if not condition.holds_over(window):
                continue
            newest_step, newest_value = newest[-1]
            last = (
                AlertDelivery.objects.filter(rule=rule, run=run, event=AlertEvent.METRIC)
                .order_by("-created_at", "-id")
                .values_list("key", flat=True)
                .first()
            )
            fell_back = False
            if last is not None:
                last_step = int(last.split(":")[1])
                if last_step >= newest_step:
                    continue
                fell_back = _fell_back_since(condition, points, last_step)
            if rules.new_crossing(condition, window, last is not None, fell_back):
                message = rules.metric_message(_title(run), condition, newest_value, newest_step, run_url(run))
                recorded += record(rule, run, AlertEvent.METRIC, f"metric:{newest_step}", message) is not None
    return recorded


def _claim(delivery: AlertDelivery, now: dt.datetime) -> bool:
    """Compare-and-set: this process tries the delivery now (attempts + 1, leased for CLAIM_S)."""
    lease = now + dt.timedelta(seconds=settings.PLATFORM_ALERT_CLAIM_S)
    won = (
        AlertDelivery.objects.filter(
            pk=delivery.pk,
            status=DeliveryStatus.PENDING,
            attempts=delivery.attempts,
        ).update(attempts=F("attempts") + 1, next_attempt_at=lease)
        == 1
    )
    if won:
        delivery.attempts += 1
    return won


FILE_EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"


def deliver(rule: AlertRule, message: str) -> str:
    """Send one message through the rule's channel: DeliveryStatus.SENT, or WRITTEN for an e-mail the
    file backend wrote (no mail server set); webhook.DeliveryError when it did not go out."""
    if rule.channel == Channel.WEBHOOK:
        webhook.post(rule.target, message, settings.PLATFORM_ALERT_WEBHOOK_TIMEOUT_S)
        return DeliveryStatus.SENT
    subject = message.split(". ")[0][:120]
    try:
        send_mail(f"[GRPO] {subject}", message, settings.DEFAULT_FROM_EMAIL, [rule.target], fail_silently=False)
    except Exception as exc:  # noqa: BLE001 - smtplib, socket and backend errors alike are recorded
        raise webhook.DeliveryError(f"e-mail not sent: {type(exc).__name__}: {exc}") from None
    return DeliveryStatus.WRITTEN if settings.EMAIL_BACKEND == FILE_EMAIL_BACKEND else DeliveryStatus.SENT


def send_one(delivery: AlertDelivery, now: dt.datetime) -> str:
    """Try one pending delivery; returns its new status."""
    rule = delivery.rule
    last_sent_at = (
        AlertDelivery.objects.filter(rule=rule, status__in=DELIVERED_STATUSES)
        .order_by("-sent_at")
        .values_list("sent_at", flat=True)
        .first()
    )
    if rules.rate_limited(last_sent_at, now, rule.min_interval_s) and delivery.event in END_EVENTS:
        # a run's end comes once: it waits for the interval rather than being held back for good
        AlertDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(
            next_attempt_at=last_sent_at + dt.timedelta(seconds=rule.min_interval_s)
        )
        return DeliveryStatus.PENDING
    if rules.rate_limited(last_sent_at, now, rule.min_interval_s):
        AlertDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(
            status=DeliveryStatus.RATE_LIMITED,
            error=f"rate limit: at most one notification per {rule.min_interval_s:g} s; the last was sent at "
            f"{last_sent_at:%Y-%m-%d %H:%M:%S} UTC",
        )
        return DeliveryStatus.RATE_LIMITED
    if not _claim(delivery, now):
        return DeliveryStatus.PENDING
    held_back = (
        AlertDelivery.objects.filter(rule=rule, status=DeliveryStatus.RATE_LIMITED)
        .filter(Q(created_at__gt=last_sent_at) if last_sent_at else Q())
        .count()
    )
    try:
        delivered = deliver(rule, rules.with_held_back(delivery.message, held_back))
    except webhook.DeliveryError as exc:
        done = delivery.attempts >= settings.PLATFORM_ALERT_MAX_ATTEMPTS
        delay_s = rules.retry_delay_s(delivery.attempts, settings.PLATFORM_ALERT_RETRY_S)
        status = DeliveryStatus.FAILED if done else DeliveryStatus.PENDING
        AlertDelivery.objects.filter(pk=delivery.pk).update(
            status=status,
            error=f"try {delivery.attempts}: {exc}",
            next_attempt_at=None if done else timezone.now() + dt.timedelta(seconds=delay_s),
        )
        log.warning("alert delivery %s (rule %s) try %s failed: %s", delivery.pk, rule.pk, delivery.attempts, exc)
        return status
    AlertDelivery.objects.filter(pk=delivery.pk).update(status=delivered, sent_at=timezone.now(), next_attempt_at=None)
    return delivered


def send_due(now: dt.datetime) -> dict[str, int]:
    """Send the pending deliveries that are due, oldest first; returns counts by new status."""
    counts: dict[str, int] = {}
    due = (
        AlertDelivery.objects.filter(status=DeliveryStatus.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .select_related("rule")
        .order_by("created_at", "id")[:SEND_BATCH]
    )
    for delivery in due:
        if not delivery.rule.enabled:
            continue  # kept pending: sent if the rule is enabled again
        status = send_one(delivery, timezone.now())
        counts[status] = counts.get(status, 0) + 1
    return counts


def tick(now: dt.datetime | None = None) -> dict[str, int]:
    """One round of the scheduler's alerts job (see the module docstring)."""
    now = now or timezone.now()
    record_stalls(now)
    record_metric_crossings()
    return send_due(now)

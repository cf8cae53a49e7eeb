"""Alert rules and their delivery log.

An `AlertRule` belongs to a user and watches one of their experiments (or all of them when
`experiment` is empty) for events: a run failed, succeeded or was pruned, a run stalled (an active
run whose heartbeat is older than PLATFORM_ALERT_STALL_AFTER_S, or whose trainer its worker found
quiet for several times its usual step time: runner.stalls), or a metric crossed a threshold at
each of its newest `for_steps` points (or is stuck: varied by at most the threshold over them). It
notifies one target by e-mail or by webhook (Slack-compatible JSON), at most once per
`min_interval_s`. Each notification is an `AlertDelivery` row: recorded first (pending), then sent
by the scheduler's tick (`alerts.delivery.tick`), so a target that is down loses nothing: the row
keeps its error and is retried, then marked failed.

A webhook URL usually carries its secret in its path (Slack: /services/T.../B.../<secret>): after
saving, pages, the API and the admin show only `masked_target`.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, validate_email
from django.db import models

from alerts import rules, url_guard


class AlertEvent(models.TextChoices):
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    PRUNED = "pruned"
    STALLED = "stalled"
    METRIC = "metric"


class Channel(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"


class Comparison(models.TextChoices):
    ABOVE = ">", "above (>)"
    AT_LEAST = ">=", "at least (>=)"
    BELOW = "<", "below (<)"
    AT_MOST = "<=", "at most (<=)"
    STUCK = rules.STUCK, "stuck (varies by at most)"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    WRITTEN = "written"  # an e-mail written as a file (no mail server set), not sent anywhere
    FAILED = "failed"
    RATE_LIMITED = "rate_limited"


DELIVERED_STATUSES = (DeliveryStatus.SENT, DeliveryStatus.WRITTEN)
"""A delivery that went out (to its target, or to a file): the rate limit counts from the newest."""
END_EVENTS = (AlertEvent.FAILED, AlertEvent.SUCCEEDED, AlertEvent.PRUNED)
"""A run's end: notified once per attempt, so the rate limit delays such a notice rather than holding it back."""


DEFAULT_MIN_INTERVAL_S = 60.0
MAX_MIN_INTERVAL_S = 7 * 24 * 3600.0


class AlertRuleQuerySet(models.QuerySet):
    def for_run(self, run) -> AlertRuleQuerySet:
        """Enabled rules that watch `run`: its owner's, for its experiment or for all of theirs."""
        return self.filter(owner_id=run.experiment.owner_id, enabled=True).filter(
            models.Q(experiment__isnull=True) | models.Q(experiment_id=run.experiment_id)
        )


class AlertRule(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_rules")
    experiment = models.ForeignKey(
        "experiments.Experiment",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
        help_text="Empty: all the owner's experiments.",
    )
    name = models.CharField(max_length=100, blank=True)
    events = models.JSONField(default=list, help_text="Any of: failed, succeeded, pruned, stalled, metric.")
    metric_name = models.CharField(max_length=64, blank=True, help_text="For the metric event, e.g. reward/mean.")
    comparison = models.CharField(max_length=2, choices=Comparison.choices, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    for_steps = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(rules.MAX_FOR_STEPS)],
        help_text="The metric condition counts when it holds at each of the run's newest this many points "
        "(stuck: at least 2).",
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="An e-mail address, or the webhook's URL (shown masked).")
    enabled = models.BooleanField(default=True)
    min_interval_s = models.FloatField(
        default=DEFAULT_MIN_INTERVAL_S,
        help_text="Rate limit: at most one notification per this many seconds; the others are logged as rate_limited.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = AlertRuleQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return self.name or f"alert {self.pk}"

    @property
    def masked_target(self) -> str:
        return url_guard.masked(self.target) if self.channel == Channel.WEBHOOK else self.target

    @property
    def condition(self) -> rules.Condition | None:
        if AlertEvent.METRIC not in self.events or not self.metric_name or self.threshold is None:
            return None
        return rules.Condition(self.metric_name, self.comparison, self.threshold, self.for_steps)

    def describe(self) -> str:
        """'failed, metric reward/mean < 0.1' (or '... for 5 steps', 'metric reward/mean stuck within
        0.005 over 20 steps') for lists."""
        parts = [e for e in self.events if e != AlertEvent.METRIC]
        if self.condition is not None:
            parts.append(f"metric {self.condition.describe()}")
        return ", ".join(parts)


def rule_errors(
    events, channel, target, metric_name, comparison, threshold, min_interval_s, for_steps
) -> dict[str, str]:
    """{field: message} for a rule's fields (empty when they are good): the one check of the page's
    form, the API and the admin's form."""
    errors: dict[str, str] = {}
    known = set(AlertEvent.values)
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        errors["events"] = f"choose at least one of: {', '.join(AlertEvent.values)}"
    elif set(events) - known:
        errors["events"] = (
            f"unknown event(s): {', '.join(sorted(set(events) - known))}; choose from {', '.join(AlertEvent.values)}"
        )
    elif AlertEvent.METRIC in events:
        if not metric_name:
            errors["metric_name"] = "required for the metric event (e.g. reward/mean)"
        elif len(metric_name) > 64:
            errors["metric_name"] = "at most 64 characters"
        if comparison not in Comparison.values:
            errors["comparison"] = f"one of {', '.join(Comparison.values)}"
        if threshold is None:
            errors["threshold"] = "required for the metric event"
        elif threshold != threshold or threshold in (float("inf"), float("-inf")):
            errors["threshold"] = "must be a finite number"
        elif comparison == Comparison.STUCK and threshold < 0:
            errors["threshold"] = (
                "stuck compares the spread (max - min) of the newest points with the threshold: "
                "give 0 or more, e.g. 0.005"
            )
        if comparison == Comparison.STUCK and _whole(for_steps) and for_steps < 2:
            errors["for_steps"] = "stuck compares several points: set for_steps to 2 or more, e.g. 20"
    if not _whole(for_steps) or not 1 <= for_steps <= rules.MAX_FOR_STEPS:
        errors["for_steps"] = f"a whole number of steps, 1 to {rules.MAX_FOR_STEPS}"
    if channel == Channel.EMAIL:
        try:
            validate_email(target or "")
        except ValidationError:
            errors["target"] = "an e-mail address, e.g. you@example.com"
    elif channel == Channel.WEBHOOK:
        refusal = url_guard.refusal(target or "", resolve_required=False)
        if refusal:
            errors["target"] = refusal
    else:
        errors["channel"] = f"one of {', '.join(Channel.values)}"
    if min_interval_s is None or not 0 <= min_interval_s <= MAX_MIN_INTERVAL_S:
        errors["min_interval_s"] = f"seconds between notifications, 0 to {MAX_MIN_INTERVAL_S:.0f}"
    return errors


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class AlertDelivery(models.Model):
    """One notification of one rule: recorded pending, then sent (to its webhook or mail server),
    written (an e-mail written as a file: no mail server is set), rate_limited or failed (after
    PLATFORM_ALERT_MAX_ATTEMPTS tries, the last error kept). `key` makes an event notify once:
    "failed:<attempt>", "stalled:<attempt>:<heartbeat>" (a silent worker),
    "stalled:<attempt>:step-<step>:<n>" (a quiet trainer), "metric:<step>"."""

    id = models.BigAutoField(primary_key=True)
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    run = models.ForeignKey(
        "experiments.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="alert_deliveries"
    )
    event = models.CharField(max_length=16, choices=AlertEvent.choices)
    key = models.CharField(max_length=100)
    message = models.TextField()
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING, db_index=True
    )
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="A pending delivery is tried from then on.")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["rule", "run", "key"], name="alert_delivery_once")]
        indexes = [models.Index(fields=["rule", "status", "sent_at"], name="alertdelivery_rule_sent")]

    def __str__(self) -> str:
        return f"{self.rule} {self.event} ({self.status})"

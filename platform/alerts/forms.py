"""The alert-rule form: one validation for the Alerts page and POST /api/alerts (and
`rule_errors`, which the admin's form runs too). `experiment` offers only the owner's experiments."""

from __future__ import annotations

from django import forms

from alerts.models import DEFAULT_MIN_INTERVAL_S, AlertEvent, AlertRule, Channel, Comparison, rule_errors
from alerts.rules import MAX_FOR_STEPS
from experiments.models import Experiment

FIELDS = [
    "name",
    "experiment",
    "events",
    "metric_name",
    "comparison",
    "threshold",
    "for_steps",
    "channel",
    "target",
    "min_interval_s",
    "enabled",
]


class AlertRuleForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    experiment = forms.TypedChoiceField(
        coerce=int, empty_value=None, required=False, help_text="Empty: all your experiments."
    )
    events = forms.MultipleChoiceField(choices=AlertEvent.choices, widget=forms.CheckboxSelectMultiple)
    metric_name = forms.CharField(max_length=64, required=False, help_text="For the metric event, e.g. reward/mean.")
    comparison = forms.ChoiceField(choices=[("", "—")] + Comparison.choices, required=False)
    threshold = forms.FloatField(required=False, help_text="For stuck: how much the metric may vary, e.g. 0.005.")
    for_steps = forms.IntegerField(
        required=False,
        label="For steps",
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_FOR_STEPS}),
        help_text="The condition counts when it holds at each of the newest this many points (default 1; "
        "stuck: 2 or more).",
    )
    channel = forms.ChoiceField(choices=Channel.choices)
    target = forms.CharField(
        max_length=500,
        help_text="An e-mail address, or a webhook URL (Slack-compatible); a URL is shown masked after saving.",
    )
    min_interval_s = forms.FloatField(
        required=False,
        min_value=0,
        label="At most one per (s)",
        help_text="Rate limit; the others are logged as rate_limited.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, owner, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = owner
        experiments = Experiment.objects.filter(owner=owner).order_by("name", "pk").values_list("pk", "name")
        self.fields["experiment"].choices = [("", "all my experiments")] + [
            (pk, f"{name} (#{pk})") for pk, name in experiments
        ]

    def clean(self):
        data = super().clean()
        if data.get("min_interval_s") is None and "min_interval_s" not in self.errors:
            data["min_interval_s"] = DEFAULT_MIN_INTERVAL_S
        if data.get("for_steps") is None and "for_steps" not in self.errors:
            data["for_steps"] = 1
        if self.errors:
            return data
        problems = rule_errors(
            data["events"],
            data["channel"],
            data["target"].strip(),
            data["metric_name"].strip(),
            data["comparison"],
            data["threshold"],
            data["min_interval_s"],
            data["for_steps"],
        )
        for field, message in problems.items():
            self.add_error(field, message)
        return data

    def error_dict(self) -> dict[str, str]:
        """{field: message} as the API answers it."""
        return {
            ("(input)" if field == "__all__" else field): " ".join(messages) for field, messages in self.errors.items()
        }

    def save(self) -> AlertRule:
        d = self.cleaned_data
        metric = AlertEvent.METRIC in d["events"]
        return AlertRule.objects.create(
            owner=self.owner,
            experiment_id=d["experiment"],
            name=d["name"].strip(),
            events=list(d["events"]),
            metric_name=d["metric_name"].strip() if metric else "",
            comparison=d["comparison"] if metric else "",
            threshold=d["threshold"] if metric else None,
            for_steps=d["for_steps"] if metric else 1,
            channel=d["channel"],
            target=d["target"].strip(),
            min_interval_s=d["min_interval_s"],
            enabled=d["enabled"],
        )

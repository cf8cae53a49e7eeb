"""Admin for alert rules and their delivery log. A webhook URL is never shown back: the list and the
change form show it masked, and the form's "new target" replaces it only when filled. Deliveries are
read-only (the log), with a "send again" action that puts failed or rate-limited ones back as pending."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from alerts.models import AlertDelivery, AlertEvent, AlertRule, DeliveryStatus, rule_errors


class AlertRuleAdminForm(forms.ModelForm):
    events = forms.MultipleChoiceField(choices=AlertEvent.choices, widget=forms.CheckboxSelectMultiple)
    for_steps = forms.IntegerField(
        required=False,
        initial=1,
        help_text="The metric condition counts when it holds at each of the run's newest this many points "
        "(empty: 1; stuck: 2 or more).",
    )
    new_target = forms.CharField(
        required=False,
        max_length=500,
        label="Target",
        help_text="An e-mail address or a webhook URL. Leave empty to keep the current one (shown masked above).",
    )

    class Meta:
        model = AlertRule
        exclude = ["target"]

    def clean(self):
        data = super().clean()
        if data.get("for_steps") is None and "for_steps" not in self.errors:
            data["for_steps"] = 1
        target = data.get("new_target") or self.instance.target
        if not target:
            self.add_error("new_target", "required")
            return data
        for field, message in rule_errors(
            data.get("events") or [],
            data.get("channel"),
            target,
            data.get("metric_name", ""),
            data.get("comparison", ""),
            data.get("threshold"),
            data.get("min_interval_s"),
            data.get("for_steps"),
        ).items():
            self.add_error("new_target" if field == "target" else (field if field in self.fields else None), message)
        self.instance.target = target
        return data


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleAdminForm
    list_display = [
        "id",
        "name",
        "owner",
        "experiment",
        "events_text",
        "channel",
        "shown_target",
        "enabled",
        "min_interval_s",
        "created_at",
    ]
    list_filter = ["enabled", "channel"]
    search_fields = ["name", "owner__username", "experiment__name"]
    readonly_fields = ["shown_target", "created_at"]
    raw_id_fields = ["owner", "experiment"]

    @admin.display(description="target")
    def shown_target(self, rule: AlertRule) -> str:
        return rule.masked_target if rule.target else "—"

    @admin.display(description="events")
    def events_text(self, rule: AlertRule) -> str:
        return rule.describe()


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "rule", "run", "event", "status", "attempts", "sent_at", "error"]
    list_filter = ["status", "event"]
    search_fields = ["message", "error", "rule__name"]
    readonly_fields = [f.name for f in AlertDelivery._meta.fields]
    actions = ["send_again"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Send again (failed or rate-limited deliveries become pending)")
    def send_again(self, request, queryset):
        n = queryset.filter(status__in=[DeliveryStatus.FAILED, DeliveryStatus.RATE_LIMITED]).update(
            status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=None
        )
        messages.success(request, f"{n} deliveries are pending again; the scheduler sends them within seconds.")

"""Sweeps in the admin: the list (experiment, sampler, pruner, metric, progress, status), each
sweep with its trials inline (params, run, status, best value) and a Cancel action through
sweeps.services. Sweeps are made from the experiment page or the API (their input is checked
there), so the admin neither adds them nor edits their search; trials are the scheduler's record."""

from __future__ import annotations

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from sweeps import services
from sweeps.models import Sweep, Trial


class TrialInline(admin.TabularInline):
    model = Trial
    extra = 0
    can_delete = False
    fields = ("number", "params", "run_link", "status", "value", "value_step", "error")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="run")
    def run_link(self, trial):
        if trial.run_id is None:
            return "-"
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:experiments_run_change", args=[trial.run_id]), trial.run.label
        )


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "experiment",
        "owner_name",
        "sampler",
        "pruner",
        "metric",
        "direction",
        "progress",
        "status",
        "created_at",
    )
    list_filter = ("status", "sampler", "pruner")
    search_fields = ("name", "experiment__name", "experiment__owner__username")
    readonly_fields = (
        "experiment",
        "space",
        "base_config",
        "sampler",
        "pruner",
        "pruner_startup_trials",
        "pruner_warmup_steps",
        "metric",
        "direction",
        "max_trials",
        "max_concurrent_trials",
        "seed",
        "status",
        "note",
        "created_at",
        "finished_at",
    )
    fields = ("name",) + readonly_fields
    inlines = [TrialInline]
    actions = ["cancel"]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("experiment__owner")

    def has_add_permission(self, request):
        return False

    @admin.display(description="owner")
    def owner_name(self, sweep):
        return sweep.experiment.owner.username

    @admin.display(description="trials")
    def progress(self, sweep):
        return f"{sweep.trials.count()} / {sweep.max_trials}"

    @admin.action(description="Cancel the selected sweeps (and their active trials)")
    def cancel(self, request, queryset):
        done = sum(1 for sweep in queryset if services.cancel_sweep(sweep))
        messages.info(request, f"{done} of {queryset.count()} sweeps cancelled")

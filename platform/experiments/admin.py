"""The admin as an operator's tool: experiments and their versions, runs with the same actions the
web UI and API offer (cancel, pause, resume, requeue — through experiments.models, so the state
machine holds), what runs report (read-only: those rows are the trainer's record), and the live
workers with what each one runs.

Status and progress fields are read-only here: changing them by hand would bypass the
compare-and-set transitions the workers rely on.
"""

from __future__ import annotations

import datetime
import json

from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from experiments import models as run_actions
from experiments.models import (
    Checkpoint,
    ConfigVersion,
    Experiment,
    MetricPoint,
    RolloutSample,
    Run,
    RunEvent,
    Worker,
)

RECENT_EVENTS_SHOWN = 30


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the platform writes (metrics, samples, checkpoints, events, workers): view only."""

    show_full_result_count = False  # no second COUNT(*) over millions of rows on a filtered list

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


def _pretty_json(value) -> str:
    return format_html("<pre style='white-space: pre-wrap; margin: 0'>{}</pre>", json.dumps(value, indent=2))


# --- experiments ------------------------------------------------------------------------------


class ConfigVersionInline(ReadOnlyInline):
    model = ConfigVersion
    fields = ("number", "created_at", "created_by", "note")
    readonly_fields = fields
    ordering = ("-number",)


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "updated_at", "created_at")
    list_display_links = ("id", "name")
    list_filter = ("owner",)
    list_select_related = ("owner",)
    search_fields = ("name", "description", "owner__username")
    date_hierarchy = "updated_at"
    fields = ("owner", "name", "description", "config_pretty", "created_at", "updated_at")
    readonly_fields = ("config_pretty", "created_at", "updated_at")
    inlines = [ConfigVersionInline]

    @admin.display(description="config (edit it in the web UI or API: it is validated and versioned there)")
    def config_pretty(self, obj):
        return _pretty_json(obj.config) if obj and obj.pk else "-"

    def has_add_permission(self, request):
        return False  # a config must pass the trainer's schema: create experiments in the web UI or API


# --- runs -------------------------------------------------------------------------------------


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ("step", "path", "size_bytes", "created_at")
    readonly_fields = fields


def _run_action(label: str, function, done: str):
    """An admin action calling `function(run) -> bool` on each selected run."""

    def action(modeladmin, request, queryset):
        runs = list(queryset.select_related("experiment"))
        changed = sum(1 for run in runs if function(run))
        level = messages.SUCCESS if changed == len(runs) else messages.WARNING
        modeladmin.message_user(
            request,
            f"{label}: {changed} of {len(runs)} run(s) {done}"
            + ("" if changed == len(runs) else "; the others were in a status that does not allow it"),
            level,
        )

    action.__name__ = f"{label.lower()}_runs"
    return admin.action(description=f"{label} selected runs")(action)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "experiment", "owner", "status", "progress_steps", "restarts", "worker_host",
                    "heartbeat_at", "created_at")
    list_display_links = ("id", "experiment")
    list_filter = ("status", ("experiment__owner", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("experiment__owner",)
    search_fields = ("=id", "experiment__name", "worker_host", "experiment__owner__username")
    date_hierarchy = "created_at"
    actions = [
        _run_action("Cancel", run_actions.request_cancel, "cancelled or cancelling"),
        _run_action("Pause", run_actions.request_pause, "pausing"),
        _run_action("Resume", run_actions.resume_run, "put back on the queue"),
        _run_action("Requeue", run_actions.retry_run, "put back on the queue (retry)"),
    ]
    inlines = [CheckpointInline]
    fieldsets = [
        (None, {"fields": ("experiment", "config_version", "status", "progress_steps", "latest_reward", "error",
                           "params_digest", "links")}),
        ("Supervision", {"fields": ("attempt", "restarts", "max_restarts", "queue", "worker_host", "worker_pid",
                                    "heartbeat_at")}),
        ("Times", {"fields": ("created_at", "queued_at", "started_at", "finished_at", "running_s")}),
        ("Config and run directory", {"classes": ["collapse"], "fields": ("config_pretty", "run_dir")}),
        ("Recent events", {"fields": ("recent_events",)}),
    ]
    readonly_fields = ("experiment", "config_version", "status", "progress_steps", "latest_reward", "error",
                       "params_digest", "links", "attempt", "restarts", "queue", "worker_host", "worker_pid",
                       "heartbeat_at", "created_at", "queued_at", "started_at", "finished_at", "running_s",
                       "config_pretty", "run_dir", "recent_events")

    def has_add_permission(self, request):
        return False  # launch runs from an experiment (web UI or API): they are queued there

    @admin.display(description="owner", ordering="experiment__owner__username")
    def owner(self, obj):
        return obj.experiment.owner

    @admin.display(description="step", ordering="step")
    def progress_steps(self, obj):
        return f"{obj.step}/{obj.max_steps}" if obj.max_steps else str(obj.step)

    @admin.display(description="config")
    def config_pretty(self, obj):
        return _pretty_json(obj.config)

    @admin.display(description="reported")
    def links(self, obj):
        items = [
            ("metric points", reverse("admin:experiments_metricpoint_changelist")),
            ("samples", reverse("admin:experiments_rolloutsample_changelist")),
            ("events", reverse("admin:experiments_runevent_changelist")),
        ]
        return format_html_join(" · ", "<a href='{}?run__id__exact={}'>{}</a>",
                                ((url, obj.pk, label) for label, url in items))

    @admin.display(description=f"last {RECENT_EVENTS_SHOWN} events")
    def recent_events(self, obj):
        events = list(obj.events.order_by("-id")[:RECENT_EVENTS_SHOWN])[::-1]
        if not events:
            return "-"
        return format_html(
            "<pre style='white-space: pre-wrap; margin: 0'>{}</pre>",
            "\n".join(f"{e.created_at:%Y-%m-%d %H:%M:%S} [{e.level}/{e.kind}] {e.message}" for e in events),
        )


# --- what runs report (read-only) -------------------------------------------------------------


@admin.register(MetricPoint)
class MetricPointAdmin(ReadOnlyAdmin):
    """Filter by run through the run page's link (?run__id__exact=ID); there may be millions."""

    list_display = ("run", "name", "step", "value")
    list_select_related = ("run__experiment",)
    search_fields = ("=name",)
    list_per_page = 200
    raw_id_fields = ("run",)


@admin.register(RolloutSample)
class RolloutSampleAdmin(ReadOnlyAdmin):
    list_display = ("run", "step", "index", "reward", "advantage", "short_prompt", "short_completion")
    list_select_related = ("run__experiment",)
    search_fields = ("prompt", "completion", "answer")
    raw_id_fields = ("run",)

    @admin.display(description="prompt")
    def short_prompt(self, obj):
        return obj.prompt[:60]

    @admin.display(description="completion")
    def short_completion(self, obj):
        return obj.completion[:60]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("run", "step", "path", "size_bytes", "created_at")
    list_select_related = ("run__experiment",)
    raw_id_fields = ("run",)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "run", "attempt", "created_at", "level", "kind", "message")
    list_filter = ("level", "kind")
    list_select_related = ("run__experiment",)
    search_fields = ("message",)
    raw_id_fields = ("run",)


# --- workers ----------------------------------------------------------------------------------


class AliveFilter(admin.SimpleListFilter):
    title = "alive"
    parameter_name = "alive"

    def lookups(self, request, model_admin):
        return [("yes", "alive"), ("no", "silent")]

    def queryset(self, request, queryset):
        cutoff = timezone.now() - datetime.timedelta(seconds=settings.PLATFORM_STALE_AFTER_S)
        if self.value() == "yes":
            return queryset.filter(heartbeat_at__gte=cutoff)
        if self.value() == "no":
            return queryset.filter(heartbeat_at__lt=cutoff)
        return queryset


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    """Live workers (heartbeat within PLATFORM_STALE_AFTER_S) and the runs each one holds."""

    list_display = ("hostname", "alive", "pid", "queues", "concurrency", "started_at", "heartbeat_at", "runs")
    list_filter = (AliveFilter,)
    search_fields = ("hostname", "queues")

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser  # clearing out long-dead workers is fine

    @admin.display(boolean=True, description="alive")
    def alive(self, obj):
        return obj.is_alive

    @admin.display(description="current runs")
    def runs(self, obj):
        held = list(obj.current_runs.select_related("experiment"))
        if not held:
            return "-"
        return format_html_join(
            ", ", "<a href='{}'>run {} ({}, {}, step {})</a>",
            ((reverse("admin:experiments_run_change", args=[r.pk]), r.pk, r.experiment.name, r.status, r.step)
             for r in held),
        )

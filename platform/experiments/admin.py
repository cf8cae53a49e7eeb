"""The admin as an operator's tool: experiments and their versions, runs, and what runs report
(read-only: those rows are the trainer's record); datasets in experiments/dataset_admin.py. The runs' actions (cancel,
pause, resume, requeue: through runner.services, so the state machine holds) and the workers are the
runner's, in runner/admin.py.

Experiments and runs follow the platform's one rule (experiments.models.VisibleToQuerySet): a
staff user sees and steers their own, and others' only with the model permission (view to see,
change to edit or steer); superusers have every permission. A config edited or added here is
validated by `Experiment.clean` (the trainer's schema and the dataset roots) and versioned.

Status and progress fields are read-only here: changing them by hand would bypass the
compare-and-set transitions the workers rely on.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from experiments.access import may_change
from experiments.models import (
    Checkpoint,
    ConfigVersion,
    Experiment,
    MetricPoint,
    RolloutSample,
    Run,
    RunEvent,
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


class ConfigField(forms.JSONField):
    """The config as JSON text; JSON nested thousands deep is an error, not a crash."""

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError("the JSON is nested too deeply (a config is a few levels deep)") from None


class ExperimentAdminForm(forms.ModelForm):
    config = ConfigField(
        widget=forms.Textarea(attrs={"rows": 20, "cols": 100}),
        help_text="The experiment config (JSON); validated by the trainer's schema, and a new version when it changes.",
    )

    class Meta:
        model = Experiment
        fields = "__all__"


class OwnRowsAdmin(admin.ModelAdmin):
    """Staff see and steer their own rows here; others' only with the model permission."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def get_queryset(self, request):
        return super().get_queryset(request) & self.model.objects.visible_to(request.user)

    def has_view_permission(self, request, obj=None):
        if not self.has_module_permission(request):
            return False
        return obj is None or self.model.objects.visible_to(request.user).filter(pk=obj.pk).exists()

    def has_change_permission(self, request, obj=None):
        # without obj: may this user change some row (their own, at least); each row is checked
        if not self.has_module_permission(request):
            return False
        return obj is None or may_change(request.user, obj)


@admin.register(Experiment)
class ExperimentAdmin(OwnRowsAdmin):
    list_display = ("id", "name", "owner", "updated_at", "created_at")
    list_display_links = ("id", "name")
    list_filter = ("owner",)
    list_select_related = ("owner",)
    search_fields = ("name", "description", "owner__username")
    date_hierarchy = "updated_at"
    form = ExperimentAdminForm
    fields = ("owner", "name", "description", "config", "created_at", "updated_at")
    readonly_fields = ("created_at", "updated_at")
    inlines = [ConfigVersionInline]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.has_perm("experiments.change_experiment"):
            fields.append("owner")  # only someone who may change everyone's experiments hands one over
        return fields

    def save_model(self, request, obj, form, change):
        """The form has run `Experiment.clean` (schema, dataset roots); store a new version."""
        if not obj.owner_id:
            obj.owner = request.user
        obj.set_config(obj.config, user=request.user, note="admin")


# --- runs -------------------------------------------------------------------------------------


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ("step", "path", "size_bytes", "created_at")
    readonly_fields = fields


@admin.register(Run)
class RunAdmin(OwnRowsAdmin):
    list_display = (
        "id",
        "experiment",
        "owner",
        "status",
        "progress_steps",
        "restarts",
        "worker_host",
        "heartbeat_at",
        "created_at",
    )
    list_display_links = ("id", "experiment")
    list_filter = ("status", ("experiment__owner", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("experiment__owner",)
    search_fields = ("=id", "experiment__name", "worker_host", "experiment__owner__username")
    date_hierarchy = "created_at"
    # the run actions (cancel, pause, ...) are added by runner.admin, which owns them
    inlines = [CheckpointInline]
    fieldsets = [
        (
            None,
            {
                "fields": (
                    "experiment",
                    "config_version",
                    "status",
                    "progress_steps",
                    "latest_reward",
                    "error",
                    "params_digest",
                    "links",
                )
            },
        ),
        (
            "Supervision",
            {"fields": ("attempt", "restarts", "max_restarts", "queue", "worker_host", "worker_pid", "heartbeat_at")},
        ),
        ("Times", {"fields": ("created_at", "queued_at", "started_at", "finished_at", "running_s")}),
        ("Config and run directory", {"classes": ["collapse"], "fields": ("config_pretty", "run_dir")}),
        ("Recent events", {"fields": ("recent_events",)}),
    ]
    readonly_fields = (
        "experiment",
        "config_version",
        "status",
        "progress_steps",
        "latest_reward",
        "error",
        "params_digest",
        "links",
        "attempt",
        "restarts",
        "queue",
        "worker_host",
        "worker_pid",
        "heartbeat_at",
        "created_at",
        "queued_at",
        "started_at",
        "finished_at",
        "running_s",
        "config_pretty",
        "run_dir",
        "recent_events",
    )

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
        return format_html_join(
            " · ", "<a href='{}?run__id__exact={}'>{}</a>", ((url, obj.pk, label) for label, url in items)
        )

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


from experiments import dataset_admin  # noqa: E402, F401 - registers the datasets' admin

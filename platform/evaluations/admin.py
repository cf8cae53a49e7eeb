"""Admin pages for evaluation jobs (read-only results: the worker's record; delete to clean up),
their samples inline, and runs' evaluate-on-end requests."""

from __future__ import annotations

from django.contrib import admin

from evaluations.models import EvaluateOnEnd, EvaluationJob, EvaluationSample


class SampleInline(admin.TabularInline):
    model = EvaluationSample
    fields = ("index", "prompt", "completion", "answer", "reward", "correct", "samples_correct")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    max_num = 0


@admin.register(EvaluationJob)
class EvaluationJobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "owner",
        "policy_label",
        "dataset_label",
        "status",
        "accuracy",
        "pass_at_k",
        "k",
        "created_at",
    )
    list_filter = ("status", "dataset_kind")
    search_fields = ("dataset_label", "model_path", "owner__username", "error")
    readonly_fields = (
        "status",
        "progress_done",
        "progress_total",
        "error",
        "accuracy",
        "pass_at_1",
        "pass_at_k",
        "reward_mean",
        "started_at",
        "finished_at",
        "heartbeat_at",
        "attempts",
        "created_at",
        "dataset_key",
    )
    raw_id_fields = ("owner", "checkpoint", "run", "dataset", "requested_by_run")
    inlines = [SampleInline]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("owner", "run")


@admin.register(EvaluateOnEnd)
class EvaluateOnEndAdmin(admin.ModelAdmin):
    list_display = ("run", "dataset_kind", "task", "dataset", "k", "prompts", "job", "created_at")
    raw_id_fields = ("run", "dataset", "job")

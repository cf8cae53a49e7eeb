"""The admin for who may queue what: per-user run limits and the queues users may launch to."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin

from runner.models import RunQueue, UserLimits
from runner.queues import live_workers_reading


@admin.register(UserLimits)
class UserLimitsAdmin(admin.ModelAdmin):
    list_display = ("user", "max_active_runs", "max_queued_runs", "max_sequences_per_step", "max_tokens_per_step",
                    "storage_quota_bytes")
    search_fields = ("user__username",)
    list_select_related = ("user",)
    raw_id_fields = ("user",)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.base_fields["max_active_runs"].help_text += (
            f" The server's default is {settings.PLATFORM_MAX_ACTIVE_RUNS_PER_USER}.")
        form.base_fields["max_queued_runs"].help_text += (
            f" The server's default is {settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER}.")
        form.base_fields["max_sequences_per_step"].help_text += (
            f" The server's default is {settings.PLATFORM_MAX_SEQUENCES_PER_STEP}.")
        form.base_fields["max_tokens_per_step"].help_text += (
            f" The server's default is {settings.PLATFORM_MAX_TOKENS_PER_STEP}.")
        form.base_fields["storage_quota_bytes"].help_text += (
            f" The server's default is {settings.PLATFORM_STORAGE_QUOTA_BYTES}.")
        return form


@admin.register(RunQueue)
class RunQueueAdmin(admin.ModelAdmin):
    list_display = ("name", "description", "is_default", "open_to_everyone", "workers")
    list_filter = ("is_default", "open_to_everyone")
    search_fields = ("name", "description")
    filter_horizontal = ("users", "groups")

    @admin.display(description="live workers reading it")
    def workers(self, obj):
        return ", ".join(live_workers_reading(obj.name)) or "none"

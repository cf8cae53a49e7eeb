"""The runner's admin: who may queue what (per-user run limits, the queues users may launch to),
the live workers with the runs each one holds, and the run actions (cancel, pause, resume, requeue)
on experiments.admin's run list, through runner.services so the state machine holds."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html_join

from experiments.admin import ReadOnlyAdmin
from experiments.admin import RunAdmin as ExperimentsRunAdmin
from experiments.models import Run
from runner import services
from runner.models import RayHost, RunQueue, UserLimits, Worker
from runner.queues import live_workers_reading


@admin.register(UserLimits)
class UserLimitsAdmin(admin.ModelAdmin):
    list_display = (
        "user",
        "max_active_runs",
        "max_queued_runs",
        "max_sequences_per_step",
        "max_tokens_per_step",
        "storage_quota_bytes",
    )
    search_fields = ("user__username",)
    list_select_related = ("user",)
    raw_id_fields = ("user",)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.base_fields[
            "max_active_runs"
        ].help_text += f" The server's default is {settings.PLATFORM_MAX_ACTIVE_RUNS_PER_USER}."
        form.base_fields[
            "max_queued_runs"
        ].help_text += f" The server's default is {settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER}."
        form.base_fields[
            "max_sequences_per_step"
        ].help_text += f" The server's default is {settings.PLATFORM_MAX_SEQUENCES_PER_STEP}."
        form.base_fields[
            "max_tokens_per_step"
        ].help_text += f" The server's default is {settings.PLATFORM_MAX_TOKENS_PER_STEP}."
        form.base_fields[
            "storage_quota_bytes"
        ].help_text += f" The server's default is {settings.PLATFORM_STORAGE_QUOTA_BYTES}."
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


# --- run actions --------------------------------------------------------------------------------


def _run_action(action: services.RunAction):
    """An admin action applying `action` to each selected run this user may steer."""

    def apply(modeladmin, request, queryset):
        runs = list(queryset.select_related("experiment"))
        steerable = set(
            Run.objects.steerable_by(request.user).filter(pk__in=[r.pk for r in runs]).values_list("pk", flat=True)
        )
        refused: list[str] = []

        def apply_one(run) -> bool:
            try:
                return action.function(run)
            except services.LaunchRefused as exc:  # over the owner's limits (runner.limits)
                refused.append(f"run {run.pk}: {exc.message}")
                return False

        changed = sum(1 for run in runs if run.pk in steerable and apply_one(run))
        for reason in refused:
            modeladmin.message_user(request, reason, messages.ERROR)
        level = messages.SUCCESS if changed == len(runs) else messages.WARNING
        modeladmin.message_user(
            request,
            f"{action.label}: {changed} of {len(runs)} run(s) {action.done}"
            + (
                ""
                if changed == len(runs)
                else "; the others were in a status that does not allow it"
                + ("" if len(steerable) == len(runs) else ", or not yours to steer")
            ),
            level,
        )

    apply.__name__ = f"{action.label.lower()}_runs"
    return admin.action(description=f"{action.label} selected runs", permissions=["change"])(apply)


class RunAdmin(ExperimentsRunAdmin):
    """experiments.admin's run list and page, with the runner's actions."""

    actions = [_run_action(a) for a in services.ACTIONS.values()]


admin.site.unregister(Run)
admin.site.register(Run, RunAdmin)


# --- workers ------------------------------------------------------------------------------------


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

    def changelist_view(self, request, extra_context=None):
        """Below the workers: the Ray cluster's hosts and devices while multi-host runs use Ray
        (runner.models.RayHost; templates/admin/runner/worker/change_list.html)."""
        return super().changelist_view(request, {**(extra_context or {}), "ray_hosts": list(RayHost.objects.all())})

    @admin.display(boolean=True, description="alive")
    def alive(self, obj):
        return obj.is_alive

    @admin.display(description="current runs")
    def runs(self, obj):
        held = list(obj.current_runs.select_related("experiment"))
        if not held:
            return "-"
        return format_html_join(
            ", ",
            "<a href='{}'>run {} ({}, {}, step {})</a>",
            (
                (reverse("admin:experiments_run_change", args=[r.pk]), r.pk, r.experiment.name, r.status, r.step)
                for r in held
            ),
        )

"""The admin of uploaded datasets (registered when experiments.admin is loaded)."""

from __future__ import annotations

from django.contrib import admin

from experiments.dataset_models import Dataset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Uploaded datasets (experiments.dataset_models). Rows are added by uploads (the Datasets page,
    POST /api/datasets), which check the file; here an operator edits the description and who it is
    shared with, or deletes one (its file goes too; unlike the page and the API, without checking
    whether experiments name it). Staff see their own and those shared with them; others' with the
    model permission."""

    list_display = ("id", "name", "owner", "rows", "size_bytes", "created_at")
    list_display_links = ("id", "name")
    list_filter = ("owner",)
    list_select_related = ("owner",)
    search_fields = ("name", "description", "owner__username")
    fields = (
        "owner",
        "name",
        "description",
        "shared_with",
        "path",
        "size_bytes",
        "rows",
        "sha256",
        "preview",
        "created_at",
    )
    readonly_fields = ("owner", "name", "path", "size_bytes", "rows", "sha256", "preview", "created_at")
    filter_horizontal = ("shared_with",)

    def get_queryset(self, request):
        return super().get_queryset(request) & Dataset.objects.visible_to(request.user)

    def has_add_permission(self, request):
        return False

    def _owner_or(self, request, obj, action: str) -> bool:
        if not (request.user.is_active and request.user.is_staff):
            return False
        return request.user.has_perm(f"experiments.{action}_dataset") or obj is None or obj.owner_id == request.user.pk

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request) and (
            obj is None or Dataset.objects.visible_to(request.user).filter(pk=obj.pk).exists()
        )

    def has_change_permission(self, request, obj=None):
        return self._owner_or(request, obj, "change")

    def has_delete_permission(self, request, obj=None):
        return self._owner_or(request, obj, "delete")

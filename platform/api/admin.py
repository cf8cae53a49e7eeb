"""API tokens in the admin: create one for a user (the key is generated), see whose is whose,
regenerate a leaked one."""

from __future__ import annotations

from django.contrib import admin

from api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "key_prefix", "created_at")
    search_fields = ("user__username",)
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    actions = ["regenerate"]

    def get_fields(self, request, obj=None):
        return ("user",) if obj is None else ("user", "key", "created_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", "key", "created_at")

    @admin.display(description="key")
    def key_prefix(self, obj):
        return f"{obj.key[:6]}…"

    def save_model(self, request, obj, form, change):
        if not obj.key:
            obj.key = ApiToken.new_key()
        super().save_model(request, obj, form, change)

    @admin.action(description="Regenerate the selected tokens (the old keys stop working)")
    def regenerate(self, request, queryset):
        count = 0
        for token in queryset:
            token.key = ApiToken.new_key()
            token.save(update_fields=["key"])
            count += 1
        self.message_user(request, f"Regenerated {count} token(s).")

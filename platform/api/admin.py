"""API tokens in the admin: issue one for a user (the key is generated and shown once in a
message), see whose is whose and when each was last used, revoke or regenerate a leaked one."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils import timezone

from api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "key_prefix", "created_at", "expires_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("user__username", "name", "prefix")
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    actions = ["revoke", "regenerate"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name", "expires_at")
        return ("user", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", "prefix", "created_at", "last_used_at", "revoked_at")

    @admin.display(description="key")
    def key_prefix(self, obj):
        return f"{obj.prefix}…"

    def save_model(self, request, obj, form, change):
        if not obj.key_hash:
            obj.set_key(ApiToken.new_key())
            self.message_user(
                request, f"The new key for {obj.user}: {obj.key} (shown once: copy it now).", messages.WARNING
            )
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")

    @admin.action(description="Regenerate the selected tokens (the old keys stop working)")
    def regenerate(self, request, queryset):
        for token in queryset.select_related("user"):
            token.set_key(ApiToken.new_key())
            token.save(update_fields=["key_hash", "prefix"])
            self.message_user(
                request,
                f"The new key of {token.user}'s token {token.name or token.pk}: {token.key} (shown once: copy it now).",
                messages.WARNING,
            )

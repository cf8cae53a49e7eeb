"""API tokens: `Authorization: Token <key>` authenticates as the token's user."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token")
    key = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"token of {self.user}"

    @staticmethod
    def new_key() -> str:
        """A fresh random key: 40 hex characters (160 bits)."""
        return secrets.token_hex(20)

    @classmethod
    def for_user(cls, user, create: bool = True) -> "ApiToken | None":
        token = cls.objects.filter(user=user).first()
        if token is None and create:
            token = cls.objects.create(user=user, key=cls.new_key())
        return token

"""API tokens: `Authorization: Token <key>` authenticates as the token's user.

A key is shown once, when it is issued; the database keeps only its SHA-256 (`key_hash`) and its
first characters (`prefix`, to tell tokens apart in lists). A user may hold several tokens, each
with a name, an optional expiry and a revocation time; api.auth refuses expired and revoked ones
with the reason.
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

PREFIX_CHARS = 8


def hash_key(key: str) -> str:
    """The stored form of a key: its SHA-256 as 64 hex characters."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for (e.g. 'laptop', 'CI').")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=PREFIX_CHARS, editable=False, help_text="The key's first characters.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    key: str | None = None  # the plain key, only on the instance that issued it (never stored)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'token'} of {self.user})"

    @staticmethod
    def new_key() -> str:
        """A fresh random key: 40 hex characters (160 bits)."""
        return secrets.token_hex(20)

    def set_key(self, key: str) -> None:
        """Store `key` hashed; keep it in plain on this instance (`.key`) for the caller to show once."""
        self.key, self.key_hash, self.prefix = key, hash_key(key), key[:PREFIX_CHARS]

    @classmethod
    def issue(cls, user, name: str = "", expires_at=None) -> ApiToken:
        """A new token for `user`; its plain key is on the returned instance's `.key`, and nowhere else."""
        token = cls(user=user, name=name, expires_at=expires_at)
        token.set_key(cls.new_key())
        token.save()
        return token

    @classmethod
    def for_user(cls, user, create: bool = True) -> ApiToken:
        """Kept for older callers: issues a new token (named "default"), its key on `.key`. An
        existing token's key cannot be shown again (only its hash is stored)."""
        return cls.issue(user, name="default")

    @classmethod
    def find(cls, key: str) -> ApiToken | None:
        return cls.objects.select_related("user").filter(key_hash=hash_key(key)).first()

    def refusal(self, now=None) -> str | None:
        """Why this token does not authenticate now (revoked, expired), or None."""
        now = now or timezone.now()
        if self.revoked_at is not None:
            return f"API token {self.prefix}… was revoked at {self.revoked_at:%Y-%m-%d %H:%M} UTC"
        if self.expires_at is not None and self.expires_at <= now:
            return f"API token {self.prefix}… expired at {self.expires_at:%Y-%m-%d %H:%M} UTC"
        return None

    @property
    def is_usable(self) -> bool:
        return self.refusal() is None

    def revoke(self) -> bool:
        """Revoke now; False if it already was."""
        changed = ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.refresh_from_db(fields=["revoked_at"])
        return changed == 1

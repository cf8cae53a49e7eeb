"""`python manage.py apitoken USERNAME [--create] [--name NAME] [--expires-days N]`: issue a new API
token for a user and print its key (stdout, one line; a note goes to stderr).

Keys are stored hashed, so an existing token's key cannot be printed again: every call issues a
new token (older ones keep working until they expire or are revoked on the "API tokens" page or in
the admin). `--create` is accepted for older scripts and changes nothing.
"""

from __future__ import annotations

import datetime

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from api.models import ApiToken

MAX_EXPIRES_DAYS = 3650


class Command(BaseCommand):
    help = (
        "Issue a new API token for USERNAME and print its key, for `Authorization: Token <key>` on /api/. "
        "Keys are stored hashed, so an existing key cannot be shown again: each call makes a new token "
        "(older ones keep working until revoked). The user must exist (manage.py createsuperuser or the admin)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="the user to issue the token for")
        parser.add_argument(
            "--create", action="store_true", help="accepted for older scripts; every call creates a new token"
        )
        parser.add_argument("--name", default="cli", help="what the token is for (default: cli)")
        parser.add_argument(
            "--expires-days",
            type=int,
            default=None,
            help=f"expire after this many days (1-{MAX_EXPIRES_DAYS}; default: never)",
        )

    def handle(self, *args, username: str, name: str, expires_days: int | None, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"no user named {username!r}; create one first (manage.py createsuperuser)") from None
        if expires_days is not None and not 1 <= expires_days <= MAX_EXPIRES_DAYS:
            raise CommandError(f"--expires-days must be from 1 to {MAX_EXPIRES_DAYS}")
        expires_at = timezone.now() + datetime.timedelta(days=expires_days) if expires_days else None
        token = ApiToken.issue(user, name=name[:100], expires_at=expires_at)
        self.stdout.write(token.key)
        self.stderr.write(
            f"a new API token {token.prefix}… for {username}"
            + (f", expires {expires_at:%Y-%m-%d}" if expires_at else "")
            + "; keys are stored hashed: keep this one, it cannot be shown again"
        )

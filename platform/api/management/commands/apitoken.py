"""`python manage.py apitoken USERNAME [--create]`: print a user's API token."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from api.models import ApiToken


class Command(BaseCommand):
    help = (
        "Print USERNAME's API token, for `Authorization: Token <token>` on /api/. "
        "With --create, make the token first if the user has none. "
        "The user must exist (create one with `manage.py createsuperuser` or the admin)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="the user whose token to print")
        parser.add_argument("--create", action="store_true",
                            help="create the user's token if it does not exist yet (an existing token is kept)")

    def handle(self, *args, username: str, create: bool, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"no user named {username!r}; create one first (manage.py createsuperuser)") from None
        token = ApiToken.for_user(user, create=create)
        if token is None:
            raise CommandError(f"{username} has no API token yet; run again with --create to make one")
        self.stdout.write(token.key)

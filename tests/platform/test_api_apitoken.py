"""`manage.py apitoken USERNAME [--create]`."""

from __future__ import annotations

from io import StringIO

import pytest
from api.models import ApiToken
from django.core.management import CommandError, call_command


def apitoken(*args) -> str:
    out = StringIO()
    call_command("apitoken", *args, stdout=out)
    return out.getvalue().strip()


def test_create_then_print_the_same_token(alice):
    with pytest.raises(CommandError, match="--create"):
        apitoken("alice")
    key = apitoken("alice", "--create")
    assert key == ApiToken.objects.get(user=alice).key and len(key) == 40
    assert apitoken("alice") == key
    assert apitoken("alice", "--create") == key  # an existing token is kept


def test_unknown_user(db):
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        apitoken("nobody", "--create")
    assert ApiToken.objects.count() == 0


def test_the_printed_token_authenticates(alice, client):
    key = apitoken("alice", "--create")
    assert client.get("/api/experiments", headers={"authorization": f"Token {key}"}).status_code == 200

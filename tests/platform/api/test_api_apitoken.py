"""`manage.py apitoken USERNAME [--create] [--name N] [--expires-days D]`."""

from __future__ import annotations

import hashlib
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from api.models import ApiToken


def apitoken(*args) -> str:
    out = StringIO()
    call_command("apitoken", *args, stdout=out)
    return out.getvalue().strip()


def test_each_call_issues_a_new_hashed_token(alice):
    """Keys are stored hashed, so the command cannot print an existing one: every call (with or
    without --create) issues a new token; the older ones keep working."""
    first = apitoken("alice")
    second = apitoken("alice", "--create", "--name", "laptop")
    assert len(first) == 40 and len(second) == 40 and first != second
    tokens = {t.prefix: t for t in ApiToken.objects.filter(user=alice)}
    assert set(tokens) == {first[:8], second[:8]} and tokens[second[:8]].name == "laptop"
    assert hashlib.sha256(first.encode()).hexdigest() == tokens[first[:8]].key_hash  # only the hash is stored
    assert all(first not in str(v) for v in ApiToken.objects.values().first().values())


def test_expires_days(alice):
    key = apitoken("alice", "--expires-days", "7")
    token = ApiToken.objects.get(prefix=key[:8])
    assert 6.99 < (token.expires_at - token.created_at).total_seconds() / 86400 < 7.01
    with pytest.raises(CommandError, match="--expires-days"):
        apitoken("alice", "--expires-days", "0")


def test_unknown_user(db):
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        apitoken("nobody", "--create")
    assert ApiToken.objects.count() == 0


def test_the_printed_token_authenticates(alice, client):
    key = apitoken("alice", "--create")
    assert client.get("/api/experiments", headers={"authorization": f"Token {key}"}).status_code == 200

"""API tokens stored hashed: shown once, several per user, optional expiry, revocable (the web
page, the admin, the API's 401 reasons), and migration 0002 hashing existing keys."""

from __future__ import annotations

import datetime
import hashlib

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from api.models import ApiToken, hash_key


def api_get(key: str):
    return Client(headers={"authorization": f"Token {key}"}).get("/api/runs")


def test_only_the_hash_and_a_prefix_are_stored(alice):
    token = ApiToken.issue(alice, name="laptop")
    assert len(token.key) == 40
    assert token.key_hash == hashlib.sha256(token.key.encode()).hexdigest() == hash_key(token.key)
    assert token.prefix == token.key[:8]
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.key is None and token.key not in repr(ApiToken.objects.filter(pk=token.pk).values().get())
    assert ApiToken.find(token.key) == token and ApiToken.find(token.key + "x") is None


def test_several_tokens_per_user_each_works(alice):
    first, second = ApiToken.issue(alice, name="a"), ApiToken.issue(alice, name="b")
    assert api_get(first.key).status_code == 200 and api_get(second.key).status_code == 200
    assert alice.api_tokens.count() == 2


def test_expired_and_revoked_tokens_answer_401_with_the_reason(alice):
    past = timezone.now() - datetime.timedelta(minutes=1)
    expired = ApiToken.issue(alice, expires_at=past)
    response = api_get(expired.key)
    assert response.status_code == 401
    assert response.json()["error"].startswith(f"API token {expired.prefix}… expired at {past:%Y-%m-%d %H:%M} UTC")
    future = ApiToken.issue(alice, expires_at=timezone.now() + datetime.timedelta(days=1))
    assert api_get(future.key).status_code == 200
    assert future.revoke() and not future.revoke()  # the second time: already revoked
    response = api_get(future.key)
    assert response.status_code == 401 and "was revoked at" in response.json()["error"]


def test_last_used_is_recorded_at_most_once_a_minute(alice):
    token = ApiToken.issue(alice)
    assert token.last_used_at is None
    api_get(token.key)
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    api_get(token.key)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - datetime.timedelta(minutes=2))
    api_get(token.key)
    assert ApiToken.objects.get(pk=token.pk).last_used_at > first - datetime.timedelta(minutes=2)


def test_tokens_page_creates_shows_the_key_once_and_revokes(alice_client, alice):
    page = alice_client.get(reverse("api-tokens"))
    assert page.status_code == 200 and "No tokens yet." in page.content.decode()
    created = alice_client.post(reverse("api-tokens"), {"name": "ci", "expires_in_days": "30"})
    assert created.status_code == 200 and created["Cache-Control"] == "no-store"
    html = created.content.decode()
    token = ApiToken.objects.get(user=alice)
    key = html.split('<code id="new-token-key">')[1].split("</code>")[0]
    assert ApiToken.find(key) == token and token.name == "ci"
    assert 29.9 < (token.expires_at - timezone.now()).total_seconds() / 86400 < 30.1
    listing = alice_client.get(reverse("api-tokens")).content.decode()
    assert key not in listing and f"{token.prefix}…" in listing and "active" in listing  # shown once
    assert api_get(key).status_code == 200
    response = alice_client.post(reverse("api-token-revoke", args=[token.pk]), follow=True)
    assert f"Revoked token {token.prefix}… (ci)." in response.content.decode()
    assert api_get(key).status_code == 401


def test_tokens_page_bad_expiry_is_400(alice_client):
    response = alice_client.post(reverse("api-tokens"), {"name": "x", "expires_in_days": "12"})
    assert response.status_code == 400 and ApiToken.objects.count() == 0


def test_someone_elses_token_cannot_be_revoked_or_seen(client, alice, bob, staff):
    token = ApiToken.issue(alice, name="alices")
    for user in (bob, staff):  # staff revoke in the admin, not on this page
        client.force_login(user)
        assert client.post(reverse("api-token-revoke", args=[token.pk])).status_code == 404
        assert "alices" not in client.get(reverse("api-tokens")).content.decode()
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None
    client.logout()
    assert client.post(reverse("api-token-revoke", args=[token.pk])).status_code == 302  # to the login page


def test_nav_links_the_tokens_page(alice_client):
    assert 'id="nav-api-tokens"' in alice_client.get(reverse("experiment-list")).content.decode()


def test_admin_revokes(admin_client, alice):
    token = ApiToken.issue(alice)
    admin_client.post(reverse("admin:api_apitoken_changelist"), {"action": "revoke", "_selected_action": [token.pk]})
    assert api_get(token.key).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_migration_0002_hashes_existing_keys():
    """A token saved before 0002 (a plain key) still authenticates after it, stored only hashed."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([("api", "0001_initial")])
    old_apps = executor.loader.project_state([("api", "0001_initial")]).apps
    user = get_user_model().objects.create_user("olduser", password="olduser-pass-123")
    OldToken = old_apps.get_model("api", "ApiToken")
    OldToken.objects.create(user_id=user.pk, key="0123456789abcdef0123456789abcdef01234567")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    token = ApiToken.objects.get(user=user)
    assert token.key_hash == hashlib.sha256(b"0123456789abcdef0123456789abcdef01234567").hexdigest()
    assert (token.prefix, token.name) == ("01234567", "default")
    assert api_get("0123456789abcdef0123456789abcdef01234567").status_code == 200

"""Fixtures shared by the platform tests: users, logged-in clients, a tiny valid config."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from django.contrib.auth import get_user_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from platform_testlib import tiny_config  # noqa: E402


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Users are created in many tests; the default hasher costs ~0.5 s each, MD5 nothing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def sent_messages(monkeypatch):
    """Replace the queue send with a fake; the list collects (run_id, attempt, queue)."""
    import runner.services

    sent: list[tuple[int, int, str]] = []
    monkeypatch.setattr(
        runner.services, "send_run_message", lambda run_id, attempt, queue: sent.append((run_id, attempt, queue))
    )
    return sent


@pytest.fixture(name="tiny_config")
def tiny_config_fixture():
    """The `tiny_config(**overrides)` function, e.g. tiny_config(train__max_steps=3)."""
    return tiny_config


@pytest.fixture
def alice(db):
    return get_user_model().objects.create_user("alice", password="alice-pass-123")


@pytest.fixture
def bob(db):
    return get_user_model().objects.create_user("bob", password="bob-pass-123")


@pytest.fixture
def staff(db):
    """A superuser: every permission."""
    return get_user_model().objects.create_user("staff", password="staff-pass-123", is_staff=True, is_superuser=True)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def _staff_with(username: str, *codenames: str):
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username, password=f"{username}-pass-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="experiments", codename__in=codenames))
    return get_user_model().objects.get(pk=user.pk)  # a fresh object: no stale permission cache


@pytest.fixture
def plain_staff(db):
    """Staff (may open the admin) without any model permission: sees and steers only their own."""
    return _staff_with("plainstaff")


@pytest.fixture
def viewer(db):
    """Staff with the view permissions on experiments and runs: may see everyone's, steer only their own."""
    return _staff_with("viewer", "view_experiment", "view_run")


@pytest.fixture
def changer(db):
    """Staff with the change permissions on experiments and runs: may see and steer everyone's."""
    return _staff_with("changer", "change_experiment", "change_run")


@pytest.fixture
def restore_signals():
    """The worker code under test installs SIGTERM/SIGINT handlers; put pytest's back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)

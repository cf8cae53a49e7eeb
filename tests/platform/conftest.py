"""Fixtures shared by the platform tests: users, logged-in clients, a tiny valid config."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

# The *_testlib.py helpers live here, the tests in one folder per app; a test module may import
# another's fixtures by its module name (`from test_browser import served_platform`), so each
# folder is on the path, as pytest puts the folder of a test file it collects.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
for _folder in sorted(os.listdir(HERE)):
    if os.path.isdir(os.path.join(HERE, _folder)) and not _folder.startswith(("_", ".")):
        sys.path.insert(1, os.path.join(HERE, _folder))
from platform_testlib import BROWSER_WAIT_MS, tiny_config  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

expect.set_options(timeout=BROWSER_WAIT_MS)  # every Playwright assertion in the platform tests


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


# ---------------------------------------------------------------- markers (registered in pytest.ini)

BOTH_DATABASES = {
    # the embedded default's own paths: the filesystem broker, SQLite's locking, `serve`
    "test_runner_e2e.py": "a worker trains, is killed, resumes through the broker",
    "test_sweep_e2e.py": "a sweep's trials queue, train and prune end to end",
    "test_evaluation_e2e.py": "evaluation jobs queue and run on a worker",
    "test_alert_e2e.py": "a failing run's alert leaves through the worker",
    "test_cancel_and_pause_of_a_busy_trainer.py": "pause and cancel reach a busy trainer through the database",
    "test_runner_serve.py": "`serve` starts everything on the embedded default",
    "test_serve_console.py": "the README's first command",
    "test_runner_units.py": "the supervisor's heartbeats, reaping and requeueing",
    "test_stalls_and_heartbeat.py": "the heartbeat thread writes beside the watch loop and the trainer",
    "test_scheduler_isolation.py": "concurrent schedulers lock rows",
    "test_run_limits.py": "per-user limits counted under concurrent launches",
    # queries whose SQL differs by database (vendor branches, JSON, bytea, text search)
    "test_metric_series.py": "metric series packed per vendor",
    "test_rollout_browser.py": "the sample query's vendor branch",
    "test_run_filters.py": "filters on JSON config fields",
    "test_leaderboard_measures.py": "aggregates over evaluation samples",
    "test_sweep_scheduler.py": "trials claimed and counted in the database",
    "test_platform_models.py": "the models' constraints and cascades",
    "test_hostile_input.py": "text the databases store differently (NUL, long strings)",
    "test_dataset_paths.py": "the SQLite file is outside every dataset folder",
}
"""The test files that run on both databases (`-m both_databases`). The whole platform suite runs
on PostgreSQL + Redis (production's path); these run again on SQLite + the filesystem broker,
because what they test differs between the two. The reason is next to each."""

E2E_FIXTURES = {"procs", "platform_env", "one_node_ray"}
"""Fixtures that start real platform processes (worker, beat, serve, Ray): a test using one is `e2e`."""


def pytest_collection_modifyitems(config, items):
    """Mark each platform test: `both_databases` (BOTH_DATABASES), `e2e` (starts real processes),
    `browser` (drives a headless Chromium), `slow` (either of those, or a run trained in the test's
    own process)."""
    here = Path(__file__).parent
    for item in items:
        if here not in item.path.parents:
            continue
        if item.path.name in BOTH_DATABASES:
            item.add_marker(pytest.mark.both_databases)
        e2e = bool(E2E_FIXTURES & set(getattr(item, "fixturenames", ())))
        browser = "logged_in_page" in getattr(item, "fixturenames", ()) or hasattr(item.module, "CHROMIUM")
        if e2e:
            item.add_marker(pytest.mark.e2e)
        if browser:
            item.add_marker(pytest.mark.browser)
        if e2e or browser or "restore_signals" in getattr(item, "fixturenames", ()):  # the last: trains in-process
            item.add_marker(pytest.mark.slow)

"""Login throttling (django-axes per username + address, and per address for any usernames), the
security headers (CSP always; the TLS-proxy settings with PLATFORM_TLS_PROXY=1) and Django's
standard password validators."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth import authenticate, password_validation
from django.core.exceptions import ValidationError
from django.db.models import F
from django.test import Client
from django.urls import reverse


def login(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


# --- throttling ----------------------------------------------------------------------------------


def test_repeated_failures_lock_that_username_and_address(alice, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    assert [login(client, "alice", "wrong").status_code for _ in range(2)] == [200, 200]  # the form again
    locked = login(client, "alice", "wrong")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed logins" in page and "3 failed logins" in page and "0:15:00" in page
    assert login(client, "alice", "alice-pass-123").status_code == 429  # even the right password, for a while
    assert login(Client(), "alice", "alice-pass-123", address="10.0.0.2").status_code == 302  # another address
    assert login(Client(), "bob", "wrong").status_code == 200  # another username from the same address


def test_a_success_resets_the_count(alice, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    for _ in range(2):
        login(client, "alice", "wrong")
    assert login(client, "alice", "alice-pass-123").status_code == 302
    assert [login(Client(), "alice", "wrong").status_code for _ in range(2)] == [200, 200]


def test_the_cooloff_ends(alice, settings):
    from axes.models import AccessAttempt

    settings.AXES_FAILURE_LIMIT = 2
    for _ in range(2):
        login(Client(), "alice", "wrong")
    assert login(Client(), "alice", "alice-pass-123").status_code == 429
    cooloff = datetime.timedelta(hours=settings.AXES_COOLOFF_TIME)
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - cooloff - datetime.timedelta(seconds=1))
    assert login(Client(), "alice", "alice-pass-123").status_code == 302


def test_spraying_many_usernames_from_one_address_locks_that_address(alice, settings):
    """Below the per-username limit for each of 8 usernames, but 8 x 2 failures from one address:
    the address is refused (even alice's right password), another address is not."""
    settings.AXES_FAILURE_LIMIT, settings.PLATFORM_LOGIN_IP_FAILURE_LIMIT = 3, 16
    names = ["alice"] + [f"user{i}" for i in range(7)]
    statuses = [login(Client(), name, "wrong", address="10.0.0.7").status_code for name in names for _ in range(2)]
    assert statuses[:15] == [200] * 15 and statuses[15] == 429  # the 16th failure locks the address
    assert login(Client(), "somebody-new", "wrong", address="10.0.0.7").status_code == 429
    assert login(Client(), "alice", "alice-pass-123", address="10.0.0.7").status_code == 429  # during the cool-off
    assert login(Client(), "alice", "alice-pass-123", address="10.0.0.8").status_code == 302


def test_a_success_does_not_clear_the_address_count(alice, settings):
    """A sprayer who logs into an account of their own keeps the address's failures."""
    settings.AXES_FAILURE_LIMIT, settings.PLATFORM_LOGIN_IP_FAILURE_LIMIT = 3, 5
    for name in ("bob", "carol"):
        for _ in range(2):
            login(Client(), name, "wrong")
    assert login(Client(), "alice", "alice-pass-123").status_code == 302
    assert login(Client(), "dave", "wrong").status_code == 429  # the 5th failure from this address


def test_the_address_limit_defaults_to_twenty(settings):
    assert settings.PLATFORM_LOGIN_IP_FAILURE_LIMIT == 20
    assert settings.AXES_HANDLER == "web.login_throttle.LoginThrottleHandler"


def test_admin_login_is_throttled_too(staff, settings):
    settings.AXES_FAILURE_LIMIT = 2
    client = Client()
    url = reverse("admin:login")
    for _ in range(2):
        response = client.post(url, {"username": "staff", "password": "wrong"}, REMOTE_ADDR="10.0.0.9")
    assert response.status_code == 429


def test_authenticate_without_a_request_is_not_throttled(alice, settings):
    """Scripts and the test client's login() call authenticate() without a request: axes' own
    backend would refuse them; ours lets the next backend decide."""
    settings.AXES_FAILURE_LIMIT = 1
    login(Client(), "alice", "wrong")
    assert authenticate(username="alice", password="alice-pass-123") == alice
    assert Client().login(username="alice", password="alice-pass-123")


def test_behind_the_tls_proxy_the_address_is_the_proxys_last_forwarded_one(rf, settings):
    from web.login_throttle import client_ip

    request = rf.get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7")
    settings.PLATFORM_TLS_PROXY = False
    assert client_ip(request) == "10.0.0.1"
    settings.PLATFORM_TLS_PROXY = True
    assert client_ip(request) == "203.0.113.7"


# --- security headers -------------------------------------------------------------------------


def test_every_page_carries_the_csp(alice_client, settings):
    response = alice_client.get(reverse("experiment-list"))
    csp = response["Content-Security-Policy"]
    assert "script-src 'self';" in csp and "object-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-eval" not in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    assert Client().get(reverse("login"))["Content-Security-Policy"] == csp
    settings.PLATFORM_CSP = ""
    assert "Content-Security-Policy" not in alice_client.get(reverse("experiment-list"))


def test_pages_have_no_inline_scripts_or_handlers(settings):
    """What the CSP forbids: inline <script> bodies and on*= attributes in the templates."""
    import re
    from pathlib import Path

    for path in Path(settings.REPO_ROOT, "templates").rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert not re.search(r"\son[a-z]+\s*=", text), path


def settings_with(env: dict, tmp_path, repo_root) -> dict:
    code = (
        "import json, django; from django.conf import settings; django.setup(); "
        "names = ['SECURE_PROXY_SSL_HEADER', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_HSTS_SECONDS', "
        "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_SSL_REDIRECT']; "
        "print(json.dumps({n: getattr(settings, n) for n in names}))"
    )
    full_env = {k: v for k, v in os.environ.items() if k != "PLATFORM_TLS_PROXY"}
    full_env.update(
        PLATFORM_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="grpo_platform.settings", PYTHONPATH="platform", **env
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=full_env, cwd=repo_root, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_tls_proxy_env_turns_on_secure_cookies_hsts_and_redirect(tmp_path, settings):
    off = settings_with({}, tmp_path, settings.REPO_ROOT)
    assert off == {
        "SECURE_PROXY_SSL_HEADER": None,
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
        "SECURE_HSTS_SECONDS": 0,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": False,
        "SECURE_SSL_REDIRECT": False,
    }
    on = settings_with({"PLATFORM_TLS_PROXY": "1"}, tmp_path, settings.REPO_ROOT)
    assert on == {
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_SSL_REDIRECT": True,
    }


def test_behind_the_proxy_https_gets_hsts_and_http_is_redirected(alice, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS, settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = 31536000, True
    settings.SECURE_SSL_REDIRECT = True
    settings.SESSION_COOKIE_SECURE = True
    client = Client()
    plain = client.get(reverse("login"))
    assert plain.status_code == 301 and plain["Location"].startswith("https://")
    secure = client.get(reverse("login"), HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    response = client.post(
        reverse("login"), {"username": "alice", "password": "alice-pass-123"}, HTTP_X_FORWARDED_PROTO="https"
    )
    assert response.cookies["sessionid"]["secure"] is True


# --- password validators ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "password, complaint",
    [
        ("password", "too common"),
        ("short", "too short"),
        ("83719264501", "entirely numeric"),
        ("alice-smith-x", "too similar"),
    ],
)
def test_standard_password_validators_refuse_weak_passwords(alice, password, complaint):
    alice.first_name, alice.last_name = "Alice", "Smith"
    alice.username = "alice-smith-x"
    with pytest.raises(ValidationError) as refused:
        password_validation.validate_password(password, user=alice)
    assert complaint in " ".join(refused.value.messages)


def test_a_strong_password_passes(alice):
    assert password_validation.validate_password("correct horse battery staple 7", user=alice) is None

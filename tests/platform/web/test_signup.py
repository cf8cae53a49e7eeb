"""Self-service sign-up: off by default (accounts/signup/ is a 404 and the login page does not link
it); with PLATFORM_ALLOW_SIGNUP on, anyone may create an account and is logged in."""

from __future__ import annotations

import pytest
from browser_testlib import CHROMIUM, CHROMIUM_ARGS
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.urls import reverse
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright
from web_testlib import fast_passwords  # noqa: F401 (autouse)

NEW_USER = {"username": "carol", "password1": "a long enough passphrase 42", "password2": "a long enough passphrase 42"}


def test_signup_is_off_by_default():
    assert django_settings.PLATFORM_ALLOW_SIGNUP is False  # the tests' environment does not set it


@pytest.mark.django_db
def test_signup_off_is_a_404_and_not_linked(client):
    assert client.get(reverse("signup")).status_code == 404
    assert client.post(reverse("signup"), NEW_USER).status_code == 404
    assert not get_user_model().objects.filter(username="carol").exists()
    login_page = client.get(reverse("login")).content.decode()
    assert 'id="login-form"' in login_page and reverse("signup") not in login_page


@pytest.mark.django_db
def test_signup_on_creates_an_account_and_logs_in(client, settings):
    settings.PLATFORM_ALLOW_SIGNUP = True
    assert f'href="{reverse("signup")}" id="signup-link"' in client.get(reverse("login")).content.decode()
    page = client.get(reverse("signup"))
    assert page.status_code == 200 and 'name="password2"' in page.content.decode()
    response = client.post(reverse("signup"), NEW_USER)
    assert response.status_code == 302 and response["Location"] == reverse("experiment-list")
    user = get_user_model().objects.get(username="carol")
    assert user.check_password(NEW_USER["password1"]) and not user.is_staff and not user.is_superuser
    assert client.get(reverse("experiment-list")).status_code == 200  # logged in as carol
    assert client.get(reverse("signup")).status_code == 302  # nothing to sign up for any more


@pytest.mark.django_db
@pytest.mark.parametrize(
    "changes, field",
    [
        ({"password2": "something else entirely 42"}, "password2"),
        ({"password1": "123", "password2": "123"}, "password2"),  # the password validators
        ({"username": "alice"}, "username"),  # taken
    ],
)
def test_signup_refuses_bad_input_with_a_400(client, settings, alice, changes, field):
    settings.PLATFORM_ALLOW_SIGNUP = True
    response = client.post(reverse("signup"), {**NEW_USER, **changes})
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert get_user_model().objects.count() == 1  # alice only


@pytest.mark.django_db(transaction=True)
def test_signup_in_a_browser(live_server, settings, monkeypatch):
    settings.PLATFORM_ALLOW_SIGNUP = True
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(base_url=live_server.url).new_page()
        set_browser_waits(page)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
        try:
            page.goto(reverse("login"))
            page.click("#signup-link")
            page.fill("[name=username]", NEW_USER["username"])
            page.fill("[name=password1]", NEW_USER["password1"])
            page.fill("[name=password2]", NEW_USER["password2"])
            page.click("#signup-submit")
            page.wait_for_url("**/experiments/")
            expect(page.locator(".username")).to_have_text("carol")
        finally:
            connections.close_all()
            browser.close()
    assert errors == []
    assert get_user_model().objects.filter(username="carol").exists()

"""Login throttling with django-axes (settings: AXES_*, PLATFORM_LOGIN_*): after
AXES_FAILURE_LIMIT failed logins for one username from one client address, that pair is refused
for the cool-off time with the page registration/locked_out.html (HTTP 429); after
PLATFORM_LOGIN_IP_FAILURE_LIMIT failed logins from one address for any usernames (password
spraying), that address is refused the same way, whatever the username.

Why a handler and not `AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]`: axes
compares the largest of those counts with one AXES_FAILURE_LIMIT, so the address would be locked
after 5 failures in all; and a success resets every matching count, so an attacker could clear the
address's count by logging into an account of their own. `LoginThrottleHandler` keeps the pair as
axes' lockout parameter (reset on success) and adds the address's count, within the cool-off, as a
second limit.

Axes' own backend refuses an `authenticate()` call that carries no request; code that calls
`authenticate(username=..., password=...)` without one (Django's test client `login()`, scripts) is
outside any browser, so `LoginThrottleBackend` lets it through to the next backend unthrottled.
The login page, the admin's login and every other form login pass the request and are throttled.
"""

from __future__ import annotations

from axes.attempts import get_cool_off_threshold
from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum


class LoginThrottleBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class LoginThrottleHandler(AxesDatabaseHandler):
    """axes' database handler (AXES_HANDLER) with the limit per address added."""

    def get_failures(self, request, credentials=None) -> int:
        pair_failures = super().get_failures(request, credentials)
        if address_failures(request) >= settings.PLATFORM_LOGIN_IP_FAILURE_LIMIT:
            return max(pair_failures, get_failure_limit(request, credentials))  # locked, as axes counts it
        return pair_failures


def address_failures(request) -> int:
    """Failed logins from the request's address, for any usernames, within the cool-off."""
    recent = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address, attempt_time__gte=get_cool_off_threshold(request)
    )
    return recent.aggregate(total=Sum("failures_since_start"))["total"] or 0


def client_ip(request) -> str:
    """The address a login attempt came from: REMOTE_ADDR, or behind the TLS proxy
    (PLATFORM_TLS_PROXY) the last address of X-Forwarded-For, the one the proxy itself appended
    (the earlier ones are whatever the client sent)."""
    if getattr(settings, "PLATFORM_TLS_PROXY", False):
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        last = forwarded.split(",")[-1].strip()
        if last:
            return last
    return request.META.get("REMOTE_ADDR", "")

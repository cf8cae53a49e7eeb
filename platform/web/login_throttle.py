"""Login throttling with django-axes (settings: AXES_*, PLATFORM_LOGIN_*): after
AXES_FAILURE_LIMIT failed logins for one username from one client address, that pair is refused
for the cool-off time with the page registration/locked_out.html (HTTP 429).

Axes' own backend refuses an `authenticate()` call that carries no request; code that calls
`authenticate(username=..., password=...)` without one (Django's test client `login()`, scripts) is
outside any browser, so `LoginThrottleBackend` lets it through to the next backend unthrottled.
The login page, the admin's login and every other form login pass the request and are throttled.
"""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.conf import settings


class LoginThrottleBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


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

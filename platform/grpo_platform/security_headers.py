"""The Content-Security-Policy header (settings.PLATFORM_CSP; empty = none) on every response that
does not set its own. Django's SecurityMiddleware does the rest (HSTS, nosniff, referrer policy,
the HTTPS redirect; see settings' PLATFORM_TLS_PROXY)."""

from __future__ import annotations

from django.conf import settings

HEADER = "Content-Security-Policy"


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = getattr(settings, "PLATFORM_CSP", "")
        if policy and HEADER not in response:
            response[HEADER] = policy
        return response

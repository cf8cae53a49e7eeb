"""Who is calling the API: `Authorization: Token <key>` (an ApiToken, looked up by the key's hash;
an expired or revoked one answers 401 saying so), else the browser session.

A token request carries no cookie a third-party page could ride on, so it needs no CSRF token; a
session-authenticated request with an unsafe method must pass Django's CSRF check exactly as a
form post would (the `X-CSRFToken` header, or `csrfmiddlewaretoken` in a form body).
"""

from __future__ import annotations

from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone

from api.models import ApiToken

SAFE_METHODS = {"GET", "HEAD", "OPTIONS", "TRACE"}
LAST_USED_PRECISION_S = 60  # a token's last_used_at is updated at most this often


class AuthError(Exception):
    """Authentication failed or is missing: the API answers 401 (403 for a failed CSRF check)."""

    def __init__(self, message: str, status: int = 401):
        super().__init__(message)
        self.message = message
        self.status = status


def token_from_header(header: str) -> str | None:
    """The key of an `Authorization: Token <key>` header; None for no header (or another scheme);
    AuthError for a Token header without a key."""
    scheme, _, key = header.strip().partition(" ")
    if scheme.lower() != "token":
        return None
    key = key.strip()
    if not key or " " in key:
        raise AuthError("malformed Authorization header; use 'Authorization: Token <key>'")
    return key


def authenticate(request):
    """The request's user, authenticated by token or by session, or AuthError. Sets
    `request.api_token_auth` (True for a token) and runs the CSRF check for session requests."""
    key = token_from_header(request.headers.get("Authorization", ""))
    if key is not None:
        token = ApiToken.find(key)
        if token is None or not token.user.is_active:
            raise AuthError("invalid API token")
        refusal = token.refusal()
        if refusal:
            raise AuthError(f"{refusal}; create a new one on the API tokens page")
        note_use(token)
        request.user = token.user
        request.api_token_auth = True
        return token.user
    request.api_token_auth = False
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise AuthError("authentication required: send 'Authorization: Token <key>' or log in")
    if request.method not in SAFE_METHODS:
        reason = check_csrf(request)
        if reason:
            raise AuthError(f"CSRF check failed ({reason}); send the X-CSRFToken header or use a token", status=403)
    return user


def note_use(token: ApiToken) -> None:
    """Record when the token was last used, at most once per LAST_USED_PRECISION_S (no write per request)."""
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() >= LAST_USED_PRECISION_S:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, returning the failure reason instead of an HTML 403 page."""

    def _reject(self, request, reason):
        return reason


def check_csrf(request) -> str | None:
    """None when `request` passes Django's CSRF check, else why not."""
    check = _CsrfCheck(lambda req: None)
    check.process_request(request)
    return check.process_view(request, None, (), {})

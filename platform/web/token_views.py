"""The "API tokens" page: a user's own tokens (name, prefix, created, expires, last used), a form
that issues a new one and shows its key once, and revoking. Keys are stored hashed (api.models)."""

from __future__ import annotations

import datetime

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from api.models import ApiToken

EXPIRY_CHOICES_DAYS = [
    ("", "never"),
    ("7", "in 7 days"),
    ("30", "in 30 days"),
    ("90", "in 90 days"),
    ("365", "in a year"),
]


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, help_text="What it is for, e.g. 'laptop' or 'CI'.")
    expires_in_days = forms.TypedChoiceField(
        choices=EXPIRY_CHOICES_DAYS, coerce=int, empty_value=None, required=False, label="Expires"
    )

    def expires_at(self) -> datetime.datetime | None:
        days = self.cleaned_data.get("expires_in_days")
        return timezone.now() + datetime.timedelta(days=days) if days else None


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request):
    """GET: the page. POST: issue a token and show its key on this one response only."""
    new_token = None
    form = TokenForm(request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            new_token = ApiToken.issue(request.user, name=form.cleaned_data["name"], expires_at=form.expires_at())
            form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user)
    response = render(
        request,
        "web/api_tokens.html",
        {"tokens": tokens, "form": form, "new_token": new_token},
        status=400 if form.errors else 200,
    )
    response["Cache-Control"] = "no-store"  # the page may hold a new key
    return response


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)  # someone else's: 404
    if token.revoke():
        messages.success(request, f"Revoked token {token.prefix}… ({token.name or 'unnamed'}).")
    else:
        messages.info(request, f"Token {token.prefix}… was already revoked.")
    return redirect("api-tokens")

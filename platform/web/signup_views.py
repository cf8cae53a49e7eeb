"""Self-service sign-up (`accounts/signup/`), off unless settings.PLATFORM_ALLOW_SIGNUP: then anyone
who can reach the site may create an account with Django's UserCreationForm (username, password
twice, the password validators) and is logged in. Off, the page is a 404 and the login page does
not link it; accounts are then made by an admin (docs/platform.md: Users)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import UserCreationForm
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

SIGNUP_BACKEND = "django.contrib.auth.backends.ModelBackend"  # the new account logs in with its password


def signup_allowed() -> bool:
    return bool(getattr(settings, "PLATFORM_ALLOW_SIGNUP", False))


class LoginView(auth_views.LoginView):
    """Django's login page, which links the sign-up page when sign-up is on."""

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "signup_allowed": signup_allowed()}


@require_http_methods(["GET", "POST"])
def signup(request):
    if not signup_allowed():
        raise Http404("sign-up is off on this server")
    if request.user.is_authenticated:
        return redirect(settings.LOGIN_REDIRECT_URL)
    form = UserCreationForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend=SIGNUP_BACKEND)
        return redirect(settings.LOGIN_REDIRECT_URL)
    status = 400 if form.is_bound else 200
    return render(request, "registration/signup.html", {"form": form}, status=status)

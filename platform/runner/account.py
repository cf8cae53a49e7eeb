"""What a user's account shows (the page /account/ and GET /api/account, one dict for both): their
storage use by kind against their quota (runner.storage), their limits (each their UserLimits
row's number where an admin set one, else the server's setting) and how many of their runs a
worker holds or the queue holds now."""

from __future__ import annotations

from django.conf import settings

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from runner import storage
from runner.models import UserLimits

# UserLimits field -> the setting that gives its default
LIMIT_DEFAULTS = {
    "max_active_runs": "PLATFORM_MAX_ACTIVE_RUNS_PER_USER",
    "max_queued_runs": "PLATFORM_MAX_QUEUED_RUNS_PER_USER",
    "max_sequences_per_step": "PLATFORM_MAX_SEQUENCES_PER_STEP",
    "max_tokens_per_step": "PLATFORM_MAX_TOKENS_PER_STEP",
    "storage_quota_bytes": "PLATFORM_STORAGE_QUOTA_BYTES",
}


def limits_of(user) -> dict[str, dict]:
    """{field: {"value", "source": "yours" | "default"}} for each of LIMIT_DEFAULTS."""
    own = UserLimits.objects.filter(user_id=user.pk).first()
    out = {}
    for field, setting in LIMIT_DEFAULTS.items():
        value = getattr(own, field) if own is not None else None
        out[field] = ({"value": int(getattr(settings, setting)), "source": "default"} if value is None
                      else {"value": int(value), "source": "yours"})
    return out


def account_summary(user) -> dict:
    """The account's numbers: {"username", "storage": {..._bytes, "over_quota"}, "limits": {field:
    {"value", "source"}}, "runs": {"active", "queued"}}."""
    runs = Run.objects.filter(experiment__owner_id=user.pk)
    return {
        "username": user.get_username(),
        "storage": storage.usage_for(user).as_json(),
        "limits": limits_of(user),
        "runs": {"active": runs.filter(status__in=list(ACTIVE_STATUSES)).count(),
                 "queued": runs.filter(status=RunStatus.QUEUED).count()},
    }

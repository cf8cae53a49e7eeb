"""What a user's account shows (the page /account/ and GET /api/account, one dict for both): their
storage use by kind against their quota (runner.storage), their limits (each their UserLimits
row's number where an admin set one, else the server's setting) and how many of their runs a
worker holds or the queue holds now."""

from __future__ import annotations

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from runner import storage
from runner.limits import limit_values


def limits_of(user) -> dict[str, dict]:
    """{field: {"value", "source": "yours" | "default"}} for each of runner.limits.LIMIT_SETTINGS."""
    return {
        field: {"value": value, "source": "yours" if own else "default"}
        for field, (value, own) in limit_values(user).items()
    }


def account_summary(user) -> dict:
    """The account's numbers: {"username", "storage": {..._bytes, "over_quota"}, "limits": {field:
    {"value", "source"}}, "runs": {"active", "queued"}}."""
    runs = Run.objects.filter(experiment__owner_id=user.pk)
    return {
        "username": user.get_username(),
        "storage": storage.usage_for(user).as_json(),
        "limits": limits_of(user),
        "runs": {
            "active": runs.filter(status__in=list(ACTIVE_STATUSES)).count(),
            "queued": runs.filter(status=RunStatus.QUEUED).count(),
        },
    }

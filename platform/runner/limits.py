"""Per-user run limits: how many of a user's runs may wait on the queue, how many a worker may
hold at once, and how large one step of a run may be. Settings give the defaults
(PLATFORM_MAX_QUEUED_RUNS_PER_USER, PLATFORM_MAX_ACTIVE_RUNS_PER_USER, PLATFORM_MAX_SEQUENCES_PER_STEP,
PLATFORM_MAX_TOKENS_PER_STEP); a `UserLimits` row overrides them for one user. The step caps and the
worker-memory check are applied by runner.step_limits, at the same places as `check_queued_room`.

- Queued runs are counted where a run goes on the queue (runner.services: launch, resume, retry;
  runner.forks: fork; any new path must call `check_queued_room`): inside the transaction that queues the run,
  after the user's row is locked (`select_for_update`; on SQLite the IMMEDIATE transaction already
  serialises writers), so two launches at the same moment cannot both pass. Over the limit ->
  `LaunchRefused` (429) and the transaction rolls back: no run is created or requeued.
- Active runs (running, pausing, cancelling: a worker holds them) are counted when a worker takes
  a run (runner.tasks.execute_run): at the limit, the run stays queued and its message is sent
  again PLATFORM_ACTIVE_CAP_RETRY_S later. Two workers taking runs of one user in the same instant
  may both start theirs (at most one extra per worker).
"""

from __future__ import annotations

import dataclasses

from django.conf import settings
from django.contrib.auth import get_user_model

from experiments.models import ACTIVE_STATUSES, Run, RunStatus
from experiments.refusals import Refused
from runner.models import UserLimits


class LaunchRefused(Refused):
    """A run may not go on the queue. `status`: the HTTP status to answer (400 bad input, 403 not
    allowed, 429 over a limit); `field`: the request field to name ("" for none)."""


@dataclasses.dataclass(frozen=True)
class RunLimits:
    max_active_runs: int
    max_queued_runs: int
    max_sequences_per_step: int
    max_tokens_per_step: int
    storage_quota_bytes: int  # runner.storage applies it
    max_active_sweeps: int  # sweeps.services: running sweeps (settings only)
    max_hosts_per_run: int  # runner.step_limits: cluster.hosts
    max_devices_per_run: int  # runner.step_limits: cluster.hosts x cluster.devices_per_host
    max_evaluation_jobs: int  # evaluations.services: queued + running jobs
    max_evaluation_tokens: int  # evaluations.services: their prompts x k x max_new_tokens together


# UserLimits field (and RunLimits field) -> the setting that gives its default
LIMIT_SETTINGS = {
    "max_active_runs": "PLATFORM_MAX_ACTIVE_RUNS_PER_USER",
    "max_queued_runs": "PLATFORM_MAX_QUEUED_RUNS_PER_USER",
    "max_sequences_per_step": "PLATFORM_MAX_SEQUENCES_PER_STEP",
    "max_tokens_per_step": "PLATFORM_MAX_TOKENS_PER_STEP",
    "storage_quota_bytes": "PLATFORM_STORAGE_QUOTA_BYTES",
    "max_active_sweeps": "PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER",  # no UserLimits column: settings only
    # settings only (no UserLimits column): the same number for every user
    "max_hosts_per_run": "PLATFORM_MAX_HOSTS_PER_RUN",
    "max_devices_per_run": "PLATFORM_MAX_DEVICES_PER_RUN",
    "max_evaluation_jobs": "PLATFORM_MAX_EVALUATION_JOBS_PER_USER",
    "max_evaluation_tokens": "PLATFORM_MAX_EVALUATION_TOKENS_PER_USER",
}


def limit_values(user) -> dict[str, tuple[int, bool]]:
    """{field: (value, whether it is the user's own)}: their UserLimits row's number where an admin
    set one, else the setting's (LIMIT_SETTINGS)."""
    own = UserLimits.objects.filter(user_id=user.pk).first() if user is not None else None
    values = {}
    for name, setting in LIMIT_SETTINGS.items():
        value = getattr(own, name, None) if own is not None else None  # a settings-only limit: no column
        values[name] = (int(getattr(settings, setting)), False) if value is None else (int(value), True)
    return values


def limits_for(user) -> RunLimits:
    """The user's limits: their UserLimits row's numbers where set, else the settings'."""
    return RunLimits(**{name: value for name, (value, _) in limit_values(user).items()})


def queued_refusal(queued_runs: int, limit: int) -> str | None:
    """Why one more queued run is refused for a user who has `queued_runs` already, or None."""
    if queued_runs < limit:
        return None
    return (
        f"you have {queued_runs} queued run{'s' if queued_runs != 1 else ''}, the limit is {limit}; "
        "cancel one or ask an admin"
    )


def active_wait(active_runs: int, limit: int) -> str | None:
    """Why a run must wait before a worker starts it, for a user with `active_runs` held by
    workers, or None."""
    if active_runs < limit:
        return None
    return (
        f"waiting: the owner has {active_runs} active run{'s' if active_runs != 1 else ''}, "
        f"the limit is {limit}; it starts when one of them ends"
    )


def check_queued_room(user) -> None:
    """Call inside the transaction that has just put one of `user`'s runs on the queue: locks
    the user's row (so concurrent callers for this user take turns until commit), then counts
    their queued runs, this one included; LaunchRefused (429) when that is over the limit, which
    rolls the caller's transaction back."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    queued_after = Run.objects.filter(experiment__owner_id=user.pk, status=RunStatus.QUEUED).count()
    refusal = queued_refusal(queued_after - 1, limits_for(user).max_queued_runs)
    if refusal:
        raise LaunchRefused(429, refusal)


def active_cap_wait(run: Run) -> str | None:
    """Why a worker must not start `run` now (its owner's other runs a worker holds reach their
    limit), or None."""
    owner_id = run.experiment.owner_id
    active = (
        Run.objects.filter(experiment__owner_id=owner_id, status__in=list(ACTIVE_STATUSES)).exclude(pk=run.pk).count()
    )
    return active_wait(active, limits_for(run.experiment.owner).max_active_runs)

"""A trial's run ending advances its sweep as soon as the change commits (the next trial starts
without waiting for the scheduler's tick). Connected in SweepsConfig.ready; cheap (one indexed
query for runs that are no trial) and never raises."""

from __future__ import annotations

import logging

from django.db import transaction
from django.dispatch import receiver

from experiments.models import TERMINAL_STATUSES, Run
from experiments.signals import run_status_changed
from sweeps import scheduler

log = logging.getLogger(__name__)


@receiver(run_status_changed, sender=Run, dispatch_uid="sweeps.advance_on_trial_end")
def advance_on_trial_end(sender, run: Run, status: str, **kwargs) -> None:
    if status not in TERMINAL_STATUSES:
        return
    try:
        sweep_id = scheduler.is_trial_run(run)
        if sweep_id is not None:
            transaction.on_commit(lambda: scheduler.advance_quietly(sweep_id))
    except Exception:  # noqa: BLE001 - a receiver must never break the status change
        log.exception("sweeps: could not schedule an advance after run %s ended", run.pk)

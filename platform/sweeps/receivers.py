"""A trial's run ending advances its sweep as soon as the change commits (the next trial starts
without waiting for the scheduler's tick), and a trial's trainer writing the sweep's metric has the
pruner judge that trial at once (in the trainer's process). Connected in SweepsConfig.ready; cheap
(one indexed query for runs that are no trial) and never raises."""

from __future__ import annotations

import logging

from django.db import transaction
from django.dispatch import receiver

from experiments.models import TERMINAL_STATUSES, Run
from experiments.signals import metrics_reported, run_status_changed
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


@receiver(metrics_reported, sender=Run, dispatch_uid="sweeps.judge_on_metrics")
def judge_on_metrics(sender, run_id: int, names, **kwargs) -> None:
    try:
        scheduler.judge_trial(run_id, names)
    except Exception:  # noqa: BLE001 - never break the trainer's reporting; the tick judges it later
        log.exception("sweeps: could not judge run %s's pruning after its metrics", run_id)

"""Listens to experiments.signals.run_status_changed: a failed, succeeded or pruned run records its
pending deliveries once the status change commits; and to run_stalled: a worker's supervisor found
its trainer quiet (runner.stalls), a `stalled` delivery with where it is stuck. Cheap (nothing is
sent here) and never raises."""

from __future__ import annotations

import logging

from django.db import transaction
from django.dispatch import receiver

from alerts import rules
from experiments.models import Run
from experiments.signals import run_stalled, run_status_changed

log = logging.getLogger(__name__)


@receiver(run_status_changed, sender=Run, dispatch_uid="alerts.run_status_changed")
def on_run_status_changed(sender, run, status, **kwargs) -> None:
    if rules.status_event(status) is None:
        return
    run_id = run.pk

    def record() -> None:
        try:
            from alerts.delivery import record_status_event

            record_status_event(run_id, status)
        except Exception:  # noqa: BLE001 - a status change must never fail because of an alert
            log.exception("recording alerts for run %s (%s) failed", run_id, status)

    try:
        transaction.on_commit(record)
    except Exception:  # noqa: BLE001
        log.exception("scheduling alerts for run %s failed", run_id)


@receiver(run_stalled, sender=Run, dispatch_uid="alerts.run_stalled")
def on_run_stalled(sender, run_id, attempt, key, report, **kwargs) -> None:
    try:
        from alerts.delivery import record_trainer_stall

        record_trainer_stall(run_id, key, report)
    except Exception:  # noqa: BLE001 - a stall report must never fail because of an alert
        log.exception("recording the stall alerts of run %s failed", run_id)

"""The end-of-run hook: a run that succeeded and asked for it (EvaluateOnEnd) gets its best
checkpoint evaluated. Connected in EvaluationsConfig.ready; cheap (one on-commit callback) and
never raises, as experiments.signals asks."""

from __future__ import annotations

import logging

from django.db import transaction

log = logging.getLogger(__name__)


def on_run_status_changed(sender, run, status, **kwargs) -> None:
    if status != "succeeded":
        return
    run_id = run.pk

    def enqueue() -> None:
        from evaluations.services import EvaluationRefused, evaluate_on_end

        try:
            evaluate_on_end(run_id)
        except EvaluationRefused as exc:
            log.warning("run %s: evaluate on end refused: %s", run_id, exc.message)
        except Exception:  # noqa: BLE001 - a receiver must never break the status change
            log.exception("run %s: evaluate on end failed", run_id)

    try:
        transaction.on_commit(enqueue)
    except Exception:  # noqa: BLE001
        log.exception("run %s: cannot schedule evaluate on end", run_id)

"""A sweep and its trials as plain data: what the API answers and the sweep page draws (its table,
the parallel-coordinates plot and the metric-vs-parameter scatter)."""

from __future__ import annotations

from typing import Any

from sweeps.models import Direction, Sweep, Trial


def trial_entry(trial: Trial) -> dict[str, Any]:
    run = trial.run
    return {
        "number": trial.number,
        "params": trial.params,
        "status": trial.status,
        "value": trial.value,
        "value_step": trial.value_step,
        "run_id": run.pk if run else None,
        "run_label": run.label if run else None,
        "error": trial.error,
    }


def best_trial(sweep: Sweep, trials: list[Trial]) -> Trial | None:
    """The trial with the best value in the sweep's direction (the lowest number on a tie)."""
    scored = [t for t in trials if t.value is not None]
    if not scored:
        return None
    sign = 1.0 if sweep.direction == Direction.MAXIMIZE else -1.0
    return max(scored, key=lambda t: (sign * t.value, -t.number))


def sweep_summary(sweep: Sweep, trials: list[Trial] | None = None) -> dict[str, Any]:
    """The sweep without its trials (`trials`: its trials if already loaded)."""
    if trials is None:
        trials = list(sweep.trials.select_related("run").order_by("number"))
    best = best_trial(sweep, trials)
    return {
        "id": sweep.pk,
        "name": sweep.name,
        "experiment_id": sweep.experiment_id,
        "experiment": sweep.experiment.name,
        "owner": sweep.experiment.owner.username,
        "sampler": sweep.sampler,
        "pruner": sweep.pruner,
        "metric": sweep.metric,
        "direction": sweep.direction,
        "max_trials": sweep.max_trials,
        "max_concurrent_trials": sweep.max_concurrent_trials,
        "seed": sweep.seed,
        "status": sweep.status,
        "note": sweep.note,
        "created_at": sweep.created_at.isoformat(),
        "finished_at": sweep.finished_at.isoformat() if sweep.finished_at else None,
        "trial_count": len(trials),
        "best": trial_entry(best) if best else None,
    }


def sweep_detail(sweep: Sweep) -> dict[str, Any]:
    """The sweep with its space, pruner settings and every trial."""
    trials = list(sweep.trials.select_related("run").order_by("number"))
    return {
        **sweep_summary(sweep, trials),
        "space": sweep.space,
        "pruner_startup_trials": sweep.pruner_startup_trials,
        "pruner_warmup_steps": sweep.pruner_warmup_steps,
        "trials": [trial_entry(t) for t in trials],
    }

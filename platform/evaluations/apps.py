"""Evaluation jobs: a checkpoint (or a model folder) scored on a dataset with greedy accuracy,
pass@k and the run's rewards, as a Celery job; results per (checkpoint, dataset) make a leaderboard."""

from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "evaluations"

    def ready(self) -> None:
        from evaluations.receivers import on_run_status_changed
        from experiments.models import Run
        from experiments.signals import run_status_changed

        run_status_changed.connect(on_run_status_changed, sender=Run, dispatch_uid="evaluations.on_end")

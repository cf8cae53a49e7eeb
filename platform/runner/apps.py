"""The runner app: executes runs on Celery workers, supervises them and recovers lost ones."""

from django.apps import AppConfig


class RunnerConfig(AppConfig):
    name = "runner"
    verbose_name = "Run execution"

    def ready(self) -> None:
        from grpo_platform.celery_app import app
        from runner import (  # noqa: F401 - connects the worker registry's Celery signals
            beat,
            deleted_runs,  # noqa: F401 - a deleted run's files go with it
            workers,
        )

        beat.configure(app)

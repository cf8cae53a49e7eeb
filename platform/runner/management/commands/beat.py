"""`manage.py beat`: the periodic scheduler (it runs the reaper that recovers runs of lost workers)."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Start the periodic scheduler (Celery beat). Every PLATFORM_REAP_EVERY_S it recovers runs "
        "whose worker stopped heartbeating: requeued to resume from their newest checkpoint, or "
        "failed after max_restarts. Run exactly one per deployment (two are safe, just redundant)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--loglevel", "-l", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default: %(default)s)"
        )

    def handle(self, *args, loglevel: str, **options):
        from grpo_platform.celery_app import app
        from runner.beat import SCHEDULER

        app.start(
            [
                "beat",
                "--loglevel",
                loglevel,
                "--schedule",
                settings.CELERY_BEAT_SCHEDULE_FILENAME,
                "--scheduler",
                SCHEDULER,
            ]
        )

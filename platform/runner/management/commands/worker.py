"""`manage.py worker`: one Celery worker with the project's settings."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Start one Celery worker that executes runs. Each run trains in its own child process; "
        "the worker heartbeats it, enforces cancel/pause and reports itself in the Workers list. "
        "Ctrl-C: running trainers checkpoint and go back on the queue, then the worker exits."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--queues",
            "-Q",
            default=settings.CELERY_TASK_DEFAULT_QUEUE,
            help="comma-separated queues to take runs from (default: %(default)s)",
        )
        parser.add_argument(
            "--concurrency",
            "-c",
            type=int,
            default=1,
            help="runs trained at once by this worker (default: %(default)s)",
        )
        parser.add_argument(
            "--loglevel", "-l", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default: %(default)s)"
        )
        parser.add_argument(
            "--hostname", "-n", default=None, help="node name, unique per worker (default: worker-<pid>@<host>)"
        )

    def handle(self, *args, queues: str, concurrency: int, loglevel: str, hostname: str | None, **options):
        from grpo_platform.celery_app import app

        hostname = hostname or f"worker-{os.getpid()}@%h"
        argv = [
            "worker",
            "--queues",
            queues,
            "--concurrency",
            str(concurrency),
            "--pool",
            "prefork",
            "--loglevel",
            loglevel,
            "--hostname",
            hostname,
            "--without-gossip",
            "--without-mingle",  # no broker chatter: workers report via the database
        ]
        app.worker_main(argv)

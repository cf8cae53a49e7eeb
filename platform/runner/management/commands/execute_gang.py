"""`manage.py execute_gang RUN_ID ATTEMPT`: internal; a multi-host run's Ray driver (runner.ray_gang),
started by the run's supervisor in place of the trainer."""

from __future__ import annotations

import logging
import os
import signal
import sys

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Internal: drive one attempt of a multi-host run (cluster.hosts > 1) as a gang of Ray actors, one "
        "trainer process per host (started by the worker's supervisor; dies with it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int, help="the Run's id")
        parser.add_argument("attempt", type=int, help="the attempt this process owns (the task message's)")

    def handle(self, *args, run_id: int, attempt: int, **options):
        from runner.procs import SUPERVISOR_PID_ENV, die_with_parent

        parent = os.environ.get(SUPERVISOR_PID_ENV)
        if parent:
            die_with_parent(signal.SIGKILL)
            if os.getppid() != int(parent):  # the supervisor died before prctl took effect
                sys.exit(f"supervisor {parent} is gone; not starting run {run_id}")
        logging.getLogger().setLevel(logging.INFO)
        from runner.ray_gang import run_gang

        code = run_gang(run_id, attempt)
        if code:
            sys.exit(code)

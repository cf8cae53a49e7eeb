"""`manage.py execute_run RUN_ID ATTEMPT`: internal; the trainer child a run's supervisor starts."""

from __future__ import annotations

import logging
import os
import sys

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Internal: train one attempt of a run in this process and write its final status "
        "(started by the worker's supervisor; dies with it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int, help="the Run's id")
        parser.add_argument("attempt", type=int, help="the attempt this process owns (the task message's)")

    def handle(self, *args, run_id: int, attempt: int, **options):
        from runner.procs import die_with_parent
        from runner.supervisor import SUPERVISOR_PID_ENV

        parent = os.environ.get(SUPERVISOR_PID_ENV)
        parent_pid = int(parent) if parent else None
        if parent_pid is not None:
            import signal

            die_with_parent(signal.SIGKILL)
            if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
                sys.exit(f"supervisor {parent_pid} is gone; not starting run {run_id}")
        logging.getLogger().setLevel(logging.INFO)
        logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every checkpoint file at INFO
        from runner.attempt import run_attempt

        code = run_attempt(run_id, attempt, parent_pid=parent_pid)
        if code:
            sys.exit(code)

"""The worker registry, kept without broker remote control: each Celery worker's main process
upserts its `runner.models.Worker` row when ready, refreshes heartbeat_at every
PLATFORM_HEARTBEAT_S from a daemon thread, and deletes the row when it shuts down. (The reaper
forgets rows of workers that died without saying so.)

On a warm shutdown the worker would otherwise wait for its runs to end, which may take hours:
`shutting_down()` tells the supervisors, which SIGTERM their trainers; those checkpoint and go back
on the queue (runner.attempt). A message received during the shutdown is put back on the queue.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading

from celery import signals
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

log = logging.getLogger(__name__)


class Registration:
    """One worker's row and the thread that keeps it fresh."""

    def __init__(self, hostname: str, queues: str, concurrency: int):
        self.hostname, self.queues, self.concurrency = hostname, queues, concurrency
        self.pid = os.getpid()
        self.started_at = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="worker-registry", daemon=True)

    def beat(self) -> None:
        from runner.models import Worker

        now = timezone.now()
        fields = {"pid": self.pid, "queues": self.queues, "concurrency": self.concurrency, "heartbeat_at": now}
        if self.started_at is None:
            self.started_at = fields["started_at"] = now
        Worker.objects.update_or_create(hostname=self.hostname, defaults=fields)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            try:
                self.beat()
            except DatabaseError as exc:
                log.warning("worker registry: cannot write heartbeat (%s)", exc)
            finally:
                connection.close()  # this thread's own connection; reopened next time
            self.stopped.wait(settings.PLATFORM_HEARTBEAT_S)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        from runner.models import Worker

        self.stopped.set()
        self.thread.join(timeout=5)
        try:
            Worker.objects.filter(hostname=self.hostname, pid=self.pid).delete()
        except DatabaseError as exc:
            log.warning("worker registry: cannot delete %s (%s)", self.hostname, exc)
        finally:
            connection.close()


_registration: Registration | None = None
# Set in the worker's main process when it starts shutting down; the prefork pool's children were
# forked from it and share this memory, so a running supervisor sees it (Linux: fork start method).
_shutting_down = multiprocessing.RawValue("b", 0)


def shutting_down() -> bool:
    """Whether this process's Celery worker is shutting down."""
    return bool(_shutting_down.value)


@signals.worker_ready.connect
def _on_worker_ready(sender=None, **kwargs) -> None:
    """sender: the worker's Consumer (main process)."""
    global _registration
    queues = ",".join(sorted(q.name for q in sender.app.amqp.queues.consume_from.values()))
    concurrency = getattr(sender.controller, "concurrency", None) or 1
    _registration = Registration(sender.hostname, queues, int(concurrency))
    _registration.start()


@signals.worker_shutting_down.connect
def _on_worker_shutting_down(sender=None, **kwargs) -> None:
    """Runs inside the worker's signal handler (main process): only set the shared flag."""
    _shutting_down.value = 1


@signals.worker_shutdown.connect
def _on_worker_shutdown(sender=None, **kwargs) -> None:
    global _registration
    if _registration is not None:
        _registration.stop()
        _registration = None

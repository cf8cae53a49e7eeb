"""Which queues a user may send runs to (RunQueue rows, registered by an admin), which one a
launch uses when it names none, and whether any live worker reads a queue.

A queue is usable when a RunQueue row names it and is open to everyone, lists the user, or lists
one of their groups; a superuser may use every registered queue. The settings' default queue
(CELERY_TASK_DEFAULT_QUEUE, "runs") is open to everyone while no row names it (the runner's
migration 0001 registers it; an admin may restrict it by editing that row).
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q

from runner.limits import LaunchRefused
from runner.models import RunQueue, Worker


def default_queue_name() -> str:
    """The queue a launch that names none goes to: the RunQueue marked default, else the settings'."""
    row = RunQueue.objects.filter(is_default=True).order_by("name").first()
    return row.name if row else settings.CELERY_TASK_DEFAULT_QUEUE


def _rows_open_to(user):
    rows = RunQueue.objects.all()
    if user.is_superuser:
        return rows
    return rows.filter(Q(open_to_everyone=True) | Q(users=user) | Q(groups__in=user.groups.all())).distinct()


def allowed_queue_names(user) -> list[str]:
    """The names of the queues `user` may launch to, the default first."""
    names = [row.name for row in _rows_open_to(user).order_by("-is_default", "name")]
    builtin = settings.CELERY_TASK_DEFAULT_QUEUE
    if builtin not in names and not RunQueue.objects.filter(name=builtin).exists():
        names.insert(0, builtin)
    return names


def may_use(user, name: str) -> bool:
    if not RunQueue.objects.filter(name=name).exists():
        return name == settings.CELERY_TASK_DEFAULT_QUEUE
    return _rows_open_to(user).filter(name=name).exists()


def resolve_queue(user, name: str | None) -> str:
    """The queue a launch by `user` naming `name` (None: the default) goes to, or LaunchRefused
    naming `queue` and listing the queues they may use (400 for an unknown queue, 403 for one
    not open to them)."""
    name = name or default_queue_name()
    if may_use(user, name):
        return name
    allowed = allowed_queue_names(user)
    yours = f"your queues: {', '.join(allowed)}" if allowed else "you may use no queue; ask an admin"
    if RunQueue.objects.filter(name=name).exists():
        raise LaunchRefused(403, f"you may not launch to queue {name!r}; {yours}", field="queue")
    raise LaunchRefused(400, f"no queue named {name!r} is registered; {yours}", field="queue")


def live_workers_reading(name: str) -> list[str]:
    """Hostnames of the live workers (fresh heartbeat) that read queue `name`."""
    return [w.hostname for w in Worker.objects.all() if w.is_alive and name in w.queues.split(",")]


def no_worker_warning(name: str) -> str:
    """A warning when no live worker reads `name` (the run waits until one does), else ""."""
    if live_workers_reading(name):
        return ""
    return (
        f"No live worker reads queue {name!r} right now: the run waits until one does "
        f"(`manage.py worker --queues {name}`)"
    )

"""What users do to runs: launch, cancel, pause, resume, retry. The web pages, the JSON API and
the admin all call these (through `ACTIONS` for the four run controls), so the rules live once.

Every change is one compare-and-set in the database (`Run.transition`) that names the statuses it
starts from: a caller's copy of the run may be stale (two requests that both loaded a paused run),
and only the database's current status decides. Putting a run on the queue bumps its attempt in
the same update and sends the task message once the transaction commits.

Every path onto the queue checks the owner's limits in the same transaction (runner.limits:
queued runs; runner.storage: the storage quota; runner.step_limits: sequences and tokens per
step, a worker's memory; runner.queues: which queues they may use) and
raises `LaunchRefused` (re-exported here) with the HTTP status and the field to name; the callers
turn it into a 4xx or a message.

The runner imports experiments, never the other way round: models know nothing of Celery.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from experiments import configs
from experiments.models import Experiment, Run, RunStatus
from grpo_platform.celery_app import app
from runner import queues
from runner.limits import LaunchRefused, check_queued_room
from runner.step_limits import check_step_room
from runner.storage import check_storage_room

S = RunStatus
EXECUTE_TASK = "runner.execute_run"  # runner.tasks.execute_run, sent by name


def send_run_message(run_id: int, attempt: int, queue: str) -> None:
    """Put one 'execute run `run_id`, attempt `attempt`' message on `queue`."""
    app.send_task(EXECUTE_TASK, args=[run_id, attempt], queue=queue)


def send_when_committed(run: Run) -> None:
    """Send the task message for the run's current attempt once the surrounding transaction
    commits (at once outside one). The caller has just put the run on the queue."""
    run_id, attempt, queue = run.pk, run.attempt, run.queue
    transaction.on_commit(lambda: send_run_message(run_id, attempt, queue))


def launch_run(
    experiment: Experiment, max_restarts: int | None = None, queue: str | None = None, config: dict | None = None
) -> Run:
    """Create a queued Run (attempt 1) from the experiment's current config and put it on `queue`
    (default: runner.queues' default queue; workers take the queues named by `worker --queues`).
    LaunchRefused when the owner may not use that queue, has too many queued runs (runner.limits)
    or the run's step is over their caps or a worker's memory (runner.step_limits); then no run is
    created. `config`: the run's config instead of the experiment's current one (a sweep's trial;
    the caller has validated it through experiments.configs)."""
    config = experiment.config if config is None else config
    version = experiment.latest_version
    queue = queues.resolve_queue(experiment.owner, queue)
    with transaction.atomic():
        run = Run.objects.create(
            experiment=experiment,
            config_version=version,
            config=config,
            status=S.QUEUED,
            attempt=1,
            queued_at=timezone.now(),
            max_steps=int(config.get("train", {}).get("max_steps", 0)),
            max_restarts=settings.PLATFORM_DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts,
            queue=queue,
        )
        check_queued_room(experiment.owner)
        check_storage_room(experiment.owner)
        check_step_room(run.config, experiment.owner)
        # The suffix keeps a recreated database's run 1 from resuming an older run 1's checkpoints.
        run.run_dir = f"run-{run.pk}-{uuid.uuid4().hex[:8]}"
        run.save(update_fields=["run_dir"])
        run.add_event(f"launched from {experiment.name} v{version.number if version else '?'}", kind="status")
        send_when_committed(run)
    return run


def request_cancel(run: Run) -> bool:
    """queued/paused: cancelled at once. running/pausing: cancelling, the worker stops it."""
    if run.transition(S.CANCELLED, only_from={S.QUEUED, S.PAUSED}, finished_at=timezone.now()):
        return True  # nothing was running it
    # Only the worker holding the run moves cancelling -> cancelled, once its trainer has stopped.
    return run.transition(S.CANCELLING, only_from={S.RUNNING, S.PAUSING})


def request_prune(run: Run) -> bool:
    """A sweep's pruner stops a trial: queued/paused: pruned at once; running/pausing: cancelling
    with stop_as="pruned", and the worker ends it as pruned (checkpoints and metrics kept)."""
    Run.objects.filter(pk=run.pk).update(stop_as=S.PRUNED)
    run.stop_as = S.PRUNED
    if run.transition(S.PRUNED, only_from={S.QUEUED, S.PAUSED}, finished_at=timezone.now()):
        return True
    return run.transition(S.CANCELLING, only_from={S.RUNNING, S.PAUSING})


def request_pause(run: Run) -> bool:
    """running: pausing; the worker checkpoints and lets go. Anything else: nothing to pause."""
    return run.transition(S.PAUSING, only_from={S.RUNNING})


def check_run_config(run: Run) -> None:
    """LaunchRefused(400) naming the first field at fault when the run's stored config no longer
    validates for its owner now (a model folder or dataset gone or unshared since): the worker would
    fail it at start, so a resume or retry is refused on request, as a launch is."""
    try:
        configs.parse(run.config, run.experiment.owner)
    except configs.ConfigError as exc:
        problems = exc.as_dict()
        listed = "; ".join(f"{field}: {message}" for field, message in problems.items())
        raise LaunchRefused(
            400,
            f"the run's config is no longer valid here ({listed}); launch the experiment again with a config that is",
            next(iter(problems), ""),
        ) from None


def _requeue(run: Run, only_from: set[str], **fields) -> bool:
    """Back on the queue as a new attempt (False when the run's status does not allow it), or
    LaunchRefused when its config no longer validates (400, `check_run_config`), its owner has too
    many queued runs or its step is over their caps or a worker's memory (the run is left as it was)."""
    if run.status in only_from:  # a run that may not be requeued answers 409, whatever its config
        check_run_config(run)
    try:
        with transaction.atomic():
            if not run.transition(S.QUEUED, only_from=only_from, new_attempt=True, finished_at=None, **fields):
                return False
            check_queued_room(run.experiment.owner)
            check_storage_room(run.experiment.owner)
            check_step_room(run.config, run.experiment.owner)
            send_when_committed(run)
    except LaunchRefused:
        run.refresh_from_db()
        raise
    return True


def resume_run(run: Run) -> bool:
    """paused (in the database, whatever `run` says): back on the queue as a new attempt; the
    run resumes from its newest checkpoint. LaunchRefused over the owner's limits (see `_requeue`)."""
    return _requeue(run, {S.PAUSED})


def retry_run(run: Run) -> bool:
    """failed or cancelled (in the database): back on the queue as a new attempt, resuming from
    the newest checkpoint if any. LaunchRefused over the owner's limits (see `_requeue`)."""
    return _requeue(run, {S.FAILED, S.CANCELLED}, error="")


@dataclasses.dataclass(frozen=True)
class RunAction:
    """A control a user may apply to a run they may steer."""

    name: str  # URL and API name
    function: Callable[[Run], bool]  # returns whether the run changed
    offered: frozenset[str]  # statuses in which the pages show the control
    label: str  # the admin action's name
    done: str  # the admin's "N of M runs <done>"


ACTIONS: dict[str, RunAction] = {
    a.name: a
    for a in (
        RunAction(
            "cancel",
            request_cancel,
            frozenset({S.QUEUED, S.RUNNING, S.PAUSING, S.PAUSED}),
            "Cancel",
            "cancelled or cancelling",
        ),
        RunAction("pause", request_pause, frozenset({S.RUNNING}), "Pause", "pausing"),
        RunAction("resume", resume_run, frozenset({S.PAUSED}), "Resume", "put back on the queue"),
        RunAction("retry", retry_run, frozenset({S.FAILED, S.CANCELLED}), "Requeue", "put back on the queue (retry)"),
    )
}

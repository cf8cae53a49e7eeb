"""Forking a run: a new queued run of the same experiment that starts from one of the parent's
checkpoints, recorded as lineage (`Run.forked_from`, `forked_from_step`, `fork_optimizer`). The
JSON API (`POST /api/runs/<id>/fork`) and the run page's Fork form both call `parse_fork_input`
and `fork_run`.

The child trains under the parent's config snapshot (only `train.max_steps` may change) and says
how it starts with `optimizer`:

  fresh (the default)  the checkpoint's weights with a new optimizer state, from step 0: a new
                       training phase (new warmup and schedule) that starts where the parent was.
                       Those weights are also its KL reference policy.
  continued            weights, optimizer state, data position and step counter: the parent's run
                       goes on from step N (with the same config it redraws exactly what the
                       parent drew after N). It needs train.max_steps above N to have work to do.

Files. When the fork is made, the parent's checkpoint directory is copied into the child's run
directory (as hard links where the filesystem allows: orbax never rewrites a finished checkpoint,
so the copy is instant, takes no space, and outlives the parent's retention deleting its own):

  continued  <child run_dir>/checkpoints/<N>/  the trainer resumes from it, as after a pause
  fresh      <child run_dir>/fork-start/<N>/   given to the trainer as `init_checkpoint`
                                              (runner.attempt, through `start_checkpoint`)

So the child depends on nothing of the parent's once made: the parent may be deleted.
Every refusal is a `ForkRefused` with the HTTP status and the field to name.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
import uuid

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from experiments import configs
from experiments.models import Checkpoint, ForkOptimizer, Run, RunStatus
from experiments.whole_numbers import NotAWholeNumber, whole_number
from runner import queues
from runner.exports import checkpoint_steps, run_directory
from runner.limits import LaunchRefused, check_queued_room
from runner.services import send_when_committed
from runner.step_limits import check_step_room
from runner.storage import check_storage_room

FORK_START_DIR = "fork-start"  # the fresh fork's starting checkpoint, inside its run directory
OPTIMIZERS = tuple(ForkOptimizer.values)  # ("fresh", "continued")
DEFAULT_OPTIMIZER = ForkOptimizer.FRESH
STEP_LIMIT = 2**31
QUEUE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class ForkRefused(LaunchRefused):
    """Why no fork was made: `status` the HTTP status (400 bad input, 403 a queue not open to the
    owner, 409 the checkpoint or config cannot be used now, 429 over the queued-run limit, the
    storage quota or the step caps), `field` the request field to name ("" for none)."""


@dataclasses.dataclass(frozen=True)
class ForkRequest:
    step: int
    optimizer: str = DEFAULT_OPTIMIZER  # "fresh" | "continued"
    max_steps: int | None = None  # None: the parent's train.max_steps
    queue: str | None = None  # None: the parent's queue


def _whole_number(value, field: str, minimum: int) -> int | None:
    """A JSON integer or a form's digit string (blank: None), else ForkRefused naming `field`."""
    try:
        return whole_number(value, minimum, STEP_LIMIT - 1)
    except NotAWholeNumber as exc:
        raise ForkRefused(400, str(exc), field) from None


def parse_fork_input(data: dict) -> ForkRequest:
    """A fork request's fields from a JSON body or a form: `step` (required), `optimizer`
    ("fresh" | "continued", default fresh), `max_steps`, `queue`. ForkRefused(400) names the field."""
    step = _whole_number(data.get("step"), "step", 0)
    if step is None:
        raise ForkRefused(400, "required: the step of the parent's checkpoint to start from", "step")
    optimizer = data.get("optimizer") or DEFAULT_OPTIMIZER
    if optimizer not in OPTIMIZERS:
        raise ForkRefused(400, f"one of {', '.join(OPTIMIZERS)} (got {optimizer!r})", "optimizer")
    max_steps = _whole_number(data.get("max_steps"), "max_steps", 1)
    queue = data.get("queue") or None
    if queue is not None and not (isinstance(queue, str) and QUEUE_NAME.fullmatch(queue)):
        raise ForkRefused(400, "a queue name: 1-64 letters, digits, '.', '_' or '-'", "queue")
    return ForkRequest(step=step, optimizer=str(optimizer), max_steps=max_steps, queue=queue)


def start_checkpoint(run: Run, run_dir: str) -> str | None:
    """The checkpoint directory a fresh fork's trainer starts from (`init_checkpoint`), else None."""
    if run.fork_optimizer != ForkOptimizer.FRESH or run.forked_from_step is None:
        return None
    return os.path.join(run_dir, FORK_START_DIR, str(run.forked_from_step))


def child_config(parent: Run, request: ForkRequest) -> dict:
    """The parent's config snapshot with `max_steps`, validated as it would be launched now
    (ForkRefused 409 when it no longer is: e.g. its model folder is gone)."""
    raw = copy.deepcopy(parent.config)
    if request.max_steps is not None:
        raw.setdefault("train", {})["max_steps"] = request.max_steps
    try:
        config = configs.parse(raw, parent.experiment.owner)
    except configs.ConfigError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        raise ForkRefused(409, f"run {parent.pk}'s config is not valid on this platform now ({problems})") from None
    if request.optimizer == ForkOptimizer.CONTINUED and config.train.max_steps <= request.step:
        raise ForkRefused(
            400,
            f"a continued fork from step {request.step} trains until train.max_steps = "
            f"{config.train.max_steps}: nothing is left; give max_steps above {request.step} "
            f"(or fork with a fresh optimizer)",
            "max_steps",
        )
    return raw if request.max_steps is None else configs.stored(config)


def fork_run(parent: Run, request: ForkRequest) -> Run:
    """A new queued run of `parent`'s experiment that starts from its checkpoint `request.step`
    (see the module docstring), or ForkRefused. The caller has checked that the user may steer
    `parent`. The task message is sent once the transaction commits."""
    parent_dir = run_directory(parent)
    steps = checkpoint_steps(parent_dir)
    if request.step not in steps:
        have = f"it has steps {', '.join(map(str, steps))}" if steps else "it has no checkpoint yet"
        raise ForkRefused(400, f"run {parent.pk} has no checkpoint at step {request.step}; {have}", "step")
    config = child_config(parent, request)
    experiment = parent.experiment
    try:
        queue = queues.resolve_queue(experiment.owner, request.queue or parent.queue)
    except LaunchRefused as exc:
        raise ForkRefused(exc.status, exc.message, exc.field) from None
    continued = request.optimizer == ForkOptimizer.CONTINUED
    child_dir: str | None = None  # made here: removed again if the fork fails
    try:
        with transaction.atomic():
            child = Run.objects.create(
                experiment=experiment,
                config_version=parent.config_version,
                config=config,
                status=RunStatus.QUEUED,
                attempt=1,
                queued_at=timezone.now(),
                step=request.step if continued else 0,
                max_steps=int(config.get("train", {}).get("max_steps", 0)),
                max_restarts=parent.max_restarts,
                queue=queue,
                forked_from=parent,
                forked_from_step=request.step,
                fork_optimizer=request.optimizer,
            )
            check_queued_room(experiment.owner)
            check_storage_room(experiment.owner)
            check_step_room(config, experiment.owner)
            child.run_dir = f"run-{child.pk}-{uuid.uuid4().hex[:8]}"
            child.save(update_fields=["run_dir"])
            child_dir = run_directory(child)
            folder = "checkpoints" if continued else FORK_START_DIR
            copied = os.path.join(child_dir, folder, str(request.step))
            _copy_checkpoint(os.path.join(parent_dir, "checkpoints", str(request.step)), copied, parent.pk)
            if continued:  # the child's own checkpoint N: listed on its page, downloadable, forkable
                source = parent.checkpoints.filter(step=request.step).first()
                Checkpoint.objects.create(
                    run=child,
                    step=request.step,
                    path=os.path.relpath(copied, settings.ARTIFACTS_DIR),
                    size_bytes=source.size_bytes if source else 0,
                    metrics=source.metrics if source else {},
                )
            how = f"step {request.step} ({request.optimizer} optimizer)"
            changed = "" if request.max_steps is None else f"; train.max_steps {parent.max_steps} -> {child.max_steps}"
            child.add_event(f"forked from run {parent.pk}, {how}{changed}", kind="status")
            parent.add_event(
                f"forked at step {request.step} into run {child.pk} ({request.optimizer} optimizer)", kind="system"
            )
            send_when_committed(child)
    except LaunchRefused as exc:
        _remove(child_dir)
        raise ForkRefused(exc.status, exc.message, exc.field) from None
    except BaseException:
        _remove(child_dir)
        raise
    return child


def _copy_checkpoint(source: str, target: str, parent_pk: int) -> None:
    """Copy checkpoint directory `source` to `target` (a new directory), hard-linking each file
    where the filesystem allows. ForkRefused(409) if the checkpoint went away meanwhile."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        shutil.copytree(source, target, copy_function=_link_or_copy)
    except FileNotFoundError:
        raise ForkRefused(
            409,
            f"run {parent_pk}'s checkpoint {os.path.basename(source)} was removed while it was "
            "being copied (the run keeps only its newest checkpoints); pick another",
            "step",
        ) from None


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or links not allowed: a real copy
        shutil.copy2(source, target)


def _remove(path: str | None) -> None:
    """Undo a failed fork's new run directory (the run row is rolled back with the transaction)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)

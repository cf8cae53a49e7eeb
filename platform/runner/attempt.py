"""One attempt of a run, inside the trainer child process (`manage.py execute_run RUN ATTEMPT`).

Parses the run's config snapshot (experiments.configs: the schema and the dataset roots), trains
in the run directory (resuming from its newest checkpoint; a fresh fork starts from its parent's
checkpoint weights: runner.forks) with database + run-file hooks and
database control, then writes the final status by compare-and-set on (status, attempt):

  trainer returned   run status now   ->  final
  succeeded          active           ->  succeeded (params_digest, step)
  paused             pausing/running  ->  paused; but a pause asked by a signal (the worker is
                                          shutting down) while the user wanted it running ->
                                          queued again as a new attempt, resuming on any worker
  paused/cancelled   cancelling       ->  cancelled
  requeued           another attempt  ->  nothing (the reaper requeued the run: the newer attempt
                     owns it               resumes it; the trainer logged "run requeued at step N")
  exception / invalid config          ->  failed, with the traceback's last lines in run.error (an
                                          invalid config, also one the devices refute when the run
                                          starts, a MeshError: one line per problem, no traceback)
  a step over the owner's caps or a worker's memory (runner.step_limits) -> failed, with why
                                          (a diverged run, TrainingDiverged: its one-line message)

A user-code failure fails the run at once: only a lost worker is retried (by the reaper).

First of all the attempt installs the phase marker and the SIGUSR1 stack dump (trainers.step.phases,
at runner.stalls' paths in the run's logs folder), so the supervisor can tell where a quiet trainer
is stuck, from its imports on.

In a multi-host run (runner.ray_gang) every host's process runs this with GRPO_NUM_PROCESSES > 1
and GRPO_PROCESS_ID set: it first joins the others (trainers.parallel.distributed); process 0
reports and writes the final status as above, the others train with no hooks; a failure is not
written by any of them but left to the gang's driver (process 0's error in error_path()), which
tells a failure in the trainer from a lost host.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from django.utils import timezone

from experiments.models import ACTIVE_STATUSES, SETTLED_STATUSES, Run, RunStatus
from experiments.run_compare import snapshot_run
from runner import stalls
from runner.control import DatabaseControl
from runner.db_hooks import DatabaseHooks
from runner.forks import start_checkpoint
from runner.run_files import PlatformRunFilesHooks
from runner.sample_prompts import chat_prompts_for
from runner.services import send_when_committed
from runner.step_limits import step_check
from runner.storage import run_directory
from trainers.step import phases

log = logging.getLogger(__name__)
ERROR_LINES = 25


def invalid_config_text(exc) -> str:
    """A run's error for a ConfigError: one line per problem, naming the field."""
    problems = "\n".join(f"  {p}" for p in exc.problems)
    return f"invalid config ({len(exc.problems)} problem(s)):\n{problems}"


def gang_index() -> int | None:
    """This process's index in a multi-host run's gang (runner.ray_gang sets GRPO_NUM_PROCESSES > 1
    and GRPO_PROCESS_ID: the contract of trainers.parallel.distributed), or None for one process."""
    try:
        if int(os.environ.get("GRPO_NUM_PROCESSES", "1")) > 1:
            return int(os.environ.get("GRPO_PROCESS_ID", "0"))
    except ValueError:
        pass
    return None


def error_path(run_dir: str, attempt: int) -> str:
    """Where process 0 of a gang leaves its error for the gang's driver."""
    return os.path.join(run_dir, "logs", f"attempt-{attempt}.error")


def gang_failed(run_dir: str, attempt: int, index: int, lines: list[str]) -> int:
    """Process `index` of a gang failed: it does not fail the run itself, since the gang's driver
    (runner.ray_gang) must first tell a failure in the trainer (the run fails with this error) from
    a lost host that broke the others' collectives (the gang restarts); process 0 leaves the error
    in error_path() for it. Returns the exit code."""
    text = "\n".join(lines[-ERROR_LINES:])
    print(text, file=sys.stderr, flush=True)
    if index == 0:
        os.makedirs(os.path.dirname(error_path(run_dir, attempt)), exist_ok=True)
        with open(error_path(run_dir, attempt), "w", encoding="utf-8") as f:
            f.write(text)
    return 1


def fail_run(run: Run, attempt: int, error: str) -> bool:
    """Mark the run failed (only while `attempt` still owns it); record the error as an event too."""
    return run.transition(
        RunStatus.FAILED, attempt=attempt, error=error, finished_at=timezone.now(), note=error, note_level="error"
    )


def finish_run(run: Run, attempt: int, result, control: DatabaseControl) -> str:
    """Write the final status for a TrainResult; returns the status written ('' if none)."""
    now = timezone.now()
    S = RunStatus
    if result.status == "requeued":  # DatabaseControl saw a newer attempt own the run: it is not ours to end
        log.info("run %s attempt %s stopped at step %s: the run was requeued", run.pk, attempt, result.final_step)
        return ""
    if result.status == "succeeded":
        if run.transition(
            S.SUCCEEDED, attempt=attempt, params_digest=result.params_digest, step=result.final_step, finished_at=now
        ):
            return S.SUCCEEDED
    elif result.status == "paused":
        run.refresh_from_db(fields=["status", "attempt"])
        if control.signalled is not None and run.status == S.RUNNING and run.attempt == attempt:
            if run.transition(
                S.QUEUED,
                attempt=attempt,
                new_attempt=True,
                step=result.final_step,
                note=f"worker stopping: checkpointed at step {result.final_step}; requeued",
            ):
                send_when_committed(run)
                return S.QUEUED
        if run.transition(S.PAUSED, attempt=attempt, step=result.final_step, finished_at=now):
            return S.PAUSED
    run.refresh_from_db(fields=["stop_as"])
    stopped = run.stopped_status
    if run.transition(stopped, attempt=attempt, step=result.final_step, finished_at=now):
        return stopped
    log.info("run %s attempt %s ended %s, but the run is no longer this attempt's", run.pk, attempt, result.status)
    return ""


def run_attempt(run_id: int, attempt: int, parent_pid: int | None = None) -> int:
    """Train attempt `attempt` of run `run_id` to a final status. Returns a process exit code."""
    try:
        return _run_attempt(run_id, attempt, parent_pid)
    finally:
        phases.uninstall()  # (a no-op in the trainer child, which exits next; not in a test's process)


def _run_attempt(run_id: int, attempt: int, parent_pid: int | None) -> int:
    from django.conf import settings

    from experiments import configs

    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.attempt != attempt or run.status not in ACTIVE_STATUSES:
        log.warning(
            "run %s attempt %s is not active (%s); nothing to do",
            run_id,
            attempt,
            None if run is None else f"{run.status}, attempt {run.attempt}",
        )
        return 0
    index = gang_index()
    run_dir = run_directory(run)
    try:
        phases.install(stalls.phase_path(run_dir, attempt, index), stalls.stacks_path(run_dir, attempt, index))
    except OSError as exc:  # the run trains all the same; a stall is then reported without stacks
        log.warning("run %s: cannot install the phase marker (%s)", run_id, exc)
    with phases.phase("setup", "importing the trainer"):
        from trainers import train
        from trainers.loop.compile_cache import enable_compilation_cache
        from trainers.loop.trainer import TrainingDiverged
        from trainers.step.hooks import Control, Hooks, MultiHooks
    if index is not None:  # one host's process of a multi-host run: join the others before any JAX work
        from trainers.parallel.distributed import DistributedInitError, initialize_from_environment

        try:
            with phases.phase("gang", f"joining the run's {os.environ.get('GRPO_NUM_PROCESSES')} processes"):
                initialize_from_environment()
        except DistributedInitError as exc:
            return gang_failed(run_dir, attempt, index, [str(exc)])
    # process 0 reports and steers; the other processes of a gang train silently (the trainer
    # gives every process process 0's cancel/pause decision at the same step)
    control = DatabaseControl(run_id, attempt, parent_pid=parent_pid) if not index else Control()
    try:
        # validated again here, with the dataset roots as they are now: a data path resolves to the
        # absolute file inside a root that the trainer reads (a symlink swapped in since the
        # experiment was saved cannot lead it outside)
        config = configs.parse(run.config, run.experiment.owner)  # the owner's datasets, as they are now
    except configs.ConfigError as exc:
        fail_run(run, attempt, invalid_config_text(exc))
        return 1
    # the owner's step caps and a worker's memory as they are now (runner.step_limits): the config may
    # have been stored before them, or the owner's limits lowered since it was queued
    too_large = step_check(config, run.experiment.owner).message
    if too_large:
        fail_run(run, attempt, too_large)
        return 1
    # compiled steps are kept on disk: a later run of the same shapes, or this run's next attempt, skips compiling
    enable_compilation_cache(str(settings.DATA_DIR / "jax-cache"))
    db_hooks = DatabaseHooks(run_id, attempt, chat_prompts=chat_prompts_for(config))
    hooks = MultiHooks(db_hooks, PlatformRunFilesHooks(run_dir, run_id)) if not index else Hooks()
    try:
        # a fresh fork starts from its parent's checkpoint weights (runner.forks); None otherwise
        result = train(config, run_dir, hooks=hooks, control=control, init_checkpoint=start_checkpoint(run, run_dir))
    except BaseException as exc:  # noqa: BLE001 - any failure of user code ends the run as failed
        # a diverged run's message says it all (step, metric, what to change): no traceback; nor for
        # a config that only the run's devices refute (a mesh they cannot form: MeshError, a ConfigError)
        if isinstance(exc, configs.ConfigError):
            lines = [invalid_config_text(exc)]
        elif isinstance(exc, TrainingDiverged):
            lines = [str(exc)]
        else:
            lines = traceback.format_exc().rstrip().splitlines()
        try:
            db_hooks.close()  # keep the metrics of the steps that did finish
        except Exception:  # noqa: BLE001
            log.exception("run %s: cannot write the last metrics", run_id)
        if index is not None:
            return gang_failed(run_dir, attempt, index, lines)
        fail_run(run, attempt, "\n".join(lines[-ERROR_LINES:]))
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return 1
    if index:
        return 0  # process 0 writes the final status
    status = finish_run(run, attempt, result, control)
    log.info(
        "run %s attempt %s: trainer %s at step %s -> %s",
        run_id,
        attempt,
        result.status,
        result.final_step,
        status or "(not ours)",
    )
    if status in SETTLED_STATUSES:
        snapshot_series(run)
    return 0


def snapshot_series(run: Run) -> None:
    """Store the ended run's compare-page series (experiments.run_compare.snapshot_run), so its first
    comparison in any process reads one row instead of every point. Never fails the run."""
    try:
        snapshot_run(run)
    except Exception:  # noqa: BLE001 - an optimisation: the compare page encodes it when asked
        log.exception("run %s: cannot store its series snapshot", run.pk)

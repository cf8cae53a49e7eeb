"""Running one evaluation job (the Celery task `evaluations.run_job` calls `run_job`).

The work runs in a child process, `python -m trainers evaluate ... --json-progress` (the trainer's
own command, `trainers.commands.evaluate`), like runner/exports.py: the worker never imports JAX and
holds no accelerator memory afterwards; the child does not preallocate it (a run may be training on
the same device). Its stdout brings `{"progress": {"done", "total"}}` lines (written to the job's
row as they come) and a last `{"summary": {...}}`; its per-prompt rows land in a temporary JSONL
file that becomes EvaluationSample rows. Whatever goes wrong (a dataset of the wrong shape, a
deleted checkpoint, a config no longer valid, a run or dataset its owner may no longer use, a
crash) ends the job `failed` with the reason in `error`; nothing else is touched. A job cancelled
while it runs (evaluations.services.cancel_job) has its child stopped by the heartbeat thread and
keeps the status `cancelled`. Access is checked
when the job starts (`check_access`), not only when it was queued: a dataset unshared in between
is not read.

What the child is given:
  checkpoint: the run's directory and --step, its config as the platform parses it now (the
              owner's datasets resolved); --dataset the task's name or the dataset's file (none for
              the run's eval set): scored with the run's rewards.
  model:      the model folder, a config naming it with the task (or, for an uploaded dataset,
              the math_answer reward).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any

import yaml
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from evaluations.models import DatasetKind, EvaluationJob, EvaluationSample, JobStatus

log = logging.getLogger(__name__)

TIMEOUT_S = 2 * 3600
KILL_AFTER_S = 5.0  # a cancelled job's child gets SIGTERM, then SIGKILL this much later
ERROR_CHARS = 2000
UPLOADED_DATASET_REWARDS = [{"name": "math_answer", "weight": 1.0}]


class JobFailed(Exception):
    """The job cannot be done; the message is for people."""


def run_job(job_id: int) -> str:
    """Claim queued job `job_id` (a redelivered or stale message does nothing), run it, record the
    outcome. Returns the job's status afterwards ('' if this call did nothing)."""
    now = timezone.now()
    claimed = EvaluationJob.objects.filter(pk=job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, attempts=F("attempts") + 1
    )
    if not claimed:
        return ""
    job = EvaluationJob.objects.select_related("run__experiment__owner", "dataset", "checkpoint", "owner").get(
        pk=job_id
    )
    try:
        with tempfile.TemporaryDirectory(prefix=f"evaluation-{job.pk}-") as folder:
            summary, rows = _evaluate(job, folder)
        _succeed(job, summary, rows)
    except JobFailed as exc:
        _fail(job, str(exc))
    except Exception as exc:  # noqa: BLE001 - a job ends failed, never stuck running
        log.exception("evaluation %s failed", job.pk)
        _fail(job, f"internal error: {type(exc).__name__}: {exc}")
    return EvaluationJob.objects.filter(pk=job.pk).values_list("status", flat=True).first() or ""


def child_config(job: EvaluationJob) -> dict[str, Any]:
    """The config the child evaluates under (plain data, paths resolved). JobFailed when the run's
    config is no longer valid here."""
    from experiments import configs

    if job.model_path:
        raw: dict[str, Any] = {"model": {"path": job.model_path}, "data": {"task": job.task or "arithmetic"}}
        if job.dataset_kind == DatasetKind.DATASET:
            raw["rewards"] = UPLOADED_DATASET_REWARDS
        owner = job.owner
    else:
        if job.run is None:
            raise JobFailed("the checkpoint's run was deleted")
        raw, owner = job.run.config, job.run.experiment.owner
    try:
        config = configs.parse(raw, owner)
    except configs.ConfigError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        raise JobFailed(f"the config is not valid on this platform now ({problems})") from None
    data = config.model_dump(mode="json", by_alias=True)
    data["data"]["train_dataset"] = data["data"]["eval_dataset"] = None  # resolved to paths already
    return data


def child_command(job: EvaluationJob, config_file: str, out_file: str) -> list[str]:
    """`python -m trainers evaluate ...` for the job. JobFailed when its checkpoint or dataset is gone."""
    from runner.storage import run_directory

    if job.model_path:
        policy = ["--config", config_file]
        target = (
            job.model_path
            if os.path.isabs(job.model_path)
            else os.path.join(str(settings.PLATFORM_MODELS_DIRS[0]), job.model_path)
        )
    else:
        if job.checkpoint is None:
            raise JobFailed(f"the checkpoint (step {job.step}) was deleted")
        target, policy = run_directory(job.run), ["--config", config_file, "--step", str(job.step)]
    dataset: list[str] = []
    if job.dataset_kind == DatasetKind.TASK:
        dataset = ["--dataset", job.task]
    elif job.dataset_kind == DatasetKind.DATASET:
        if job.dataset is None:
            raise JobFailed("the dataset was deleted")
        dataset = ["--dataset", job.dataset.absolute_path]
    budget = ["--max-new-tokens", str(job.max_new_tokens)] if job.max_new_tokens else []
    return [
        sys.executable,
        "-m",
        "trainers",
        "evaluate",
        target,
        *policy,
        *dataset,
        "--prompts",
        str(job.prompts),
        "--samples",
        str(job.k),
        "--k",
        str(job.k),
        *budget,
        "--out",
        out_file,
        "--json-progress",
    ]


def check_access(job: EvaluationJob) -> None:
    """JobFailed unless the job's owner may still use what it reads, as things are now, not as they
    were when the job was queued: the checkpoint's run (visible to them) and the uploaded dataset
    (theirs, or still shared with them). The run's config is checked again in `child_config`."""
    from experiments.dataset_models import Dataset
    from experiments.models import Run

    if job.run_id is not None and not Run.objects.visible_to(job.owner).filter(pk=job.run_id).exists():
        raise JobFailed(f"run {job.run_id} is no longer one you may see")
    if job.dataset_kind == DatasetKind.DATASET:
        if job.dataset_id is None:
            raise JobFailed("the dataset was deleted")
        if not Dataset.objects.visible_to(job.owner).filter(pk=job.dataset_id).exists():
            raise JobFailed(
                f"{job.dataset_label or 'the dataset'} is no longer one you may use (its owner stopped "
                "sharing it); choose another dataset"
            )


def _evaluate(job: EvaluationJob, folder: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    check_access(job)  # before anything reads the dataset or the checkpoint
    config_file, out_file = os.path.join(folder, "config.yaml"), os.path.join(folder, "samples.jsonl")
    with open(config_file, "w", encoding="utf-8") as f:
        yaml.safe_dump(child_config(job), f, sort_keys=False)
    command = child_command(job, config_file, out_file)
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    summary: dict[str, Any] | None = None
    with open(os.path.join(folder, "stderr.txt"), "w+", encoding="utf-8") as stderr:
        child = subprocess.Popen(
            command,
            cwd=str(settings.REPO_ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        done = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(job.pk, done, child), daemon=True)
        beat.start()
        try:
            for line in child.stdout:
                message = _message(line)
                if "progress" in message:
                    p = message["progress"]
                    EvaluationJob.objects.filter(pk=job.pk).update(
                        progress_done=int(p["done"]), progress_total=int(p["total"])
                    )
                elif "summary" in message:
                    summary = message["summary"]
            code = child.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise JobFailed(f"the evaluation took over {TIMEOUT_S} s and was stopped") from None
        finally:
            done.set()
            if child.poll() is None:
                child.kill()
                child.wait()
            beat.join()
        stderr.seek(0)
        errors = stderr.read()
    if code != 0 or summary is None:
        lines = [line for line in errors.splitlines() if line.strip()]
        own = [line.removeprefix("evaluate: ") for line in lines if line.startswith("evaluate: ")]
        raise JobFailed((own or lines or [f"exit code {code}"])[-1][:ERROR_CHARS])
    with open(out_file, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return summary, rows


def _heartbeat(job_id: int, done: threading.Event, child: subprocess.Popen | None = None) -> None:
    """Write the job's heartbeat every PLATFORM_HEARTBEAT_S until `done` (evaluations.recovery reads it).
    When the job is cancelled (evaluations.services.cancel_job), stop the child:
    SIGTERM, then SIGKILL after KILL_AFTER_S; the job keeps its cancelled status."""
    try:
        while not done.wait(settings.PLATFORM_HEARTBEAT_S):
            EvaluationJob.objects.filter(pk=job_id, status=JobStatus.RUNNING).update(heartbeat_at=timezone.now())
            if not EvaluationJob.objects.filter(pk=job_id, status=JobStatus.CANCELLED).exists():
                continue
            if child is not None and child.poll() is None:
                log.info("evaluation %s is no longer running (cancelled): stopping its child %s", job_id, child.pid)
                child.terminate()
                try:
                    child.wait(timeout=KILL_AFTER_S)
                except subprocess.TimeoutExpired:
                    child.kill()
            return
    except Exception:  # noqa: BLE001 - a missed heartbeat is not the job's failure
        log.exception("evaluation %s: heartbeat failed", job_id)
    finally:
        connection.close()  # this thread's own connection


def _message(line: str) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _succeed(job: EvaluationJob, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    samples = [
        EvaluationSample(
            job_id=job.pk,
            index=int(r["index"]),
            prompt=_text(r["prompt"]),
            completion=_text(r["completion"]),
            answer=_text(r.get("answer") or ""),
            reward=r.get("reward"),
            correct=bool(r.get("correct")),
            samples_correct=r.get("samples_correct"),
        )
        for r in rows
    ]
    with transaction.atomic():
        if not EvaluationJob.objects.select_for_update().filter(pk=job.pk, status=JobStatus.RUNNING).exists():
            return  # cancelled meanwhile: it stays cancelled, without samples
        EvaluationSample.objects.filter(job_id=job.pk).delete()
        EvaluationSample.objects.bulk_create(samples, batch_size=500)
        EvaluationJob.objects.filter(pk=job.pk).update(
            status=JobStatus.SUCCEEDED,
            finished_at=timezone.now(),
            error="",
            accuracy=summary.get("accuracy"),
            reward_mean=summary.get("reward_mean"),
            pass_at_1=summary.get("pass@1"),
            pass_at_k=summary.get(f"pass@{job.k}"),
            progress_done=len(rows),
            progress_total=len(rows),
        )


def _fail(job: EvaluationJob, message: str) -> None:
    EvaluationJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        status=JobStatus.FAILED, finished_at=timezone.now(), error=message[:ERROR_CHARS]
    )

"""What users do with evaluations: create a job (a checkpoint of a run they may see, or a model
folder, on a dataset they may use), ask a run to evaluate its best checkpoint when it ends. The web
pages, the JSON API and the end-of-run receiver all call these, so the rules live once.

Dataset specs (the API's "dataset", the form's choice): "task:NAME" (a built-in task's held-out
prompts), "dataset:ID" (an uploaded dataset the user may see, `Dataset.objects.visible_to`),
"run_eval" (the eval set of the checkpoint's run). A run or dataset the user may not see is
refused with 404, exactly like one that does not exist.

A job goes to the default Celery queue, like runs, once its row commits: a worker busy training
takes it after the run it trains."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from django.db import transaction

from evaluations.models import PENDING_STATUSES, DatasetKind, EvaluateOnEnd, EvaluationJob, JobStatus
from experiments.dataset_models import Dataset
from experiments.models import TERMINAL_STATUSES, Checkpoint, Run, RunStatus
from experiments.refusals import Refused
from experiments.whole_numbers import NotAWholeNumber, whole_number

RUN_JOB_TASK = "evaluations.run_job"  # evaluations.tasks.run_job, sent by name
MAX_K = 64
MAX_PROMPTS = 10_000
MAX_NEW_TOKENS = 4096
DEFAULT_PROMPTS = 64
DEFAULT_K = 4
BEST_METRICS = ("eval/accuracy", "reward/mean")


class EvaluationRefused(Refused):
    """Why a job (or an on-end request) was not made: the HTTP status, and the field when one input is at fault."""


@dataclasses.dataclass(frozen=True)
class DatasetChoice:
    kind: str
    task: str = ""
    dataset: Dataset | None = None

    def key(self, run: Run | None) -> str:
        """The leaderboard this choice ranks on."""
        if self.kind == DatasetKind.TASK:
            return f"task:{self.task}"
        if self.kind == DatasetKind.DATASET:
            return f"dataset:{self.dataset.pk}"
        return f"run-eval:{run.pk if run is not None else 0}"

    def label(self, run: Run | None) -> str:
        if self.kind == DatasetKind.TASK:
            return f"task {self.task}"
        if self.kind == DatasetKind.DATASET:
            return f"dataset {self.dataset.reference}"
        return f"eval set of run {run.label if run is not None else '?'}"


def parse_dataset(user, spec: Any) -> DatasetChoice:
    """A dataset spec (see the module docstring) -> the choice; EvaluationRefused 400 for a malformed
    one or an unknown task, 404 for a dataset the user may not see."""
    from trainers.data.tasks import TASKS

    if not isinstance(spec, str) or not spec:
        raise EvaluationRefused(400, "give a dataset: 'task:NAME', 'dataset:ID' or 'run_eval'", "dataset")
    if spec == "run_eval":
        return DatasetChoice(DatasetKind.RUN_EVAL)
    kind, _, value = spec.partition(":")
    if kind == "task":
        if value not in TASKS:
            raise EvaluationRefused(400, TASKS.unknown(value), "dataset")
        return DatasetChoice(DatasetKind.TASK, task=value)
    if kind == "dataset":
        try:
            dataset_id = whole_number(value, 1)
        except NotAWholeNumber:
            dataset_id = None
        if dataset_id is None:
            raise EvaluationRefused(400, f"'dataset:ID' needs a dataset id, got {value!r}", "dataset")
        dataset = Dataset.objects.visible_to(user).select_related("owner").filter(pk=dataset_id).first()
        if dataset is None:
            raise EvaluationRefused(404, f"no dataset {value} that you may use")
        return DatasetChoice(DatasetKind.DATASET, dataset=dataset)
    raise EvaluationRefused(400, f"dataset must be 'task:NAME', 'dataset:ID' or 'run_eval', got {spec!r}", "dataset")


def _bounded_int(value: Any, field: str, default: int, low: int, high: int) -> int:
    try:
        return whole_number(value, low, high, default=default)
    except NotAWholeNumber as exc:
        raise EvaluationRefused(400, f"{field} must be {exc}", field) from None


def _visible_run(user, run_id: Any) -> Run:
    try:
        pk = whole_number(run_id, 1)
    except NotAWholeNumber:
        pk = None
    if pk is None:
        raise EvaluationRefused(400, "run must be a run id", "run")
    run = Run.objects.visible_to(user).select_related("experiment__owner").filter(pk=pk).first()
    if run is None:
        raise EvaluationRefused(404, f"no run {run_id}")
    return run


def _model_folder(path: Any) -> str:
    from experiments.models_dir import available_models

    known = {m.path for m in available_models()}
    if not isinstance(path, str) or path not in known:
        raise EvaluationRefused(
            400, f"model must be one of the model folders ({', '.join(sorted(known)) or 'none'})", "model"
        )
    return path


def create_job(user, data: dict[str, Any], requested_by_run: Run | None = None) -> EvaluationJob:
    """A queued job from `data`: {"run": id, "step": N} (a checkpoint) or {"model": folder}, "dataset":
    spec, "prompts"? (default 64; 0 = all), "k"? (samples for pass@k, default 4), "max_new_tokens"?.
    Sent to the default queue once committed. EvaluationRefused for bad input (400), a run or dataset
    the user may not see (404)."""
    if not isinstance(data, dict):
        raise EvaluationRefused(400, "the body must be a JSON object")
    run, step, checkpoint, model_path = None, None, None, ""
    if data.get("run") is not None:
        run = _visible_run(user, data["run"])
        step = _bounded_int(data.get("step"), "step", -1, 0, 10**9)
        if step < 0:
            raise EvaluationRefused(400, "give the checkpoint's step", "step")
        checkpoint = run.checkpoints.filter(step=step).first()
        if checkpoint is None:
            steps = list(run.checkpoints.order_by("step").values_list("step", flat=True))
            raise EvaluationRefused(
                400,
                f"run {run.pk} has no checkpoint at step {step}"
                f"{'; it has steps ' + ', '.join(map(str, steps)) if steps else ''}",
                "step",
            )
    elif data.get("model") is not None:
        model_path = _model_folder(data["model"])
    else:
        raise EvaluationRefused(
            400, "give a checkpoint ({\"run\": id, \"step\": N}) or a model folder ({\"model\": path})", "run"
        )
    choice = parse_dataset(user, data.get("dataset"))
    if choice.kind == DatasetKind.RUN_EVAL and run is None:
        raise EvaluationRefused(
            400,
            "run_eval names the eval set of a checkpoint's run: evaluate a checkpoint, or choose a task or a dataset",
            "dataset",
        )
    job = EvaluationJob(
        owner=user,
        checkpoint=checkpoint,
        run=run,
        step=step,
        model_path=model_path,
        dataset_kind=choice.kind,
        task=choice.task,
        dataset=choice.dataset,
        dataset_key=choice.key(run),
        dataset_label=choice.label(run)[:200],
        prompts=_bounded_int(data.get("prompts"), "prompts", DEFAULT_PROMPTS, 0, MAX_PROMPTS),
        k=_bounded_int(data.get("k"), "k", DEFAULT_K, 1, MAX_K),
        max_new_tokens=_bounded_int(data.get("max_new_tokens"), "max_new_tokens", 0, 0, MAX_NEW_TOKENS) or None,
        requested_by_run=requested_by_run,
    )
    job.tokens = job_tokens(job)
    with transaction.atomic():
        check_room(user, job)
        job.save()
        send_when_committed(job)
    return job


# -- per-user limits: queued and running jobs, and their tokens ------------------------------------


def job_tokens(job: EvaluationJob) -> int:
    """The completion tokens `job` may generate: prompts x k x max_new_tokens. Where a figure is not
    known before the job runs, its bound: the whole dataset (prompts 0) is its rows for an uploaded
    dataset, else MAX_PROMPTS; an empty budget is the run's rollout.max_new_tokens, else MAX_NEW_TOKENS."""
    prompts = job.prompts
    if job.dataset_kind == DatasetKind.DATASET and job.dataset is not None:
        prompts = min(prompts, job.dataset.rows) if prompts else job.dataset.rows
    prompts = prompts or MAX_PROMPTS
    budget = job.max_new_tokens
    if not budget and job.run is not None:
        budget = ((job.run.config or {}).get("rollout") or {}).get("max_new_tokens")
    budget = budget if isinstance(budget, int) and budget > 0 else MAX_NEW_TOKENS
    return prompts * job.k * budget


@dataclasses.dataclass(frozen=True)
class Usage:
    """A user's queued and running evaluation jobs and their tokens together."""

    jobs: int
    tokens: int

    def as_json(self) -> dict[str, int]:
        return {"jobs": self.jobs, "tokens": self.tokens}


def usage_for(user) -> Usage:
    from django.db.models import Count, Sum

    found = EvaluationJob.objects.filter(owner_id=user.pk, status__in=PENDING_STATUSES).aggregate(
        jobs=Count("id"), tokens=Sum("tokens")
    )
    return Usage(found["jobs"] or 0, found["tokens"] or 0)


def check_room(user, job: EvaluationJob) -> None:
    """Inside the transaction that saves `job`: lock the owner's row (concurrent creates of one user
    take turns until commit), then EvaluationRefused(429) naming the limit when one more job, or its
    tokens, would go over the owner's limits (runner.limits: PLATFORM_MAX_EVALUATION_JOBS_PER_USER,
    PLATFORM_MAX_EVALUATION_TOKENS_PER_USER)."""
    from django.contrib.auth import get_user_model

    from runner.limits import limits_for

    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    limits, usage = limits_for(user), usage_for(user)
    if usage.jobs + 1 > limits.max_evaluation_jobs:
        raise EvaluationRefused(
            429,
            f"evaluation jobs: you have {usage.jobs} queued or running, the limit is "
            f"{limits.max_evaluation_jobs} (PLATFORM_MAX_EVALUATION_JOBS_PER_USER); wait for "
            "one to finish or cancel one",
        )
    if usage.tokens + job.tokens > limits.max_evaluation_tokens:
        budget = job.max_new_tokens or "(the run's budget)"
        raise EvaluationRefused(
            429,
            f"evaluation tokens: this job's prompts x k x max_new_tokens = {job.tokens:,} "
            f"(k {job.k}, max_new_tokens {budget}), with your queued and running jobs' "
            f"{usage.tokens:,} that is {usage.tokens + job.tokens:,}, the limit is "
            f"{limits.max_evaluation_tokens:,} (PLATFORM_MAX_EVALUATION_TOKENS_PER_USER); "
            "lower prompts, k or max_new_tokens, or cancel a job",
        )


def cancel_job(job: EvaluationJob) -> bool:
    """Cancel a queued or running job: True when it was one. A queued job never starts; a running
    job's worker sees the status within PLATFORM_HEARTBEAT_S and stops its child process
    (evaluations.jobs)."""
    from django.utils import timezone

    return bool(
        EvaluationJob.objects.filter(pk=job.pk, status__in=PENDING_STATUSES).update(
            status=JobStatus.CANCELLED, finished_at=timezone.now(), error="cancelled"
        )
    )


def send_when_committed(job: EvaluationJob) -> None:
    """Put the job's message on the default queue once the surrounding transaction commits."""
    from grpo_platform.celery_app import app
    from runner.queues import default_queue_name

    job_id = job.pk
    transaction.on_commit(lambda: app.send_task(RUN_JOB_TASK, args=[job_id], queue=default_queue_name()))


# -- evaluate the best checkpoint when a run ends --------------------------------------------------


def best_checkpoint(checkpoints: list[Checkpoint]) -> Checkpoint | None:
    """The checkpoint with the highest eval/accuracy in its metrics (when any has it; else the highest
    reward/mean), the newest (highest step) on ties; with neither metric, the newest. None for none."""
    if not checkpoints:
        return None
    for name in BEST_METRICS:
        scored = [(c.metrics.get(name), c.step, c) for c in checkpoints if isinstance(c.metrics, dict)]
        scored = [(v, s, c) for v, s, c in scored if isinstance(v, (int, float)) and math.isfinite(v)]
        if scored:
            return max(scored, key=lambda t: (t[0], t[1]))[2]
    return max(checkpoints, key=lambda c: c.step)


def request_on_end(user, run: Run, data: dict[str, Any]) -> EvaluateOnEnd:
    """Ask `run` (which `user` may change) to evaluate its best checkpoint on `data["dataset"]` when it
    succeeds (replacing an earlier request not yet done). A run that has already succeeded is past its
    end: its best checkpoint is queued for evaluation now (the request's `job`). A run that ended
    otherwise (failed, cancelled, pruned) will not succeed as it is: refused (409), saying what to do
    instead. EvaluationRefused for bad input, and for a succeeded run without a checkpoint (409)."""
    if not isinstance(data, dict):
        raise EvaluationRefused(400, "the body must be a JSON object")
    choice = parse_dataset(user, data.get("dataset"))
    prompts = _bounded_int(data.get("prompts"), "prompts", DEFAULT_PROMPTS, 0, MAX_PROMPTS)
    k = _bounded_int(data.get("k"), "k", DEFAULT_K, 1, MAX_K)
    status = Run.objects.filter(pk=run.pk).values_list("status", flat=True).first() or run.status
    if status in TERMINAL_STATUSES and status != RunStatus.SUCCEEDED:
        raise EvaluationRefused(
            409,
            f"run {run.label} has ended ({status}) and will not succeed as it is: evaluate one of its "
            "checkpoints now (give its step), or retry the run first",
        )
    with transaction.atomic():  # a refused evaluation leaves no request behind
        request, _ = EvaluateOnEnd.objects.update_or_create(
            run=run,
            defaults={
                "dataset_kind": choice.kind,
                "task": choice.task,
                "dataset": choice.dataset,
                "prompts": prompts,
                "k": k,
                "job": None,
            },
        )
        if status == RunStatus.SUCCEEDED:  # its end has passed: evaluate now
            if evaluate_on_end(run.pk) is None:
                raise EvaluationRefused(409, f"run {run.label} succeeded without a checkpoint: nothing to evaluate")
            request.refresh_from_db()
    return request


def evaluate_on_end(run_id: int) -> EvaluationJob | None:
    """The job for run `run_id`'s evaluate-on-end request, made at most once (the request row is
    locked and marked); None when there is no request, it is done, or the run has no checkpoint.
    Called once the run's succeeded status commits."""
    with transaction.atomic():
        # of=self: PostgreSQL locks no row of the nullable side of an outer join (the dataset)
        request = (
            EvaluateOnEnd.objects.select_for_update(of=("self",))
            .select_related("run__experiment__owner")
            .filter(run_id=run_id, job__isnull=True)
            .first()
        )
        if request is None:
            return None
        run = request.run
        best = best_checkpoint(list(run.checkpoints.all()))
        if best is None:
            return None
        spec = (
            "run_eval"
            if request.dataset_kind == DatasetKind.RUN_EVAL
            else f"task:{request.task}"
            if request.dataset_kind == DatasetKind.TASK
            else f"dataset:{request.dataset_id}"
        )
        owner = run.experiment.owner
        job = create_job(
            owner,
            {"run": run.pk, "step": best.step, "dataset": spec, "prompts": request.prompts, "k": request.k},
            requested_by_run=run,
        )
        request.job = job
        request.save(update_fields=["job"])
    return job

"""The JSON API's evaluation endpoints (evaluations app). Thin: evaluations.services decides.

GET  POST  evaluations                  ?run=&dataset=&status=&limit= / {"run", "step"} or {"model"}, "dataset", ...
GET        evaluations/<id>             status, progress, results
GET        evaluations/<id>/samples     ?after=&limit=&correct=   per-prompt completions
     POST  evaluations/<id>/cancel      stop a queued or running job (202; 409 once it ended)
GET        evaluations/leaderboard      ?dataset=KEY   the leaderboards, and one's rows best first
POST       runs/<id>/evaluate-on-end    {"dataset", "prompts"?, "k"?}: evaluate the best checkpoint when it succeeds
"""

from __future__ import annotations

from django.urls import reverse

from api import evaluation_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, checked_body, payload, send
from evaluations import leaderboard as boards
from evaluations import services
from evaluations.models import EvaluationJob, JobStatus
from experiments.access import get_for_user
from experiments.models import Run
from experiments.shown_paths import shown


def job_shape(job: EvaluationJob) -> shapes.EvaluationJobJson:
    return shapes.EvaluationJobJson(
        id=job.pk,
        url=reverse("evaluation-detail", args=[job.pk]),
        status=job.status,
        run=job.run_id,
        step=job.step,
        model=job.model_path,
        policy=job.policy_label,
        dataset=job.dataset_key,
        dataset_label=job.dataset_label,
        prompts=job.prompts,
        k=job.k,
        progress_done=job.progress_done,
        progress_total=job.progress_total,
        accuracy=job.accuracy,
        pass_at_1=job.pass_at_1,
        pass_at_k=job.pass_at_k,
        reward_mean=job.reward_mean,
        error=shown(job.error),
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def sample_shape(sample) -> shapes.EvaluationSampleJson:
    return shapes.EvaluationSampleJson(
        index=sample.index,
        prompt=sample.prompt,
        completion=sample.completion,
        answer=sample.answer,
        reward=sample.reward,
        correct=sample.correct,
        samples_correct=sample.samples_correct,
    )


def _refused(exc: services.EvaluationRefused) -> ApiError:
    if exc.field and exc.status == 400:
        return ApiError(exc.status, errors={exc.field: exc.message})
    return ApiError(exc.status, exc.message)


def _jobs(request):
    return EvaluationJob.objects.visible_to(request.user).select_related("run", "owner")


@operations(
    GET=Op(query=shapes.EvaluationListQuery, responses={200: shapes.EvaluationList, 400: Error}),
    POST=Op(
        body=shapes.EvaluationInput, responses={201: shapes.EvaluationJobJson, 400: Errors, 404: Error, 429: Error}
    ),
)
@api_endpoint("GET", "POST")
def evaluations(request):
    """GET: your evaluation jobs, newest first (?run=ID, ?dataset=KEY, ?status=, ?limit=).
    POST {"run": id, "step": N} (a checkpoint of a run you may see) or {"model": folder}, "dataset":
    'task:NAME' | 'dataset:ID' | 'run_eval', "prompts"? (64; 0 = all), "k"? (4), "max_new_tokens"?:
    201 the queued job; 400 {"errors": {field}} for bad input; 404 for a run or dataset you may not see;
    429 over your limits on queued and running jobs or their tokens (prompts x k x max_new_tokens)."""
    if request.method == "POST":
        try:
            job = services.create_job(request.user, checked_body(request))
        except services.EvaluationRefused as exc:
            raise _refused(exc) from None
        return send(job_shape(job), 201, location=f"/api/evaluations/{job.pk}")
    query: shapes.EvaluationListQuery = request.query
    jobs = _jobs(request)
    if query.run is not None:
        jobs = jobs.filter(run_id=query.run)
    if query.dataset:
        jobs = jobs.filter(dataset_key=query.dataset)
    if query.status is not None:
        jobs = jobs.filter(status=query.status)
    limit = min(query.limit, shapes.LIST_LIMIT_MAX)
    rows = [job_shape(j) for j in jobs.order_by("-created_at", "-id")[:limit]]
    return shapes.EvaluationList(evaluations=rows, count=len(rows))


@operations(GET=Op(responses={200: shapes.EvaluationJobJson}))
@api_endpoint("GET")
def evaluation_detail(request, pk: int):
    """One job: status, progress (prompts done of total), results, error. Another user's: 404."""
    return job_shape(get_for_user(_jobs(request), request.user, pk))


@operations(POST=Op(responses={202: shapes.Cancelled, 403: Error, 409: Error}))
@api_endpoint("POST")
def evaluation_cancel(request, pk: int):
    """Cancel a queued or running job: 202 {"id", "status": "cancelled"}; a running job's worker stops
    its child process within a heartbeat. 409 when it has already ended; 403 for a job you may only see."""
    job = get_for_user(_jobs(request), request.user, pk, change=True)
    if not services.cancel_job(job):
        job.refresh_from_db(fields=["status"])
        raise ApiError(409, f"cannot cancel evaluation {job.pk}: it is {job.status}")
    return send(shapes.Cancelled(id=job.pk, status=JobStatus.CANCELLED.value), 202)


@operations(GET=Op(query=shapes.EvaluationSamplesQuery, responses={200: shapes.EvaluationSamples, 400: Error}))
@api_endpoint("GET")
def evaluation_samples(request, pk: int):
    """A job's per-prompt completions by index: ?after=INDEX&limit=100&correct=true|false."""
    query: shapes.EvaluationSamplesQuery = request.query
    job = get_for_user(_jobs(request), request.user, pk)
    limit = min(query.limit, shapes.LIST_LIMIT_MAX)
    samples = job.samples.filter(index__gt=query.after)
    if query.correct is not None:
        samples = samples.filter(correct=query.correct)
    page = list(samples.order_by("index")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return shapes.EvaluationSamples(
        samples=[sample_shape(s) for s in page], next_after=page[-1].index if more else None
    )


@operations(GET=Op(query=shapes.LeaderboardQuery, responses={200: shapes.Leaderboard}))
@api_endpoint("GET")
def evaluation_leaderboard(request):
    """The datasets with results you may see ("boards", each with the (prompts, k) it was measured
    at), and with ?dataset=KEY that leaderboard's rows: one per checkpoint or model folder and
    measure (its newest succeeded job with an accuracy), listed by measure (more prompts first, then
    the larger k), best accuracy first within each, `rank` restarting for each; ?prompts=&k= keep one
    measure's board. Jobs of different prompts or k never rank against each other."""
    query: shapes.LeaderboardQuery = request.query
    key = query.dataset or None
    listed = [
        shapes.LeaderboardEntry(
            key=b.key,
            label=b.label,
            jobs=b.jobs,
            measures=[shapes.LeaderboardMeasure(prompts=p, k=n) for p, n in b.measures],
        )
        for b in boards.boards(request.user)
    ]
    rows = (
        [
            shapes.LeaderboardRow(**dict(job_shape(j)), rank=j.rank)
            for j in boards.leaderboard(request.user, key, query.prompts, query.k)
        ]
        if key
        else []
    )
    return shapes.Leaderboard(dataset=key, boards=listed, rows=rows)


@operations(POST=Op(body=shapes.OnEndInput, responses={201: shapes.OnEnd, 400: Errors, 403: Error, 409: Error}))
@api_endpoint("POST")
def run_evaluate_on_end(request, pk: int):
    """POST {"dataset": spec, "prompts"?, "k"?}: when this run succeeds, its best checkpoint (highest
    eval/accuracy, else reward/mean, newest on ties) is evaluated on the dataset; a run that has
    already succeeded is evaluated now (the answer's job). 201 the request; a run that ended
    otherwise, or succeeded without a checkpoint, 409; a run you may only see 403; a dataset you may
    not use 404."""
    run = get_for_user(Run.objects.select_related("experiment__owner"), request.user, pk, change=True)
    try:
        asked = services.request_on_end(request.user, run, checked_body(request))
    except services.EvaluationRefused as exc:
        raise _refused(exc) from None
    asked_on_end = shapes.OnEnd(
        run=run.pk, dataset=payload(request).dataset, prompts=asked.prompts, k=asked.k, job=asked.job_id
    )
    return send(asked_on_end, 201)

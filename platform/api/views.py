"""The JSON API's views: thin. `api_endpoint` authenticates and turns failures into JSON; a view
picks what the caller may see (experiments.access: someone else's experiment or run answers 404,
exactly like one that does not exist, unless the caller has the model's view permission; changing
one they may only see answers 403), calls one function of runner.services /
experiments.metric_series / api.payloads, and returns a dict. The URL list and shapes are in
api/urls.py."""

from __future__ import annotations

import re

from django.db import transaction
from django.db.models import Count, Max
from django.http import JsonResponse

from evaluations import services as evaluation_services
from experiments import configs, metric_series, run_filters, run_labels, sample_query
from experiments.access import get_for_user
from experiments.models import Experiment, MetricPoint, RolloutSample, Run, SampleKind
from experiments.models_dir import available_models
from experiments.shown_paths import shown
from experiments.whole_numbers import NotAWholeNumber, whole_number
from runner import exports, queues, services

from api import payloads, sample_views
from api import shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, int_param, json_body, refused

LIST_LIMIT = 100           # default page size of the lists
LIST_LIMIT_MAX = 1000
SAMPLE_STEPS_LISTED = 50   # recent steps with samples that /samples names
EVENTS_LIMIT = 200
EVENTS_LIMIT_MAX = 1000
MAX_RESTARTS_LIMIT = 100
QUEUE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _experiment(request, pk: int, change: bool = False) -> Experiment:
    return get_for_user(Experiment.objects.select_related("owner"), request.user, pk, change=change)


def _run(request, pk: int, change: bool = False) -> Run:
    runs = Run.objects.select_related("experiment", "config_version")
    return get_for_user(runs, request.user, pk, change=change)


def _created(body: dict, location: str) -> JsonResponse:
    response = JsonResponse(body, status=201)
    response["Location"] = location
    return response


def _page(request, queryset) -> tuple[list, int]:
    limit = int_param(request, "limit", LIST_LIMIT, minimum=1, maximum=LIST_LIMIT_MAX)
    offset = int_param(request, "offset", 0, minimum=0)
    return list(queryset[offset:offset + limit]), queryset.count()


# --- experiments ------------------------------------------------------------------------------


@operations(
    GET=Op(query=shapes.ExperimentPage, responses={200: shapes.ExperimentList},
           summary="List the experiments you may see"),
    POST=Op(body=shapes.ExperimentInput, responses={201: shapes.ExperimentCreated, 400: Errors},
           summary="Create an experiment from a config"),
)
@api_endpoint("GET", "POST")
def experiments(request):
    """GET: the experiments the caller may see (own; everyone's with the view permission), newest first;
    ?name=NAME: only those of exactly that name (`grpo_client launch --experiment NAME` finds its own so).
    POST {"name", "config" | "config_yaml", "description"?}: 201 {"id"}, or 400 {"errors": {field: message}}."""
    if request.method == "POST":
        try:
            fields = payloads.experiment_input(json_body(request), owner=request.user)
        except payloads.InvalidInput as exc:
            raise ApiError(400, errors=exc.errors) from None
        experiment = Experiment(owner=request.user, name=fields["name"], description=fields.get("description", ""))
        version = experiment.set_config(fields["config"], user=request.user, note="created (API)")
        return _created({"id": experiment.pk, "version": version.number}, f"/api/experiments/{experiment.pk}")
    queryset = (Experiment.objects.visible_to(request.user).select_related("owner")
                .annotate(run_count=Count("runs", distinct=True), version=Max("versions__number")))
    if request.GET.get("name"):
        queryset = queryset.filter(name=request.GET["name"][:200])
    rows, count = _page(request, queryset)
    return {"experiments": [payloads.experiment_summary(e) for e in rows], "count": count}


@operations(
    GET=Op(responses={200: shapes.ExperimentDetail}, summary="An experiment: its config, versions and recent runs"),
    PUT=Op(body=shapes.ExperimentInput, responses={200: shapes.ExperimentDetail, 400: Errors, 403: Error},
          summary="Replace an experiment's name and config (a changed config adds a version)"),
    PATCH=Op(body=shapes.ExperimentPatch, responses={200: shapes.ExperimentDetail, 400: Errors, 403: Error},
            summary="Change some of an experiment's fields (a changed config adds a version)"),
)
@api_endpoint("GET", "PUT", "PATCH")
def experiment_detail(request, pk: int):
    """GET: the experiment, its config, versions and recent runs. PUT (name and config required) /
    PATCH (any of name, description, config, config_yaml): a changed config adds a version."""
    experiment = _experiment(request, pk, change=request.method in ("PUT", "PATCH"))
    if request.method in ("PUT", "PATCH"):
        try:
            fields = payloads.experiment_input(json_body(request), partial=request.method == "PATCH",
                                               owner=experiment.owner)
        except payloads.InvalidInput as exc:
            raise ApiError(400, errors=exc.errors) from None
        config = fields.pop("config", None)
        for name, value in fields.items():
            setattr(experiment, name, value)
        if config is not None:
            experiment.set_config(config, user=request.user, note=f"updated (API {request.method})")
        else:
            experiment.save()
    return payloads.experiment_detail(experiment)


@operations(
    GET=Op(query=shapes.Page, responses={200: shapes.RunList}, summary="List an experiment's runs"),
    POST=Op(body=shapes.LaunchInput, responses={201: shapes.Launched, 400: Errors, 403: Errors, 429: Errors},
           summary="Launch a run of the experiment's current config"),
)
@api_endpoint("GET", "POST")
def experiment_runs(request, pk: int):
    """GET: the experiment's runs. POST {"max_restarts"?, "queue"?, "evaluate_on_end"?: {"dataset", "prompts"?,
    "k"?} (evaluate its best checkpoint when it succeeds: api/evaluation_views.py)}: 201 {"id", "status", "queue",
    "warning"? (no live worker reads the queue)}, a queued run of the experiment's current config
    (validated again: 400 {"errors"} if it no longer is). 400/403 {"errors": {"queue"}} for a queue
    the owner may not use, 429 over their queued-run limit (runner.queues, runner.limits)."""
    experiment = _experiment(request, pk, change=request.method == "POST")
    if request.method == "POST":
        data = json_body(request)
        try:
            max_restarts = whole_number(data.get("max_restarts"), 0, MAX_RESTARTS_LIMIT)
        except NotAWholeNumber:
            raise ApiError(400, errors={"max_restarts": f"must be a whole number from 0 to {MAX_RESTARTS_LIMIT}"}) \
                from None
        queue = data.get("queue") or None
        if queue is not None and not (isinstance(queue, str) and QUEUE_NAME.fullmatch(queue)):
            raise ApiError(400, errors={"queue": "a queue name: 1-64 letters, digits, '.', '_' or '-'"})
        try:  # the stored config again, as the web's launch does: a model folder may be gone since
            configs.parse(experiment.config, experiment.owner)
        except configs.ConfigError as exc:
            raise ApiError(400, "the experiment's config is no longer valid; update it before launching",
                           errors=exc.as_dict()) from None
        on_end = data.get("evaluate_on_end")
        if on_end is not None and not isinstance(on_end, dict):
            raise ApiError(400, errors={"evaluate_on_end": "an object: {\"dataset\", \"prompts\"?, \"k\"?}"})
        try:
            with transaction.atomic():  # a refused evaluate_on_end launches nothing
                run = services.launch_run(experiment, max_restarts=max_restarts, queue=queue)
                if on_end is not None:
                    evaluation_services.request_on_end(request.user, run, on_end)
        except services.LaunchRefused as exc:
            raise refused(exc) from None
        except evaluation_services.EvaluationRefused as exc:
            field = f"evaluate_on_end.{exc.field}" if exc.field else "evaluate_on_end"
            raise (ApiError(exc.status, errors={field: exc.message}) if exc.status == 400
                   else ApiError(exc.status, exc.message)) from None
        body = {"id": run.pk, "status": run.status, "queue": run.queue}
        warning = queues.no_worker_warning(run.queue)
        if warning:
            body["warning"] = warning
        return _created(body, f"/api/runs/{run.pk}")
    queryset = experiment.runs.select_related("experiment", "config_version").prefetch_related("tags")
    rows, count = _page(request, queryset)
    return {"runs": [payloads.run_detail(r) for r in rows], "count": count}


# --- runs -------------------------------------------------------------------------------------


@operations(
    GET=Op(query=shapes.RunTableQuery, responses={200: shapes.RunTable}),
)
@api_endpoint("GET")
def runs(request):
    """The runs table: the runs the caller may see, filtered, sorted and with metric columns as
    experiments.run_filters reads ?status=&experiment=&owner=&tag=&config=PATH:VALUE&metrics=&sort=
    (newest first by default); each run also has "owner" and "metrics" {name: latest value}.
    400 {"errors": {parameter: message}} for a parameter that cannot be used."""
    try:
        query = run_filters.parse(dict(request.GET.lists()))
    except run_filters.FilterError as exc:
        raise ApiError(400, str(exc), errors={exc.parameter: exc.message}) from None
    queryset = (Run.objects.visible_to(request.user).select_related("experiment__owner", "config_version")
                .prefetch_related("tags"))
    rows, count = _page(request, run_filters.apply(queryset, query))
    return {"runs": [payloads.run_list_entry(r, query) for r in rows], "count": count,
            "metrics": list(query.metrics), "sort": query.sort}


@operations(
    GET=Op(responses={200: shapes.RunDetail}, summary="A run: status, progress, config and lineage"),
    PATCH=Op(body=shapes.LabelsInput, responses={200: shapes.RunDetail, 400: Errors, 403: Error},
            summary="Rename a run, or replace its tags or notes"),
)
@api_endpoint("GET", "PATCH")
def run_detail(request, pk: int):
    """GET: the run. PATCH {"name"?: text, "tags"?: [names], "notes"?: text} (who may steer the run):
    replaces its name, tags and/or notes (experiments.run_labels: 400 {"errors": {field: message}}),
    answers the run."""
    if request.method == "PATCH":
        run = _run(request, pk, change=True)
        try:
            labels = run_labels.check_labels(json_body(request))
        except run_labels.LabelError as exc:
            raise ApiError(400, errors=exc.errors) from None
        run_labels.save_labels(run, labels)
        return payloads.run_detail(run)
    return payloads.run_detail(_run(request, pk))


@operations(
    GET=Op(query=shapes.MetricsQuery, responses={200: shapes.Metrics}),
)
@api_endpoint("GET")
def run_metrics(request, pk: int):
    """?name=NAME&after_step=K: {"points": [[step, value], ...]} after step K, by step.
    Without name: {"series": {name: [[step, value], ...]}, "last_step": K'} for every metric.
    A value is a number, or "NaN" / "Infinity" / "-Infinity" (a diverged step, shown as such)."""
    run = _run(request, pk)
    after_step = int_param(request, "after_step", -1)
    name = request.GET.get("name")
    if name is None:
        return metric_series.points_after(run, after_step)
    rows = (MetricPoint.objects.filter(run=run, name=name, step__gt=after_step)
            .order_by("step").values_list("step", "value"))
    points = [[step, metric_series.json_value(metric_series.stored_value(value))] for step, value in rows]
    return {"name": name, "points": points, "last_step": points[-1][0] if points else after_step}


@operations(
    GET=Op(query=shapes.ChartQuery, responses={200: shapes.Chart}),
)
@api_endpoint("GET")
def run_chart(request, pk: int):
    """?max_points=N (default and cap 2000): {"series": {name: {"steps", "values"}}, "last_step"},
    each series cut to at most N points keeping every bucket's minimum and maximum (and its NaN).
    Values as in /metrics: numbers, or "NaN" / "Infinity" / "-Infinity"."""
    run = _run(request, pk)
    max_points = int_param(request, "max_points", metric_series.DEFAULT_MAX_POINTS, minimum=1,
                           maximum=metric_series.DEFAULT_MAX_POINTS)
    return metric_series.chart(run, max_points)


@operations(
    GET=Op(query=shapes.SamplesQuery, responses={200: shapes.SamplesAnswer}),
)
@api_endpoint("GET")
def run_samples(request, pk: int):
    """?step=S (default: the newest step with samples): {"steps": [recent steps with samples,
    newest first], "step": S, "samples": [...]}. With a browse parameter: api/sample_views.py."""
    run = _run(request, pk)
    if sample_query.is_browse(request.GET):
        return sample_views.browse(request, run)
    trained = RolloutSample.objects.filter(run=run, kind=SampleKind.TRAIN)
    steps = list(trained.order_by("-step").values_list("step", flat=True).distinct()[:SAMPLE_STEPS_LISTED])
    step = int_param(request, "step", steps[0] if steps else None)
    samples = trained.filter(step=step).order_by("index") if step is not None else []
    return {"steps": steps, "step": step, "samples": [payloads.sample_json(s) for s in samples]}


@operations(
    GET=Op(responses={200: shapes.Checkpoints}),
)
@api_endpoint("GET")
def run_checkpoints(request, pk: int):
    """The run's checkpoints by step: {"checkpoints": [{"step", "path", "size_bytes", "metrics", "created_at"}]}."""
    run = _run(request, pk)
    return {"checkpoints": [payloads.checkpoint_json(c) for c in run.checkpoints.order_by("step")]}


@operations(
    GET=Op(query=shapes.EventsQuery, responses={200: shapes.Events}),
)
@api_endpoint("GET")
def run_events(request, pk: int):
    """?after_id=N&limit=200: the run's log lines and status changes after event N, oldest first."""
    run = _run(request, pk)
    after_id = int_param(request, "after_id", 0)
    limit = int_param(request, "limit", EVENTS_LIMIT, minimum=1, maximum=EVENTS_LIMIT_MAX)
    events = list(run.events.filter(id__gt=after_id).order_by("id")[:limit])
    return {"events": [payloads.event_json(e) for e in events], "last_id": events[-1].pk if events else after_id}


@operations(
    POST=Op(responses={202: shapes.ActionDone, 400: Errors, 403: Error, 409: Error, 429: Errors}),
)
@api_endpoint("POST")
def run_action(request, pk: int, action: str):
    """POST /api/runs/<id>/<cancel|pause|resume|retry>: 202 {"id", "status"}, or 409 when the
    run's status does not allow it; resume and retry: 400 {"errors": {field}} when the run's config
    no longer validates (it would fail at start), 429 over a limit."""
    run = _run(request, pk, change=True)
    before = run.status
    try:
        changed = services.ACTIONS[action].function(run)
    except services.LaunchRefused as exc:
        raise refused(exc) from None
    if not changed:
        run.refresh_from_db(fields=["status"])
        raise ApiError(409, f"cannot {action} run {run.pk}: it is {run.status}"
                       + (f" (was {before})" if before != run.status else ""))
    run.refresh_from_db(fields=["status"])
    return JsonResponse({"id": run.pk, "status": run.status}, status=202)


@operations(
    POST=Op(body=shapes.ExportInput, responses={201: shapes.Exported, 400: Errors, 403: Error, 409: Error, 429: Error}),
)
@api_endpoint("POST")
def run_export(request, pk: int):
    """POST /api/runs/<id>/export {"step"?: N (default: the newest checkpoint), "dtype"?: "float32" |
    "bfloat16"}: writes that checkpoint as a Hugging Face folder under PLATFORM_DATA_DIR/exports/ and
    answers 201 {"path" (shown as `<data>/exports/run-<id>-step-<N>`), "step", "dtype"} once it is
    written (synchronous: about 10 s for a 135M model; see runner.exports). 400 for a toy-preset run,
    a run without checkpoints or a bad step/dtype; 404 for a step without a checkpoint; 409 when that
    checkpoint is already exported (the message says where); 429 while the run's owner is at or over
    their storage quota (runner.storage)."""
    run = _run(request, pk, change=True)
    data = json_body(request)
    try:
        step = whole_number(data.get("step"), 0, 2**31 - 1)
    except NotAWholeNumber:
        raise ApiError(400, errors={"step": "a checkpoint's step: a whole number (or leave it out for the newest)"}) \
            from None
    dtype = data.get("dtype") or "float32"
    if dtype not in exports.DTYPES:
        raise ApiError(400, errors={"dtype": f"one of {', '.join(exports.DTYPES)}"})
    try:
        done = exports.export_checkpoint(run, step=step, dtype=dtype)
    except exports.ExportRefused as exc:
        raise ApiError(exc.status, exc.message) from None
    return JsonResponse({"path": shown(done.path), "step": done.step, "dtype": done.dtype}, status=201)


@operations(
    GET=Op(responses={200: shapes.Models}),
)
@api_endpoint("GET")
def models(request):
    """The pretrained models experiments may train (`model.path`): {"models": [{"name", "path",
    "architecture", "size", "parameters", "has_chat_template"}]}; `path` is the value to give
    (relative to the first model root, as stored configs name it: no server directory)."""
    return {"models": [m.as_json() for m in available_models()]}

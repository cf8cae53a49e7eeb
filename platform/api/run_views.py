"""The JSON API's run endpoints. Thin, like every api/*_views.py: `api_endpoint` authenticates and
turns failures into JSON; a view picks what the caller may see (experiments.access: someone else's
run answers 404, exactly like one that does not exist, unless the caller has the model's view
permission; changing one they may only see answers 403), calls one function of runner.services /
experiments.metric_series, and answers its declared shape (api/run_shapes.py).

    GET        runs                              the runs table: ?status=&experiment=&owner=&tag=&config=&metrics=&sort=
    GET PATCH  runs/<id>                         status and progress / {"name", "tags", "notes"}
    GET        runs/<id>/metrics                 ?name=&after_step=
    GET        runs/<id>/chart                   ?max_points=   (min/max downsampled)
    GET        runs/<id>/events                  ?after_id=&limit=
    POST       runs/<id>/cancel|pause|resume|retry
"""

from __future__ import annotations

from api import run_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, checked_body, page, refused, send
from api.shapes import finite
from experiments import metric_series, run_filters, run_labels
from experiments.access import get_for_user
from experiments.models import MetricPoint, Run, RunEvent
from experiments.shown_paths import shown
from runner import services


def _run(request, pk: int, change: bool = False) -> Run:
    runs = Run.objects.select_related("experiment", "config_version")
    return get_for_user(runs, request.user, pk, change=change)


def run_shape(run: Run) -> shapes.RunDetail:
    """A run's status, progress, tags and notes (the experiment should be select_related, the tags
    prefetched when listing)."""
    return shapes.RunDetail(
        **{
            "id": run.pk,
            "name": run.name,
            "status": run.status,
            "step": run.step,
            "max_steps": run.max_steps,
            "progress": run.progress,
            "restarts": run.restarts,
            "attempt": run.attempt,
            "max_restarts": run.max_restarts,
            "worker": run.worker_host,
            "worker_pid": run.worker_pid,
            "heartbeat_at": run.heartbeat_at,
            "created_at": run.created_at,
            "queued_at": run.queued_at,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "duration_s": run.duration_s,
            "running_s": run.running_s,
            "latest_reward": finite(run.latest_reward),
            "error": shown(run.error),  # server paths relative to their root, here and in events
            "params_digest": run.params_digest,
            "config_version": run.config_version.number if run.config_version_id else None,
            "experiment": shapes.ExperimentRef(id=run.experiment_id, name=run.experiment.name),
            "tags": run_labels.tag_names(run),
            "notes": run.notes,
            # lineage (runner.forks): the parent run's id, its checkpoint step, "fresh" | "continued"
            "forked_from": run.forked_from_id,
            "forked_from_step": run.forked_from_step,
            "fork_optimizer": run.fork_optimizer or None,
        }
    )


def run_table_entry(run: Run, query: run_filters.RunQuery) -> shapes.RunTableEntry:
    """A row of the runs table (GET /api/runs): the run, its owner's username and {metric: value
    at its latest step} of the query's metric columns (the queryset comes from run_filters.apply,
    with experiment__owner select_related and tags prefetched)."""
    values = run_filters.latest_values(run, query)
    return shapes.RunTableEntry(
        **dict(run_shape(run)),
        owner=run.experiment.owner.get_username(),
        metrics={name: finite(value) for name, value in values.items()},
    )


def event_shape(event: RunEvent) -> shapes.Event:
    return shapes.Event(
        id=event.pk,
        created_at=event.created_at,
        attempt=event.attempt,
        level=event.level,
        kind=event.kind,
        message=shown(event.message),
    )


@operations(
    GET=Op(query=shapes.RunTableQuery, responses={200: shapes.RunTable}),
)
@api_endpoint("GET")
def runs(request):
    """The runs table: the runs the caller may see, filtered, sorted and with metric columns as
    experiments.run_filters reads ?status=&experiment=&owner=&tag=&config=PATH:VALUE&metrics=&sort=
    (newest first by default); each run also has "owner" and "metrics" {name: latest value}.
    400 {"errors": {parameter: message}} for a parameter that cannot be used."""
    try:  # the shape checked each parameter; run_filters reads them as the runs page does
        query = run_filters.parse(dict(request.GET.lists()))
    except run_filters.FilterError as exc:
        raise ApiError(400, str(exc), errors={exc.parameter: exc.message}) from None
    queryset = (
        Run.objects.visible_to(request.user)
        .select_related("experiment__owner", "config_version")
        .prefetch_related("tags")
    )
    rows, count = page(request.query, run_filters.apply(queryset, query))
    return shapes.RunTable(
        runs=[run_table_entry(r, query) for r in rows], count=count, metrics=list(query.metrics), sort=query.sort
    )


@operations(
    GET=Op(responses={200: shapes.RunDetail}, summary="A run: status, progress, config and lineage"),
    PATCH=Op(
        body=shapes.LabelsInput,
        responses={200: shapes.RunDetail, 400: Errors, 403: Error},
        summary="Rename a run, or replace its tags or notes",
    ),
)
@api_endpoint("GET", "PATCH")
def run_detail(request, pk: int):
    """GET: the run. PATCH {"name"?: text, "tags"?: [names], "notes"?: text} (who may steer the run):
    replaces its name, tags and/or notes (experiments.run_labels: 400 {"errors": {field: message}}),
    answers the run."""
    if request.method == "PATCH":
        run = _run(request, pk, change=True)
        try:
            labels = run_labels.check_labels(checked_body(request))
        except run_labels.LabelError as exc:
            raise ApiError(400, errors=exc.errors) from None
        run_labels.save_labels(run, labels)
        return run_shape(run)
    return run_shape(_run(request, pk))


@operations(
    GET=Op(query=shapes.MetricsQuery, responses={200: shapes.Metrics}),
)
@api_endpoint("GET")
def run_metrics(request, pk: int):
    """?name=NAME&after_step=K: {"points": [[step, value], ...]} after step K, by step.
    Without name: {"series": {name: [[step, value], ...]}, "last_step": K'} for every metric.
    A value is a number, or "NaN" / "Infinity" / "-Infinity" (a diverged step, shown as such)."""
    query: shapes.MetricsQuery = request.query
    run = _run(request, pk)
    after_step, name = query.after_step, query.name
    if name is None:
        return shapes.Metrics.model_validate(metric_series.points_after(run, after_step))
    rows = (
        MetricPoint.objects.filter(run=run, name=name, step__gt=after_step)
        .order_by("step")
        .values_list("step", "value")
    )
    points = [(step, metric_series.json_value(metric_series.stored_value(value))) for step, value in rows]
    return shapes.Metrics(name=name, points=points, last_step=points[-1][0] if points else after_step)


@operations(
    GET=Op(query=shapes.ChartQuery, responses={200: shapes.Chart}),
)
@api_endpoint("GET")
def run_chart(request, pk: int):
    """?max_points=N (default and cap 2000): {"series": {name: {"steps", "values"}}, "last_step"},
    each series cut to at most N points keeping every bucket's minimum and maximum (and its NaN).
    Values as in /metrics: numbers, or "NaN" / "Infinity" / "-Infinity"."""
    max_points = min(request.query.max_points, metric_series.DEFAULT_MAX_POINTS)
    return shapes.Chart.model_validate(metric_series.chart(_run(request, pk), max_points))


@operations(
    GET=Op(query=shapes.EventsQuery, responses={200: shapes.Events}),
)
@api_endpoint("GET")
def run_events(request, pk: int):
    """?after_id=N&limit=200: the run's log lines and status changes after event N, oldest first."""
    query: shapes.EventsQuery = request.query
    run = _run(request, pk)
    events = list(run.events.filter(id__gt=query.after_id).order_by("id")[: min(query.limit, shapes.EVENTS_LIMIT_MAX)])
    return shapes.Events(events=[event_shape(e) for e in events], last_id=events[-1].pk if events else query.after_id)


@operations(
    POST=Op(responses={202: shapes.ActionDone, 400: Errors, 403: Error, 409: Error, 429: Errors}),
)
@api_endpoint("POST")
def run_action(request, pk: int, action: str):
    """POST /api/runs/<id>/<cancel|pause|resume|retry>: 202 {"id", "status"}, or 409 when the
    run's status does not allow it; resume and retry: 400 {"errors": {field}} when the run's config
    no longer validates (it would fail at start), 429 over a limit. Cancel acts at once, without
    the web page's confirmation step: a queued or paused run is cancelled, a running one cancelling
    (its trainer stopped within seconds, after a checkpoint it is writing); a cancelled run keeps its
    metrics and every checkpoint, and retry resumes it from the newest."""
    run = _run(request, pk, change=True)
    before = run.status
    try:
        changed = services.ACTIONS[action].function(run)
    except services.LaunchRefused as exc:
        raise refused(exc) from None
    if not changed:
        run.refresh_from_db(fields=["status"])
        raise ApiError(
            409,
            f"cannot {action} run {run.pk}: it is {run.status}" + (f" (was {before})" if before != run.status else ""),
        )
    run.refresh_from_db(fields=["status"])
    return send(shapes.ActionDone(id=run.pk, status=run.status), 202)

"""Sweeps over the API (sweeps.services makes and cancels them; sweeps.summary is the answer):

    GET  POST  experiments/<id>/sweeps    the experiment's sweeps / make one
    GET        sweeps                     the sweeps the caller may see   ?status=&limit=&offset=
    GET        sweeps/<id>                one with its space and trials
    POST       sweeps/<id>/cancel         stop it: its active trials are cancelled

A sweep is seen and steered by the rule of its experiment (experiments.access): another user's
answers 404, one the caller may only see 403 when they try to change it.
"""

from __future__ import annotations

from api import sweep_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, checked_body, page, refused, send
from experiments.access import get_for_user
from experiments.models import Experiment
from sweeps import services, summary
from sweeps.models import Sweep


def _sweep(request, pk: int, change: bool = False) -> Sweep:
    return get_for_user(Sweep.objects.select_related("experiment__owner"), request.user, pk, change=change)


def _list(query: shapes.SweepListQuery, queryset) -> shapes.SweepList:
    if query.status is not None:
        queryset = queryset.filter(status=query.status)
    rows, count = page(query, queryset.select_related("experiment__owner"))
    return shapes.SweepList(
        sweeps=[shapes.SweepSummary.model_validate(summary.sweep_summary(s)) for s in rows], count=count
    )


@operations(
    GET=Op(query=shapes.SweepListQuery, responses={200: shapes.SweepList}, summary="List an experiment's sweeps"),
    POST=Op(
        body=shapes.SweepInput,
        responses={201: shapes.SweepDetail, 400: Errors, 403: Error, 429: Error},
        summary="Start a sweep over the experiment's config",
    ),
)
@api_endpoint("GET", "POST")
def experiment_sweeps(request, pk: int):
    """GET: the experiment's sweeps, newest first. POST {"name", "space", "metric", "max_trials",
    "sampler"?, "pruner"?, "direction"?, "max_concurrent_trials"?, "seed"?, "pruner_startup_trials"?,
    "pruner_warmup_steps"?}: 201 the sweep with its first trials launched, or 400 {"errors":
    {field: message}} (`space.<config field>` for a field that does not exist or a value the
    config schema refuses) before any trial starts."""
    experiment = get_for_user(
        Experiment.objects.select_related("owner"), request.user, pk, change=request.method == "POST"
    )
    if request.method == "POST":
        try:
            sweep = services.create_sweep(experiment, checked_body(request))
        except services.SweepInputError as exc:
            raise ApiError(400, errors=exc.errors) from None
        except services.SweepRefused as exc:
            raise refused(exc) from None
        return send(
            shapes.SweepDetail.model_validate(summary.sweep_detail(sweep)), 201, location=f"/api/sweeps/{sweep.pk}"
        )
    return _list(request.query, Sweep.objects.filter(experiment=experiment))


@operations(GET=Op(query=shapes.SweepListQuery, responses={200: shapes.SweepList}))
@api_endpoint("GET")
def sweeps(request):
    """GET: the sweeps the caller may see (own; everyone's with the experiments' view permission), newest first."""
    return _list(request.query, Sweep.objects.visible_to(request.user))


@operations(GET=Op(responses={200: shapes.SweepDetail}))
@api_endpoint("GET")
def sweep_detail(request, pk: int):
    """GET: the sweep, its space and its trials (number, params, status, best value of the metric, run)."""
    return shapes.SweepDetail.model_validate(summary.sweep_detail(_sweep(request, pk)))


@operations(POST=Op(responses={202: shapes.SweepCancelled, 403: Error, 409: Error}))
@api_endpoint("POST")
def sweep_cancel(request, pk: int):
    """POST: cancel a running sweep (no new trials; its queued and running trials are cancelled):
    202 {"id", "status"}; 409 when it is not running."""
    sweep = _sweep(request, pk, change=True)
    if not services.cancel_sweep(sweep):
        raise ApiError(409, f"cannot cancel sweep {sweep.pk}: it is {sweep.status}")
    sweep.refresh_from_db()
    return send(shapes.SweepCancelled(id=sweep.pk, status=sweep.status), 202)

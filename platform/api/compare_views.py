"""GET /api/runs/compare?runs=1,2,3&max_points=N: several runs' metric series and configs in one
answer, for the compare page (experiments.run_compare does the work; the shapes are
api/compare_shapes.py)."""

from __future__ import annotations

from django.http import HttpResponse

from api import compare_shapes as shapes
from api.contract import Error, Op, operations
from api.endpoint import ApiError, api_endpoint
from experiments import metric_series, run_compare
from experiments.models import Run


def visible_runs(request, run_ids: list[int]) -> list[Run]:
    """The runs `run_ids` in that order, each visible to the caller, or ApiError 404 naming the
    first one that is not (unknown and someone else's alike)."""
    found = Run.objects.visible_to(request.user).select_related("experiment").in_bulk(run_ids)
    missing = [i for i in run_ids if i not in found]
    if missing:
        raise ApiError(404, f"no run {missing[0]} (runs names only runs you may see)")
    return [found[i] for i in run_ids]


@operations(
    GET=Op(query=shapes.CompareQuery, responses={200: shapes.Compare, 404: Error}),
)
@api_endpoint("GET")
def runs_compare(request):
    """?runs=1,2,3 (1 to 20 run ids, each once) &max_points=N (default 1000, at most 2000):
    {"max_points", "metrics": [names], "runs": [{"id", "experiment_id", "experiment", "status",
    "step", "max_steps", "created_at", "config", "last_step", "series": {name: {"steps", "values",
    "elapsed_s"}}}]}, each series min/max downsampled like /api/runs/<id>/chart."""
    query: shapes.CompareQuery = request.query
    max_points = min(query.max_points, metric_series.DEFAULT_MAX_POINTS)
    body = run_compare.compare_json(visible_runs(request, query.runs), max_points)
    shapes.Compare.model_validate_json(body)  # checked against its shape, sent as encoded (run_compare caches it)
    return HttpResponse(body, content_type="application/json")

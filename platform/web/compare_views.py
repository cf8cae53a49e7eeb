"""The compare page, /runs/compare/?runs=1,2,3: the runs' configs side by side (rendered here) and
their metrics overlaid (compare.js draws them from GET /api/runs/compare)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from experiments.models import Run
from experiments.run_compare import DEFAULT_MAX_POINTS, MAX_RUNS, parse_run_ids

from web.diffs import fields_side_by_side


@login_required
@require_GET
def run_compare(request):
    """Without `runs`: a form to type run ids. Bad `runs`: the form again with what is wrong (400).
    A run the user may not see: 404, like one that does not exist."""
    raw = request.GET.get("runs", "")
    context = {"runs_param": raw, "max_runs": MAX_RUNS, "runs": [], "rows": [], "differing": 0}
    if not raw.strip():
        return render(request, "web/run_compare.html", context)
    try:
        run_ids = parse_run_ids(raw)
    except ValueError as exc:
        return render(request, "web/run_compare.html", {**context, "error": f"runs: {exc}"}, status=400)
    found = Run.objects.visible_to(request.user).select_related("experiment").in_bulk(run_ids)
    missing = [i for i in run_ids if i not in found]
    if missing:
        raise Http404(f"no run {missing[0]}")
    runs = [found[i] for i in run_ids]
    rows = fields_side_by_side([run.config for run in runs])
    context.update(runs=runs, runs_param=",".join(map(str, run_ids)), rows=rows,
                   differing=sum(row.differs for row in rows),
                   api_url=f"/api/runs/compare?runs={','.join(map(str, run_ids))}&max_points={DEFAULT_MAX_POINTS}")
    return render(request, "web/run_compare.html", context)

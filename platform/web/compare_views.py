"""The compare page, /runs/compare/?runs=1,2,3: the runs' configs side by side (rendered here) and
their metrics overlaid (compare.js draws them from GET /api/runs/compare).

Runs are picked from a list of the user's runs, filtered as they type (checkboxes named `run`; the
form sends ?run=1&run=2, which this view turns into the shareable ?runs=1,2 address).

Forked runs on the step axis. A run forked with a fresh optimizer counts its steps from 0 again,
although its weights are its parent's at the fork step; a continued fork keeps its parent's step
counter. So each run's curves are drawn at step + `fork_step_offset` (the sum of the fresh fork
steps along its lineage): a fresh fork of run 1 at step 40 starts at x = 40, where run 1's curve
was, and a continued fork needs no shift. The wall-time axis keeps each run's own clock.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from experiments.models import ForkOptimizer, Run
from experiments.run_compare import DEFAULT_MAX_POINTS, MAX_RUNS, parse_run_ids
from web.diffs import fields_side_by_side

PICKER_RUNS = 300  # the newest runs the picker lists (plus the ones being compared)
MAX_LINEAGE_DEPTH = 50  # fork links followed at most (a chain longer than this is cut there)


def fork_step_offset(lineage: list[tuple[int | None, str]]) -> int:
    """The x-offset of a run's steps: `lineage` is its fork links from itself up, each
    (forked_from_step, fork_optimizer) of a run that is a fork; a fresh fork adds its fork step, a
    continued fork nothing (it kept its parent's step counter).

    >>> fork_step_offset([(40, "fresh"), (10, "continued"), (5, "fresh")])
    45
    """
    return sum(step for step, optimizer in lineage if step is not None and optimizer == ForkOptimizer.FRESH)


def lineage_of(run: Run) -> list[tuple[int | None, str]]:
    """`run`'s fork links up to its root (or a deleted parent), one query per ancestor."""
    links: list[tuple[int | None, str]] = []
    current = run
    for _ in range(MAX_LINEAGE_DEPTH):
        if current.forked_from_step is None:
            break
        links.append((current.forked_from_step, current.fork_optimizer))
        if current.forked_from_id is None:
            break
        current = (
            Run.objects.filter(pk=current.forked_from_id)
            .only("pk", "forked_from_id", "forked_from_step", "fork_optimizer")
            .first()
        )
        if current is None:
            break
    return links


def run_meta(run: Run) -> dict:
    """What compare.js needs of a run beside its series: its label for legends, its fork offset."""
    offset = fork_step_offset(lineage_of(run))
    label = f"{run.name} #{run.pk}" if run.name else f"#{run.pk} {run.experiment.name}"
    return {
        "id": run.pk,
        "label": label,
        "step_offset": offset,
        "forked_from": run.forked_from_id,
        "forked_from_step": run.forked_from_step,
        "fork_optimizer": run.fork_optimizer,
    }


def picker_runs(user, chosen: list[Run]) -> list[Run]:
    """The runs the picker lists: the user's visible runs, newest first, with the chosen ones."""
    runs = list(Run.objects.visible_to(user).select_related("experiment").order_by("-pk")[:PICKER_RUNS])
    listed = {r.pk for r in runs}
    return [r for r in chosen if r.pk not in listed] + runs


@login_required
@require_GET
def run_compare(request):
    """Without `runs`: the run picker. Bad `runs`: the picker again with what is wrong (400).
    A run the user may not see: 404, like one that does not exist. `run` (repeated, the picker's
    checkboxes): a redirect to ?runs=..."""
    picked = request.GET.getlist("run")
    if picked and "runs" not in request.GET:
        return redirect(f"{request.path}?{urlencode({'runs': ','.join(p.strip() for p in picked)})}")
    raw = request.GET.get("runs", "")
    context = {
        "runs_param": raw,
        "max_runs": MAX_RUNS,
        "runs": [],
        "rows": [],
        "differing": 0,
        "run_meta": [],
        "chosen_ids": set(),
    }
    if not raw.strip():
        context["picker"] = picker_runs(request.user, [])
        return render(request, "web/run_compare.html", context)
    try:
        run_ids = parse_run_ids(raw)
    except ValueError as exc:
        context["picker"] = picker_runs(request.user, [])
        return render(request, "web/run_compare.html", {**context, "error": f"runs: {exc}"}, status=400)
    found = Run.objects.visible_to(request.user).select_related("experiment").in_bulk(run_ids)
    missing = [i for i in run_ids if i not in found]
    if missing:
        raise Http404(f"no run {missing[0]}")
    runs = [found[i] for i in run_ids]
    rows = fields_side_by_side([run.config for run in runs])
    meta = [run_meta(run) for run in runs]
    for run, m in zip(runs, meta):
        run.step_offset = m["step_offset"]
    context.update(
        runs=runs,
        runs_param=",".join(map(str, run_ids)),
        rows=rows,
        differing=sum(row.differs for row in rows),
        run_meta=meta,
        chosen_ids=set(run_ids),
        picker=picker_runs(request.user, runs),
        api_url=f"/api/runs/compare?runs={','.join(map(str, run_ids))}&max_points={DEFAULT_MAX_POINTS}",
    )
    return render(request, "web/run_compare.html", context)

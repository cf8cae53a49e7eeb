"""The run page's lineage, checkpoint downloads and Fork form (runner.forks, runner.downloads).

`lineage_panel` is what the run page (web.views.run_detail) shows: where the run was forked from,
the runs forked from it, a download link per checkpoint and the Fork form. `run_fork` handles the
form: a new run, then the browser goes to it.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from experiments.access import get_for_user
from experiments.models import Run
from runner import forks


def lineage_panel(run: Run, steerable: bool) -> dict:
    """Template context: `parent` (the run it was forked from, or None: deleted or none),
    `forks` (runs forked from it, oldest first), `steps` (its checkpoints, newest first),
    `downloadable` (a run on a Hugging Face model: the toy presets cannot be exported),
    `can_fork`, `optimizers` and `default_optimizer`."""
    model = run.config.get("model") if isinstance(run.config, dict) else None
    return {
        "parent": run.forked_from,
        "forks": list(run.forks.order_by("pk").only("pk", "forked_from_step", "fork_optimizer", "status")),
        "steps": list(run.checkpoints.order_by("-step").values_list("step", flat=True)),
        "downloadable": isinstance(model, dict) and bool(model.get("path")),
        "can_fork": steerable,
        "optimizers": forks.OPTIMIZERS,
        "default_optimizer": forks.DEFAULT_OPTIMIZER,
    }


@login_required
@require_POST
def run_fork(request, pk: int):
    """The Fork form: a new queued run from the chosen checkpoint; go to it (or back, saying why not)."""
    parent = get_for_user(Run.objects.select_related("experiment__owner"), request.user, pk, change=True)
    try:
        child = forks.fork_run(parent, forks.parse_fork_input(request.POST.dict()))
    except forks.ForkRefused as exc:
        where = f"{exc.field}: " if exc.field else ""
        messages.error(request, f"Cannot fork run {parent.pk}: {where}{exc.message}")
        return redirect("run-detail", pk=parent.pk)
    messages.success(
        request,
        f"Run {child.pk} forked from run {parent.pk}, step {child.forked_from_step} "
        f"({child.fork_optimizer} optimizer); it is queued.",
    )
    return redirect("run-detail", pk=child.pk)

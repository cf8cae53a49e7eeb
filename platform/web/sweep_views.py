"""The sweep pages: the list (/sweeps/), the form that starts one from an experiment
(/experiments/<id>/sweeps/new/), a sweep's page (/sweeps/<id>/: its trials table with checkboxes
for the compare page, a parallel-coordinates plot and a metric-vs-parameter scatter that
static/web/sweep.js draws from the page's JSON and refreshes from GET /api/sweeps/<id> while the
sweep runs) and Cancel. Access: the experiments' rule (experiments.access)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from experiments.access import get_for_user, may_change
from experiments.models import Experiment
from sweeps import services, summary
from sweeps.models import Direction, Pruner, Sampler, Sweep

EXAMPLE_SPACE = {"optimizer.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}
INT_FIELDS = ("max_trials", "max_concurrent_trials", "seed", "pruner_startup_trials", "pruner_warmup_steps")
FORM_DEFAULTS = {
    "name": "",
    "metric": "reward/mean",
    "direction": Direction.MAXIMIZE,
    "sampler": Sampler.TPE,
    "pruner": Pruner.MEDIAN,
    "max_trials": "6",
    "max_concurrent_trials": "2",
    "seed": "0",
    "pruner_startup_trials": "2",
    "pruner_warmup_steps": "1",
    "space": json.dumps(EXAMPLE_SPACE, indent=2),
    "max_steps": "",
}


def default_sweep_name(experiment_name: str) -> str:
    """The form's suggested name: the experiment's name as a slug, then -sweep ("demo: arithmetic" ->
    "demo-arithmetic-sweep"); "sweep" when the name has no letter or digit a slug keeps."""
    slug = slugify(experiment_name)[:40].strip("-")
    return f"{slug}-sweep" if slug else "sweep"


def _sweep(request, pk: int, change: bool = False) -> Sweep:
    return get_for_user(Sweep.objects.select_related("experiment__owner"), request.user, pk, change=change)


@login_required
@require_GET
def sweep_list(request):
    sweeps = list(Sweep.objects.visible_to(request.user).select_related("experiment__owner")[:200])
    rows = [summary.sweep_summary(s) for s in sweeps]
    return render(request, "web/sweep_list.html", {"rows": rows})


def form_data(post) -> tuple[dict, dict]:
    """The POSTed form as the service's input (ints as ints, the space parsed) and the errors of
    fields that are not even of the right kind."""
    data, errors = {}, {}
    for name in ("name", "metric", "direction", "sampler", "pruner"):
        data[name] = post.get(name, "").strip()
    for name in INT_FIELDS:
        raw = post.get(name, "").strip()
        try:
            data[name] = int(raw)
        except ValueError:
            errors[name] = f"a whole number, got {raw!r}"
    steps = post.get("max_steps", "").strip()
    if steps:
        try:
            data["max_steps"] = int(steps)
        except ValueError:
            errors["max_steps"] = f"a whole number, got {steps!r}"
    try:
        data["space"] = json.loads(post.get("space", ""))
    except ValueError as exc:
        errors["space"] = f"not JSON: {exc}"
    return data, errors


@login_required
@require_http_methods(["GET", "POST"])
def sweep_new(request, pk: int):
    """GET: the form (an example space filled in). POST: a running sweep and its page, or the form
    again (400) with every problem named by its field."""
    experiment = get_for_user(Experiment.objects.select_related("owner"), request.user, pk, change=True)
    train = experiment.config.get("train") if isinstance(experiment.config, dict) else None
    steps = train.get("max_steps") if isinstance(train, dict) else None
    status = 400
    values, errors = (
        dict(
            FORM_DEFAULTS,
            name=default_sweep_name(experiment.name),
            max_steps="" if steps is None else str(steps),
        ),
        {},
    )
    if request.method == "POST":
        values = {name: request.POST.get(name, "") for name in FORM_DEFAULTS}
        data, errors = form_data(request.POST)
        if not errors:
            try:
                sweep = services.create_sweep(experiment, data)
            except services.SweepInputError as exc:
                errors = exc.errors
            except services.SweepRefused as exc:
                errors, status = {"(limit)": exc.message}, exc.status
            else:
                messages.success(request, f"Sweep {sweep.name} started: {sweep.trials.count()} trials launched.")
                return redirect("sweep-detail", pk=sweep.pk)
    context = {
        "experiment": experiment,
        "values": values,
        "errors": errors,
        "samplers": Sampler.values,
        "pruners": Pruner.values,
        "directions": Direction.values,
    }
    return render(request, "web/sweep_form.html", context, status=status if errors else 200)


@login_required
@require_GET
def sweep_detail(request, pk: int):
    sweep = _sweep(request, pk)
    detail = summary.sweep_detail(sweep)
    param_names = sorted(sweep.space)
    for trial in detail["trials"]:
        trial["param_values"] = [trial["params"].get(name) for name in param_names]
    context = {
        "sweep": sweep,
        "detail": detail,
        "param_names": param_names,
        "space_json": json.dumps(sweep.space, indent=2, sort_keys=True),
        "can_change": may_change(request.user, sweep.experiment),
        "plot_data": {
            "id": sweep.pk,
            "metric": sweep.metric,
            "direction": sweep.direction,
            "status": sweep.status,
            "space": sweep.space,
            "trials": detail["trials"],
        },
    }
    return render(request, "web/sweep_detail.html", context)


@login_required
@require_POST
def sweep_cancel(request, pk: int):
    sweep = _sweep(request, pk, change=True)
    if services.cancel_sweep(sweep):
        messages.success(request, f"Sweep {sweep.name} cancelled; its active trials are being cancelled.")
    else:
        messages.warning(request, f"Sweep {sweep.name} is {sweep.status}: nothing to cancel.")
    return redirect("sweep-detail", pk=sweep.pk)

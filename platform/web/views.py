"""The web UI's views: thin. Forms validate (with the trainer's schema), runner.services launches
and steers runs, web.actions clones and restores; a view picks objects the user may see (others'
answer 404; changing one they may only see, 403: experiments.access), calls one of those, and
renders or redirects.

The run dashboard's live data comes from the JSON API (/api/runs/<id>/...), which the page's
script polls; these views only render the page around it.
"""

from __future__ import annotations

import os
import re

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, Max
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from evaluations import services as evaluation_services
from experiments import configs, run_filters, run_labels
from experiments.access import get_for_user, may_change
from experiments.configs import ConfigError
from experiments.models import ACTIVE_STATUSES, TERMINAL_STATUSES, Experiment, MetricPoint, Run
from experiments.shown_paths import shown, shown_errors
from experiments.whole_numbers import NotAWholeNumber, whole_number
from runner import demo, exports, queues, services, step_time
from runner.demo import DEMO_USERNAME, featured_demos
from web import evaluation_views, fork_views, run_table
from web.actions import clone_experiment, restore_version
from web.config_form import config_from_values, form_values, to_yaml
from web.diffs import changed_field_rows, side_by_side_table, unified_lines
from web.forms import ConfigForm, DiffForm, ExperimentForm, ExportForm, YamlImportForm
from web.plan_preview import SHOWN_FIGURES, plan_payload
from web.run_panels import kl_note, run_panels

RUNS_PER_PAGE = 50


def _experiment(request, pk: int, change: bool = False) -> Experiment:
    return get_for_user(Experiment.objects.select_related("owner"), request.user, pk, change=change)


def _run(request, pk: int, change: bool = False) -> Run:
    return get_for_user(Run.objects.select_related("experiment__owner"), request.user, pk, change=change)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "config"


# --- experiments ---------------------------------------------------------------------------------


@login_required
@require_GET
def index(request):
    return redirect("experiment-list")


@login_required
@require_GET
def experiment_list(request):
    """The experiments the user may see (their own; everyone's with the view permission),
    newest change first."""
    experiments = (
        Experiment.objects.visible_to(request.user)
        .select_related("owner")
        .annotate(run_count=Count("runs", distinct=True), version_count=Max("versions__number"))
        .order_by("-updated_at", "-pk")
    )
    page = Paginator(experiments, RUNS_PER_PAGE).get_page(request.GET.get("page"))
    show_owner = any(e.owner_id != request.user.pk for e in page.object_list)
    # The demos, in the order to try them: the first is where to start (runner.demo.demo_rank).
    on_accelerator = step_time.accelerator_present()
    demos = featured_demos(
        Experiment.objects.visible_to(request.user)
        .select_related("owner")
        .filter(owner__username=DEMO_USERNAME, name__startswith="demo: ")[:50],
        on_accelerator,
    )
    for item in demos:
        item["step_time"] = step_time.expected_step_text(item["experiment"], on_accelerator)
    return render(request, "web/experiment_list.html", {"page": page, "show_owner": show_owner, "demos": demos})


def _form_page(request, form: ConfigForm, experiment: Experiment | None = None, status: int = 200):
    """The experiment form page; the plan is rendered once here, then kept live by the script."""
    plan = None
    if form.validated is not None:
        plan = plan_payload(form.validated, form.owner)
    elif not form.is_bound:
        try:
            plan = plan_payload(configs.parse(config_from_values(form.initial), form.owner), form.owner)
        except ConfigError:
            plan = None
    context = {
        "form": form,
        "experiment": experiment,
        "plan": plan,
        "shown_figures": SHOWN_FIGURES,
        "examples": _example_configs(),
    }
    return render(request, "web/experiment_form.html", context, status=status)


def _example_text(name: str) -> str:
    """configs/NAME.yaml's text. Those files are written for the CLI, run from the repository: a
    relative model.path such as var/models/smollm2-135m-instruct that names a folder inside a model
    root from there is given as the platform names that folder (on the platform a relative model.path
    starts in the first model root: smollm2-135m-instruct; configs.stored_path)."""
    text = (settings.REPO_ROOT / "configs" / f"{name}.yaml").read_text(encoding="utf-8")
    try:
        raw = configs.load_yaml(text)
    except ConfigError:
        return text  # the form shows the problem
    model = raw.get("model") if isinstance(raw, dict) else None
    path = model.get("path") if isinstance(model, dict) else None
    if not isinstance(path, str) or os.path.isabs(path) or text.count(path) != 1:
        return text
    folder = os.path.realpath(settings.REPO_ROOT / path)
    roots = [os.path.realpath(r) for r in settings.PLATFORM_MODELS_DIRS]
    if os.path.isdir(folder) and any(os.path.commonpath([folder, r]) == r for r in roots):
        return text.replace(path, configs.stored_path(folder, configs.model_dirs()))
    return text


def _example_configs() -> list[str]:
    folder = settings.REPO_ROOT / "configs"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


@login_required
@require_http_methods(["GET", "POST"])
def experiment_create(request):
    """New experiment from the form or YAML tab. ?example=NAME starts from configs/NAME.yaml."""
    if request.method == "POST":
        form = ExperimentForm(request.POST, owner=request.user)
        if form.is_valid():
            experiment, _ = form.save(request.user, note="created")
            messages.success(request, f"Created {experiment.name}.")
            return redirect("experiment-detail", pk=experiment.pk)
        return _form_page(request, form, status=400)
    example = request.GET.get("example")
    if example:
        if example not in _example_configs():
            raise Http404("no such example config")
        text = _example_text(example)
        form = ExperimentForm({"name": example, "mode": "yaml", "config_yaml": text}, owner=request.user)
        if form.is_valid():  # show it in both tabs, starting on the form
            form = ExperimentForm(
                config=form.config, initial={"name": example, "config_yaml": text}, owner=request.user
            )
        return _form_page(request, form)
    return _form_page(request, ExperimentForm(owner=request.user))


@login_required
@require_http_methods(["GET", "POST"])
def experiment_import(request):
    """Create an experiment from an uploaded YAML file (size-limited); an invalid config opens
    the YAML tab with the schema's messages."""
    if request.method == "POST":
        upload = YamlImportForm(request.POST, request.FILES)
        if upload.is_valid():
            form = upload.experiment_form(request.user)
            if form.is_valid():
                experiment, _ = form.save(request.user, note="imported from YAML")
                messages.success(request, f"Imported {experiment.name}.")
                return redirect("experiment-detail", pk=experiment.pk)
            messages.error(request, "The imported config is not valid; fix it below and save.")
            return _form_page(request, form, status=400)
        return render(request, "web/experiment_import.html", {"upload": upload}, status=400)
    return render(request, "web/experiment_import.html", {"upload": YamlImportForm()})


@login_required
@require_POST
def plan_preview(request):
    """The live preview: POST the form (either tab) -> {"ok": true, "plan", "text"} or
    {"ok": false, "errors": {dotted.field: message}}. With sync=1 it also returns the input in
    the other tab's shape: "yaml" (from the form) or "values" (from YAML), for the tab switch.
    ?experiment=ID (the edit page): dataset names resolve for that experiment's owner, else for
    the user."""
    try:
        experiment_id = whole_number(request.GET.get("experiment"), 1)
    except NotAWholeNumber as exc:
        return JsonResponse({"ok": False, "errors": {"experiment": f"must be {exc}"}}, status=400)
    owner = _experiment(request, experiment_id).owner if experiment_id is not None else request.user
    form = ConfigForm(request.POST, owner=owner)
    form.is_valid()
    payload: dict = {"ok": form.validated is not None, "mode": form.cleaned_data.get("mode") or "form"}
    if form.validated is not None:
        payload.update(plan_payload(form.validated, owner))
    else:
        payload["errors"] = form.config_errors or {field: "; ".join(errors) for field, errors in form.errors.items()}
    if request.POST.get("sync"):
        if payload["mode"] == "yaml":
            if isinstance(form.raw, dict):
                payload["values"] = form_values(form.raw)
        else:
            payload["yaml"] = form.config_yaml_text()
    return JsonResponse(payload)


@login_required
@require_GET
def experiment_detail(request, pk: int):
    experiment = _experiment(request, pk)
    return _detail_page(request, experiment)


def _detail_page(request, experiment: Experiment, status: int = 200, launch_errors: dict | None = None):
    try:
        plan = plan_payload(configs.parse(experiment.config, experiment.owner), experiment.owner)
        config_errors = {}
    except ConfigError as exc:
        plan, config_errors = None, shown_errors(exc.as_dict())
    context = {
        "experiment": experiment,
        "config_yaml": to_yaml(experiment.config),
        "plan": plan,
        "config_errors": launch_errors or config_errors,
        "versions": experiment.versions.select_related("created_by").order_by("-number"),
        "runs": experiment.runs.order_by("-created_at")[:20],
        "can_change": may_change(request.user, experiment),
        "launch_queues": queues.allowed_queue_names(experiment.owner),
        "launch_evaluations": evaluation_views.dataset_choices(request.user),
        "step_time": step_time.expected_step_text(experiment),
        "cannot_run": _sandbox_refusal(experiment.config),
    }
    return render(request, "web/experiment_detail.html", context, status=status)


def _sandbox_refusal(config) -> str:
    """Why a run of `config` cannot score its rewards on this machine: its code_tests reward needs the
    code sandbox (runner.demo.sandbox_unavailable), which cannot run here; "" otherwise."""
    rewards = config.get("rewards") if isinstance(config, dict) else None
    names = {r.get("name") for r in rewards if isinstance(r, dict)} if isinstance(rewards, list) else set()
    if "code_tests" not in names:
        return ""
    reason = demo.sandbox_unavailable()
    return (
        f"A run of this config cannot score its answers on this machine: its code_tests reward runs them in "
        f"the code sandbox, and {reason}. It would fail at its first step."
        if reason
        else ""
    )


@login_required
@require_http_methods(["GET", "POST"])
def experiment_edit(request, pk: int):
    """Edit name, description and config; a changed config becomes a new version."""
    experiment = _experiment(request, pk, change=True)
    if request.method == "POST":
        form = ExperimentForm(request.POST, experiment=experiment)
        if form.is_valid():
            _, version = form.save(request.user, note="edited")
            if version is None:
                messages.info(request, "Saved; the config is unchanged.")
            else:
                messages.success(request, f"Saved config version {version.number}.")
            return redirect("experiment-detail", pk=experiment.pk)
        return _form_page(request, form, experiment, status=400)
    return _form_page(request, ExperimentForm(experiment=experiment), experiment)


@login_required
@require_POST
def experiment_clone(request, pk: int):
    experiment = _experiment(request, pk)
    try:
        clone = clone_experiment(experiment, request.user)
    except ValidationError as exc:
        messages.error(request, f"Cannot clone {experiment.name}: {_validation_text(exc)}")
        return redirect("experiment-detail", pk=experiment.pk)
    messages.success(request, f"Created {clone.name}.")
    return redirect("experiment-edit", pk=clone.pk)


def _validation_text(exc: ValidationError) -> str:
    """A model's ValidationError as one line for a message."""
    if hasattr(exc, "message_dict"):
        return "; ".join(f"{field}: {' '.join(errors)}" for field, errors in exc.message_dict.items())
    return " ".join(exc.messages)


@login_required
@require_POST
def experiment_launch(request, pk: int):
    """Queue a run of the current config (checked once more by the schema) and open its page."""
    experiment = _experiment(request, pk, change=True)
    try:
        configs.parse(experiment.config, experiment.owner)
    except ConfigError as exc:
        messages.error(request, "The config is no longer valid; edit it before launching.")
        return _detail_page(request, experiment, status=400, launch_errors=shown_errors(exc.as_dict()))
    on_end = request.POST.get("evaluate_on_end") or ""
    try:
        with transaction.atomic():  # a refused evaluate-on-end launches nothing
            run = services.launch_run(experiment, queue=request.POST.get("queue") or None)
            if on_end:
                evaluation_services.request_on_end(request.user, run, {"dataset": on_end})
    except services.LaunchRefused as exc:
        messages.error(request, f"Cannot launch: {exc.message}")
        return redirect("experiment-detail", pk=experiment.pk)
    except evaluation_services.EvaluationRefused as exc:
        messages.error(request, f"Cannot launch: evaluate on end: {exc.message}")
        return redirect("experiment-detail", pk=experiment.pk)
    messages.success(
        request,
        f"Launched run {run.pk} on queue {run.queue}"
        + (f"; its best checkpoint will be evaluated on {on_end} when it succeeds." if on_end else "."),
    )
    warning = queues.no_worker_warning(run.queue)
    if warning:
        messages.warning(request, warning)
    return redirect("run-detail", pk=run.pk)


@login_required
@require_GET
def experiment_export(request, pk: int, number: int | None = None):
    """Download the current config (or version `number`) as YAML."""
    experiment = _experiment(request, pk)
    if number is None:
        config, suffix = experiment.config, ""
    else:
        config, suffix = get_object_or_404(experiment.versions, number=number).config, f"-v{number}"
    response = HttpResponse(to_yaml(config), content_type="application/x-yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_slug(experiment.name)}{suffix}.yaml"'
    return response


@login_required
@require_GET
def version_list(request, pk: int):
    experiment = _experiment(request, pk)
    versions = experiment.versions.select_related("created_by").order_by("-number")
    return render(
        request,
        "web/version_list.html",
        {"experiment": experiment, "versions": versions, "can_change": may_change(request.user, experiment)},
    )


@login_required
@require_GET
def version_diff(request, pk: int):
    """?a=N&b=M[&view=side]: how version M differs from version N."""
    experiment = _experiment(request, pk)
    versions = experiment.versions.order_by("-number")
    form = DiffForm(request.GET)
    if not form.is_valid():
        return render(
            request, "web/version_diff.html", {"experiment": experiment, "form": form, "versions": versions}, status=400
        )
    a = get_object_or_404(experiment.versions, number=form.cleaned_data["a"])
    b = get_object_or_404(experiment.versions, number=form.cleaned_data["b"])
    view = form.cleaned_data.get("view") or "unified"
    labels = (f"v{a.number}", f"v{b.number}")
    context = {
        "experiment": experiment,
        "form": form,
        "versions": versions,
        "a": a,
        "b": b,
        "view": view,
        "changes": changed_field_rows(a.config, b.config),
        "lines": unified_lines(a.config, b.config, *labels) if view == "unified" else None,
        "table": mark_safe(side_by_side_table(a.config, b.config, *labels)) if view == "side" else None,
    }
    return render(request, "web/version_diff.html", context)


@login_required
@require_POST
def version_restore(request, pk: int, number: int):
    experiment = _experiment(request, pk, change=True)
    version = get_object_or_404(experiment.versions, number=number)
    try:
        new = restore_version(experiment, version, request.user)
    except ValidationError as exc:
        messages.error(request, f"Cannot restore v{number}: {_validation_text(exc)}")
        return redirect("experiment-detail", pk=experiment.pk)
    if new is None:
        messages.info(request, f"v{number} is already the current config.")
    else:
        messages.success(request, f"Restored v{number} as v{new.number}.")
    return redirect("experiment-detail", pk=experiment.pk)


# --- runs ----------------------------------------------------------------------------------------


@login_required
@require_GET
def run_list(request):
    """The runs table: every run the user may see, filtered, sorted and with metric columns as
    experiments.run_filters reads the query (the same parameters as GET /api/runs, which the page's
    script polls to keep the cells live); a parameter it cannot use is a 400 page saying which."""
    try:
        query = run_filters.parse(dict(request.GET.lists()))
    except run_filters.FilterError as exc:
        context = {
            "page": None,
            "error": f"{exc.parameter}: {exc.message}",
            "query": run_filters.RunQuery(),
            **run_table.filter_choices(request.user, run_filters.RunQuery()),
        }
        return render(request, "web/run_list.html", context, status=400)
    runs = Run.objects.visible_to(request.user).select_related("experiment__owner").prefetch_related("tags")
    page = Paginator(run_filters.apply(runs, query), RUNS_PER_PAGE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)  # evaluated once, here
    run_table.attach_metric_cells(page.object_list, query)
    context = {
        "page": page,
        "query": query,
        "runs_per_page": RUNS_PER_PAGE,
        **run_table.table_context(query),
        **run_table.filter_choices(request.user, query),
    }
    return render(request, "web/run_list.html", context)


@login_required
@require_GET
def run_detail(request, pk: int):
    """The live dashboard; its script fills and refreshes it from /api/runs/<pk>/..."""
    run = _run(request, pk)
    steerable = may_change(request.user, run)
    controls = {name: sorted(action.offered) for name, action in services.ACTIONS.items()} if steerable else {}
    context = {
        "run": run,
        "run_error": shown(run.error),  # server paths relative to their root, as the API shows it
        "api_base": f"/api/runs/{run.pk}",
        "panels": run_panels(run.config),
        "kl_note": kl_note(run.config),
        "headline": _headline_metrics(run),
        "controls": controls,
        "config_yaml": shown(to_yaml(run.config)),  # read only here: resolved data/model paths shown short
        "active_statuses": sorted(ACTIVE_STATUSES),
        "terminal_statuses": sorted(TERMINAL_STATUSES),
        "live_statuses": sorted(LIVE_STATUSES),
        "max_name_chars": run_labels.MAX_NAME_CHARS,
        "export": _export_panel(run, steerable),
        "lineage": fork_views.lineage_panel(run, steerable),
        "can_label": steerable,
        "evaluate_best": _evaluate_best_link(run, steerable),
    }
    return render(request, "web/run_detail.html", context)


def _evaluate_best_link(run: Run, steerable: bool) -> dict | None:
    """The run page's offer to evaluate the best checkpoint: {"on_end": True} while the run has not
    ended (evaluated once it succeeds); {"step": N} once it has succeeded (evaluate that checkpoint
    now); None for a run that ended otherwise or has no checkpoint, or that the user may not steer."""
    if not steerable:
        return None
    if run.status not in TERMINAL_STATUSES:
        return {"on_end": True}
    if run.status != Run.Status.SUCCEEDED:
        return None
    best = evaluation_services.best_checkpoint(list(run.checkpoints.all()))
    return None if best is None else {"step": best.step}


LIVE_STATUSES = ACTIVE_STATUSES | {Run.Status.QUEUED}  # the run page says "live" while the run is one of these
HEADLINE_METRICS = ("accuracy", "eval/accuracy")  # shown beside the latest reward at the top of the run page


def _headline_metrics(run: Run) -> dict[str, float | None]:
    """{"accuracy": value at the run's newest step with one (None: none yet), "eval_accuracy": ...};
    run.js keeps them current from the metrics it polls. One indexed query per metric."""
    values = {}
    for name in HEADLINE_METRICS:
        values[name.replace("/", "_")] = (
            MetricPoint.objects.filter(run=run, name=name).order_by("-step").values_list("value", flat=True).first()
        )
    return values


def _export_panel(run: Run, steerable: bool) -> dict | None:
    """What the run page's export card shows: only for a run on a Hugging Face model."""
    model = run.config.get("model") if isinstance(run.config, dict) else None
    if not (isinstance(model, dict) and model.get("path")):
        return None
    return {
        "can_export": steerable,
        "steps": list(run.checkpoints.order_by("-step").values_list("step", flat=True)),
        "dtypes": exports.DTYPES,
        "done": [shown(str(p)) for p in exports.existing_exports(run)],
        "root": shown(str(settings.EXPORTS_DIR)),
    }


@login_required
@require_POST
def run_export(request, pk: int):
    """Export a checkpoint as a Hugging Face folder (runner.exports: synchronous, seconds for a
    135M model) and say where it is, or why not."""
    run = _run(request, pk, change=True)
    form = ExportForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        messages.error(request, f"Cannot export run {run.pk}: {problems}")
        return redirect("run-detail", pk=run.pk)
    try:
        done = exports.export_checkpoint(
            run, step=form.cleaned_data["step"], dtype=form.cleaned_data["dtype"] or "float32"
        )
    except exports.ExportRefused as exc:
        messages.error(request, f"Cannot export run {run.pk}: {shown(exc.message)}")
        return redirect("run-detail", pk=run.pk)
    messages.success(request, f"Exported run {run.pk} step {done.step} ({done.dtype}) to {shown(done.path)}.")
    return redirect("run-detail", pk=run.pk)


@login_required
@require_POST
def run_control(request, pk: int, action: str):
    """cancel / pause / resume / retry through runner.services; refused -> a message. Cancel asks
    first: a POST without confirm=yes answers the confirmation page (what stops; what is kept: the
    metrics, the log and every checkpoint, the newest named), whose button posts again with it."""
    if action not in services.ACTIONS:
        raise Http404("no such action")
    run = _run(request, pk, change=True)
    if action == "cancel" and request.POST.get("confirm") != "yes" and run.status in services.ACTIONS[action].offered:
        newest = run.checkpoints.order_by("-step").first()
        return render(request, "web/run_cancel_confirm.html", {"run": run, "newest_checkpoint": newest})
    try:
        changed = services.ACTIONS[action].function(run)
    except services.LaunchRefused as exc:
        messages.error(request, f"Run {run.pk}: cannot {action}: {exc.message}")
        return redirect("run-detail", pk=run.pk)
    if changed:
        run.refresh_from_db()
        messages.success(request, f"Run {run.pk}: {action} requested; it is {run.status} now.")
    else:
        run.refresh_from_db()
        messages.warning(request, f"Run {run.pk} is {run.status}: it cannot {action} now.")
    return redirect("run-detail", pk=run.pk)

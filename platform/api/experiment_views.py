"""The JSON API's experiment endpoints: list, create and change experiments, list their runs and
launch one. Thin, like api/run_views.py (which says how views pick what the caller may see); the
shapes are api/experiment_shapes.py.

    GET POST       experiments              list / create   ?name=&limit=&offset=
    GET PUT PATCH  experiments/<id>         detail / new config version
    GET POST       experiments/<id>/runs    list / launch a queued run
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Count, Max

from api import experiment_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, checked_body, page, payload, refused, send
from api.inputs import InvalidInput
from api.run_shapes import RunList
from api.run_views import run_shape
from api.shapes import Page
from evaluations import services as evaluation_services
from experiments import configs
from experiments.access import get_for_user
from experiments.models import Experiment, text_problem
from runner import queues, services
from trainers.config import apply_overrides

NAME_MAX_CHARS = Experiment._meta.get_field("name").max_length


def experiment_input(data: dict[str, Any], partial: bool = False, owner=None) -> dict[str, Any]:
    """Check a create/update payload: `name`, `description`, and the config as `config` (an
    object) or `config_yaml` (YAML text), with `overrides` ("dotted.path=value" strings, the CLI
    client's `--set`) applied to it before it is validated, so they can repair it. Returns the
    fields to set, with the config validated and normalised (experiments.configs: the schema, the
    guarded YAML loader, the dataset roots, `owner`'s datasets); InvalidInput otherwise. `partial`
    (PATCH): every field is optional."""
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    if "name" in data or not partial:
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            errors["name"] = "required: a non-empty string"
        elif text_problem(name):
            errors["name"] = text_problem(name)
        elif len(name.strip()) > NAME_MAX_CHARS:
            errors["name"] = f"at most {NAME_MAX_CHARS} characters (got {len(name.strip())})"
        else:
            out["name"] = name.strip()
    if "description" in data:
        description = data["description"]
        if description is not None and not isinstance(description, str):
            errors["description"] = "must be a string"
        elif text_problem(description):
            errors["description"] = text_problem(description)
        else:
            out["description"] = description or ""
    has_config, has_yaml = "config" in data, "config_yaml" in data
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        errors["overrides"] = 'must be a list of "dotted.path=value" strings, e.g. ["train.max_steps=50"]'
    elif overrides and not (has_config or has_yaml):
        errors["overrides"] = shapes.OVERRIDES_NEED_A_CONFIG
    elif has_config and has_yaml:
        errors["config"] = "give either config (an object) or config_yaml (YAML text), not both"
    elif has_yaml and not isinstance(data["config_yaml"], str):
        errors["config_yaml"] = "must be a string of YAML"
    elif has_config or has_yaml:
        try:
            raw = configs.load_yaml(data["config_yaml"]) if has_yaml else data["config"]
            if overrides and isinstance(raw, dict):  # else parse names what the config data lacks
                raw = apply_overrides(raw, overrides)
            out["config"] = configs.validated(raw, owner)
        except configs.ConfigError as exc:
            errors.update(exc.as_dict())
    elif not partial:
        errors["config"] = shapes.CONFIG_REQUIRED
    if errors:
        raise InvalidInput(errors)
    return out


def _experiment(request, pk: int, change: bool = False) -> Experiment:
    return get_for_user(Experiment.objects.select_related("owner"), request.user, pk, change=change)


def experiment_summary(experiment: Experiment) -> shapes.ExperimentSummary:
    """List entry. Expects `run_count` and `version` annotations when listed (else queries)."""
    version = getattr(experiment, "version", None)
    if version is None and not hasattr(experiment, "version"):
        latest = experiment.latest_version
        version = latest.number if latest else None
    run_count = getattr(experiment, "run_count", None)
    return shapes.ExperimentSummary(
        id=experiment.pk,
        name=experiment.name,
        description=experiment.description,
        owner=experiment.owner.get_username(),
        version=version,
        run_count=experiment.runs.count() if run_count is None else run_count,
        created_at=experiment.created_at,
        updated_at=experiment.updated_at,
    )


def experiment_shape(experiment: Experiment) -> shapes.ExperimentDetail:
    """The experiment, its config, its versions (newest first) and its 100 newest runs."""
    runs = (
        experiment.runs.select_related("experiment", "config_version")
        .prefetch_related("tags")
        .order_by("-created_at")[:100]
    )
    versions = experiment.versions.order_by("-number")
    return shapes.ExperimentDetail(
        **dict(experiment_summary(experiment)),
        config=experiment.config,
        versions=[shapes.VersionEntry(number=v.number, created_at=v.created_at, note=v.note) for v in versions],
        runs=[run_shape(r) for r in runs],
    )


@operations(
    GET=Op(
        query=shapes.ExperimentPage, responses={200: shapes.ExperimentList}, summary="List the experiments you may see"
    ),
    POST=Op(
        body=shapes.ExperimentInput,
        responses={201: shapes.ExperimentCreated, 400: Errors},
        summary="Create an experiment from a config",
    ),
)
@api_endpoint("GET", "POST")
def experiments(request):
    """GET: the experiments the caller may see (own; everyone's with the view permission), newest first;
    ?name=NAME: only those of exactly that name (`grpo_client launch --experiment NAME` finds its own so).
    POST {"name", "config" | "config_yaml", "description"?}: 201 {"id"}, or 400 {"errors": {field: message}}."""
    if request.method == "POST":
        fields = experiment_input(checked_body(request), owner=request.user)
        experiment = Experiment(owner=request.user, name=fields["name"], description=fields.get("description", ""))
        version = experiment.set_config(fields["config"], user=request.user, note="created (API)")
        return send(
            shapes.ExperimentCreated(id=experiment.pk, version=version.number),
            201,
            location=f"/api/experiments/{experiment.pk}",
        )
    queryset = (
        Experiment.objects.visible_to(request.user)
        .select_related("owner")
        .annotate(run_count=Count("runs", distinct=True), version=Max("versions__number"))
    )
    if request.query.name:
        queryset = queryset.filter(name=request.query.name)
    rows, count = page(request.query, queryset)
    return shapes.ExperimentList(experiments=[experiment_summary(e) for e in rows], count=count)


@operations(
    GET=Op(responses={200: shapes.ExperimentDetail}, summary="An experiment: its config, versions and recent runs"),
    PUT=Op(
        body=shapes.ExperimentInput,
        responses={200: shapes.ExperimentDetail, 400: Errors, 403: Error},
        summary="Replace an experiment's name and config (a changed config adds a version)",
    ),
    PATCH=Op(
        body=shapes.ExperimentPatch,
        responses={200: shapes.ExperimentDetail, 400: Errors, 403: Error},
        summary="Change some of an experiment's fields (a changed config adds a version)",
    ),
)
@api_endpoint("GET", "PUT", "PATCH")
def experiment_detail(request, pk: int):
    """GET: the experiment, its config, versions and recent runs. PUT (name and config required) /
    PATCH (any of name, description, config, config_yaml): a changed config adds a version."""
    experiment = _experiment(request, pk, change=request.method in ("PUT", "PATCH"))
    if request.method in ("PUT", "PATCH"):
        fields = experiment_input(checked_body(request), partial=request.method == "PATCH", owner=experiment.owner)
        config = fields.pop("config", None)
        for name, value in fields.items():
            setattr(experiment, name, value)
        if config is not None:
            experiment.set_config(config, user=request.user, note=f"updated (API {request.method})")
        else:
            experiment.save()
    return experiment_shape(experiment)


@operations(
    GET=Op(query=Page, responses={200: RunList}, summary="List an experiment's runs"),
    POST=Op(
        body=shapes.LaunchInput,
        responses={201: shapes.Launched, 400: Errors, 403: Errors, 429: Errors},
        summary="Launch a run of the experiment's current config",
    ),
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
        asked: shapes.LaunchInput = payload(request)
        max_restarts, queue = asked.max_restarts, asked.queue or None
        try:  # the stored config again, as the web's launch does: a model folder may be gone since
            configs.parse(experiment.config, experiment.owner)
        except configs.ConfigError as exc:
            raise ApiError(
                400, "the experiment's config is no longer valid; update it before launching", errors=exc.as_dict()
            ) from None
        on_end = checked_body(request).get("evaluate_on_end")  # as sent: evaluations.services checks it
        try:
            with transaction.atomic():  # a refused evaluate_on_end launches nothing
                run = services.launch_run(experiment, max_restarts=max_restarts, queue=queue)
                if on_end is not None:
                    evaluation_services.request_on_end(request.user, run, on_end)
        except services.LaunchRefused as exc:
            raise refused(exc) from None
        except evaluation_services.EvaluationRefused as exc:
            field = f"evaluate_on_end.{exc.field}" if exc.field else "evaluate_on_end"
            raise (
                ApiError(exc.status, errors={field: exc.message})
                if exc.status == 400
                else ApiError(exc.status, exc.message)
            ) from None
        warning = queues.no_worker_warning(run.queue)
        launched = shapes.Launched(
            id=run.pk, status=run.status, queue=run.queue, **({"warning": warning} if warning else {})
        )  # absent when a worker reads it
        return send(launched, 201, location=f"/api/runs/{run.pk}")
    queryset = experiment.runs.select_related("experiment", "config_version").prefetch_related("tags")
    rows, count = page(request.query, queryset)
    return RunList(runs=[run_shape(r) for r in rows], count=count)

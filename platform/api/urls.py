"""The JSON API (mounted at /api/). Every endpoint takes `Authorization: Token <key>` or the
browser session; a trailing slash is optional. One module pair per resource: api/<resource>_views.py
answers with the shapes of api/<resource>_shapes.py. The list of endpoints (method, path, summary) is
docs/reference/api.md, generated from the OpenAPI document (GET schema, api/openapi.py) by
scripts/generate_docs.py; /api/docs/ is Swagger UI reading it (public)."""

from django.urls import re_path

from api import (
    account_views,
    alert_views,
    checkpoint_views,
    compare_views,
    dataset_views,
    evaluation_views,
    experiment_views,
    model_views,
    run_views,
    sample_views,
    schema_views,
    sweep_views,
)
from api.endpoint import not_found

ID = r"(?P<pk>[0-9]{1,18})"  # ids fit a 64-bit integer; longer ones fall to the JSON 404

urlpatterns = [
    re_path(r"^experiments/?$", experiment_views.experiments, name="api-experiments"),
    re_path(rf"^experiments/{ID}/?$", experiment_views.experiment_detail, name="api-experiment"),
    re_path(rf"^experiments/{ID}/runs/?$", experiment_views.experiment_runs, name="api-experiment-runs"),
    re_path(rf"^experiments/{ID}/sweeps/?$", sweep_views.experiment_sweeps, name="api-experiment-sweeps"),
    re_path(r"^sweeps/?$", sweep_views.sweeps, name="api-sweeps"),
    re_path(rf"^sweeps/{ID}/?$", sweep_views.sweep_detail, name="api-sweep"),
    re_path(rf"^sweeps/{ID}/cancel/?$", sweep_views.sweep_cancel, name="api-sweep-cancel"),
    re_path(r"^runs/?$", run_views.runs, name="api-runs"),
    re_path(r"^runs/compare/?$", compare_views.runs_compare, name="api-runs-compare"),
    re_path(rf"^runs/{ID}/?$", run_views.run_detail, name="api-run"),
    re_path(rf"^runs/{ID}/metrics/?$", run_views.run_metrics, name="api-run-metrics"),
    re_path(rf"^runs/{ID}/chart/?$", run_views.run_chart, name="api-run-chart"),
    re_path(rf"^runs/{ID}/samples/?$", sample_views.run_samples, name="api-run-samples"),
    re_path(rf"^runs/{ID}/samples\.jsonl$", sample_views.samples_export, name="api-run-samples-export"),
    re_path(rf"^runs/{ID}/checkpoints/?$", checkpoint_views.run_checkpoints, name="api-run-checkpoints"),
    re_path(
        rf"^runs/{ID}/checkpoints/(?P<step>[0-9]{{1,9}})/hf\.zip$",
        checkpoint_views.checkpoint_download,
        name="api-checkpoint-download",
    ),
    re_path(rf"^runs/{ID}/events/?$", run_views.run_events, name="api-run-events"),
    re_path(rf"^runs/{ID}/(?P<action>cancel|pause|resume|retry)/?$", run_views.run_action, name="api-run-action"),
    re_path(rf"^runs/{ID}/export/?$", checkpoint_views.run_export, name="api-run-export"),
    re_path(rf"^runs/{ID}/fork/?$", checkpoint_views.run_fork, name="api-run-fork"),
    re_path(r"^models/?$", model_views.models, name="api-models"),
    re_path(r"^datasets/?$", dataset_views.dataset_list, name="api-datasets"),
    re_path(rf"^datasets/{ID}/?$", dataset_views.dataset_detail, name="api-dataset"),
    re_path(rf"^datasets/{ID}/(?P<action>share|unshare)/?$", dataset_views.dataset_share, name="api-dataset-share"),
    re_path(r"^evaluations/?$", evaluation_views.evaluations, name="api-evaluations"),
    re_path(r"^evaluations/leaderboard/?$", evaluation_views.evaluation_leaderboard, name="api-evaluation-leaderboard"),
    re_path(rf"^evaluations/{ID}/?$", evaluation_views.evaluation_detail, name="api-evaluation"),
    re_path(rf"^evaluations/{ID}/samples/?$", evaluation_views.evaluation_samples, name="api-evaluation-samples"),
    re_path(rf"^evaluations/{ID}/cancel/?$", evaluation_views.evaluation_cancel, name="api-evaluation-cancel"),
    re_path(rf"^runs/{ID}/evaluate-on-end/?$", evaluation_views.run_evaluate_on_end, name="api-run-evaluate-on-end"),
    re_path(r"^account/?$", account_views.account, name="api-account"),
    re_path(r"^alerts/?$", alert_views.alert_rules, name="api-alerts"),
    re_path(r"^alerts/deliveries/?$", alert_views.alert_deliveries, name="api-alert-deliveries"),
    re_path(rf"^alerts/{ID}/?$", alert_views.alert_rule_detail, name="api-alert"),
    re_path(r"^schema/?$", schema_views.schema, name="api-schema"),  # OpenAPI 3.1, generated (public)
    re_path(r"^docs/?$", schema_views.docs, name="api-docs"),  # Swagger UI (public)
    re_path(r"", not_found),  # anything else under /api/: a JSON 404, not the site's HTML page
]

"""The JSON API (mounted at /api/). Every endpoint takes `Authorization: Token <key>` or the
browser session; a trailing slash is optional. See api/views.py for each one's shapes.

    GET  POST       experiments                       list / create
    GET  PUT PATCH  experiments/<id>                  detail / new config version
    GET  POST       experiments/<id>/runs             list / launch a queued run
    GET             runs                              ?status=&experiment=&owner=&tag=&config=&metrics=&sort=
    GET             runs/compare                      ?runs=1,2,3&max_points=   (api/compare_views.py)
    GET  PATCH      runs/<id>                         status and progress / {"tags", "notes"}
    GET             runs/<id>/metrics                 ?name=&after_step=
    GET             runs/<id>/chart                   ?max_points=   (min/max downsampled)
    GET             runs/<id>/samples                 ?step=  (or browse: ?kind=&step_min=&q=&after=... api/sample_views.py)
    GET             runs/<id>/samples.jsonl           the same filters, streamed as JSON lines
    GET             runs/<id>/checkpoints
    GET             runs/<id>/checkpoints/<step>/hf.zip   a checkpoint's Hugging Face folder (api/checkpoint_views.py)
    GET             runs/<id>/events                  ?after_id=&limit=
    POST            runs/<id>/cancel|pause|resume|retry
    POST            runs/<id>/export                  {"step"?, "dtype"?} -> a Hugging Face folder
    POST            runs/<id>/fork                    {"step", "optimizer"?, "max_steps"?, "queue"?} -> a new run
    GET             models                            the model folders under the model roots
    GET  POST       datasets                          yours and shared with you / upload JSONL (api/dataset_views.py)
    GET  DELETE     datasets/<id>                     one with its first rows / delete yours
    POST            datasets/<id>/share|unshare       {"users": [...]}
    GET  POST       evaluations                       evaluation jobs / evaluate a checkpoint or model (api/evaluation_views.py)
    GET             evaluations/<id>, <id>/samples    a job's progress and results, its completions
    POST            evaluations/<id>/cancel           stop a queued or running job (202; 409 once ended)
    GET             evaluations/leaderboard           ?dataset=KEY: best first
    POST            runs/<id>/evaluate-on-end         {"dataset"}: evaluate the best checkpoint when it succeeds
    GET             account                           your storage use, quota and limits (api/account_views.py)
    GET  POST       experiments/<id>/sweeps           the experiment's sweeps / start one (api/sweep_views.py)
    GET             sweeps                            ?status=  the sweeps you may see
    GET             sweeps/<id>                       one with its space and trials
    POST            sweeps/<id>/cancel                stop it and its active trials
    GET  POST       alerts                            your alert rules / create one (api/alert_views.py)
    GET  PATCH DELETE alerts/<id>                     one rule / {"enabled"} / delete it
    GET             alerts/deliveries                 ?rule=&status=&limit=  the delivery log
    GET             schema                            this API as OpenAPI 3.1, generated (api/openapi.py; public)
    GET             docs/                             Swagger UI reading it (public)
"""

from django.urls import re_path

from api import (account_views, alert_views, checkpoint_views, compare_views, dataset_views, sample_views,
                 schema_views, views)
from api import sweep_views
from api import evaluation_views
from api.endpoint import not_found

ID = r"(?P<pk>[0-9]{1,18})"  # ids fit a 64-bit integer; longer ones fall to the JSON 404

urlpatterns = [
    re_path(r"^experiments/?$", views.experiments, name="api-experiments"),
    re_path(rf"^experiments/{ID}/?$", views.experiment_detail, name="api-experiment"),
    re_path(rf"^experiments/{ID}/runs/?$", views.experiment_runs, name="api-experiment-runs"),
    re_path(rf"^experiments/{ID}/sweeps/?$", sweep_views.experiment_sweeps, name="api-experiment-sweeps"),
    re_path(r"^sweeps/?$", sweep_views.sweeps, name="api-sweeps"),
    re_path(rf"^sweeps/{ID}/?$", sweep_views.sweep_detail, name="api-sweep"),
    re_path(rf"^sweeps/{ID}/cancel/?$", sweep_views.sweep_cancel, name="api-sweep-cancel"),
    re_path(r"^runs/?$", views.runs, name="api-runs"),
    re_path(r"^runs/compare/?$", compare_views.runs_compare, name="api-runs-compare"),
    re_path(rf"^runs/{ID}/?$", views.run_detail, name="api-run"),
    re_path(rf"^runs/{ID}/metrics/?$", views.run_metrics, name="api-run-metrics"),
    re_path(rf"^runs/{ID}/chart/?$", views.run_chart, name="api-run-chart"),
    re_path(rf"^runs/{ID}/samples/?$", views.run_samples, name="api-run-samples"),
    re_path(rf"^runs/{ID}/samples\.jsonl$", sample_views.samples_export, name="api-run-samples-export"),
    re_path(rf"^runs/{ID}/checkpoints/?$", views.run_checkpoints, name="api-run-checkpoints"),
    re_path(rf"^runs/{ID}/checkpoints/(?P<step>[0-9]{{1,9}})/hf\.zip$", checkpoint_views.checkpoint_download,
            name="api-checkpoint-download"),
    re_path(rf"^runs/{ID}/events/?$", views.run_events, name="api-run-events"),
    re_path(rf"^runs/{ID}/(?P<action>cancel|pause|resume|retry)/?$", views.run_action, name="api-run-action"),
    re_path(rf"^runs/{ID}/export/?$", views.run_export, name="api-run-export"),
    re_path(rf"^runs/{ID}/fork/?$", checkpoint_views.run_fork, name="api-run-fork"),
    re_path(r"^models/?$", views.models, name="api-models"),
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

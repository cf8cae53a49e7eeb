"""The web UI's pages (the JSON API is under /api/, in the api app)."""

from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from web import (
    account_views,
    alert_views,
    compare_views,
    dataset_views,
    docs_site,
    evaluation_views,
    fork_views,
    run_label_views,
    sample_views,
    signup_views,
    sweep_views,
    token_views,
    views,
)


class IdConverter:
    """A database id or version number: at most 18 digits, so it fits a 64-bit integer (a longer
    one is no URL here, hence a 404, not a database overflow)."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "web_id")

urlpatterns: list = [
    path("accounts/login/", signup_views.LoginView.as_view(), name="login"),
    path("accounts/signup/", signup_views.signup, name="signup"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.index, name="index"),
    path("docs/", docs_site.docs_page, name="docs"),
    path("docs/<path:path>", docs_site.docs_page, name="docs-page"),
    path("experiments/", views.experiment_list, name="experiment-list"),
    path("experiments/new/", views.experiment_create, name="experiment-new"),
    path("experiments/import/", views.experiment_import, name="experiment-import"),
    path("experiments/plan-preview/", views.plan_preview, name="plan-preview"),
    path("experiments/<web_id:pk>/", views.experiment_detail, name="experiment-detail"),
    path("experiments/<web_id:pk>/edit/", views.experiment_edit, name="experiment-edit"),
    path("experiments/<web_id:pk>/clone/", views.experiment_clone, name="experiment-clone"),
    path("experiments/<web_id:pk>/launch/", views.experiment_launch, name="experiment-launch"),
    path("experiments/<web_id:pk>/config.yaml", views.experiment_export, name="experiment-export"),
    path("experiments/<web_id:pk>/versions/", views.version_list, name="version-list"),
    path(
        "experiments/<web_id:pk>/versions/<web_id:number>/config.yaml", views.experiment_export, name="version-export"
    ),
    path("experiments/<web_id:pk>/versions/<web_id:number>/restore/", views.version_restore, name="version-restore"),
    path("experiments/<web_id:pk>/diff/", views.version_diff, name="version-diff"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/compare/", compare_views.run_compare, name="run-compare"),
    path("runs/<web_id:pk>/", views.run_detail, name="run-detail"),
    path("runs/<web_id:pk>/export/", views.run_export, name="run-export"),
    path("runs/<web_id:pk>/fork/", fork_views.run_fork, name="run-fork"),
    path("runs/<web_id:pk>/labels/", run_label_views.run_labels_save, name="run-labels"),
    path("runs/<web_id:pk>/samples/", sample_views.run_samples, name="run-samples"),
    path("runs/<web_id:pk>/<str:action>/", views.run_control, name="run-control"),
    path("datasets/", dataset_views.dataset_list, name="dataset-list"),
    path("datasets/<web_id:pk>/", dataset_views.dataset_detail, name="dataset-detail"),
    path("datasets/<web_id:pk>/share/", dataset_views.dataset_share, name="dataset-share"),
    path("datasets/<web_id:pk>/delete/", dataset_views.dataset_delete, name="dataset-delete"),
    path("account/", account_views.account, name="account"),
    path("sweeps/", sweep_views.sweep_list, name="sweep-list"),
    path("sweeps/<web_id:pk>/", sweep_views.sweep_detail, name="sweep-detail"),
    path("sweeps/<web_id:pk>/cancel/", sweep_views.sweep_cancel, name="sweep-cancel"),
    path("experiments/<web_id:pk>/sweeps/new/", sweep_views.sweep_new, name="sweep-new"),
    path("alerts/", alert_views.alert_list, name="alert-list"),
    path("alerts/<web_id:pk>/toggle/", alert_views.alert_toggle, name="alert-toggle"),
    path("alerts/<web_id:pk>/delete/", alert_views.alert_delete, name="alert-delete"),
    path("evaluations/", evaluation_views.evaluation_list, name="evaluation-list"),
    path("evaluations/new/", evaluation_views.evaluation_new, name="evaluation-new"),
    path("evaluations/leaderboard/", evaluation_views.leaderboard, name="leaderboard"),
    path("evaluations/<web_id:pk>/", evaluation_views.evaluation_detail, name="evaluation-detail"),
    path("evaluations/<web_id:pk>/cancel/", evaluation_views.evaluation_cancel, name="evaluation-cancel"),
    path("tokens/", token_views.token_list, name="api-tokens"),
    path("tokens/<web_id:pk>/revoke/", token_views.token_revoke, name="api-token-revoke"),
]

"""Alerts: rules per experiment or per user that notify by e-mail or webhook when a run fails,
finishes, is pruned or stalls, or a metric crosses a threshold; rate-limited, with a delivery log."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"

    def ready(self) -> None:
        from alerts import receivers  # noqa: F401 - connects run_status_changed

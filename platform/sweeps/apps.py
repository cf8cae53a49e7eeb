"""Sweeps: a search over config fields (grid, random, or Optuna's TPE through ask-and-tell), each
trial a run of the sweep's experiment, weak trials pruned early by Optuna's pruners. The database is
the record; Optuna's study is rebuilt from it whenever a decision is needed."""

from django.apps import AppConfig


class SweepsConfig(AppConfig):
    name = "sweeps"

    def ready(self) -> None:
        from sweeps import receivers  # noqa: F401 - connects run_status_changed

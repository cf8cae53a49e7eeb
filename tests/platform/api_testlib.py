"""Helpers and fixtures for the API, admin and metric-series tests (import the fixtures you use)."""

from __future__ import annotations

import pytest
from django.test import Client
from platform_testlib import tiny_config

from api.models import ApiToken
from experiments import metric_series, run_compare
from experiments.models import Experiment, MetricPoint, Run


def make_experiment(user, name: str = "exp", **overrides) -> Experiment:
    experiment = Experiment(owner=user, name=name)
    experiment.set_config(tiny_config(**overrides), user=user, note="test")
    return experiment


def make_run(user, status: str = "queued", attempt: int = 1, experiment: Experiment | None = None, **fields) -> Run:
    experiment = experiment or make_experiment(user)
    return Run.objects.create(
        experiment=experiment,
        config=experiment.config,
        status=status,
        attempt=attempt,
        max_steps=experiment.config["train"]["max_steps"],
        **fields,
    )


def add_points(run: Run, series: dict[str, list[tuple[int, float]]]) -> None:
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, name=name, step=step, value=value)
            for name, points in series.items()
            for step, value in points
        ]
    )


def token_client(user) -> Client:
    """A client that authenticates with the user's API token only (CSRF checks on, no session)."""
    key = ApiToken.for_user(user).key
    return Client(enforce_csrf_checks=True, headers={"authorization": f"Token {key}"})


@pytest.fixture
def fresh_series_cache():
    """Each test starts with an empty per-process chart cache."""
    metric_series.SERIES_CACHE.clear()
    yield
    metric_series.SERIES_CACHE.clear()


@pytest.fixture
def fresh_caches():
    """Each test starts with empty per-process chart and compare caches (the series and the
    compare page's encoded answers)."""
    metric_series.SERIES_CACHE.clear()
    run_compare.FRAGMENT_CACHE.clear()
    yield
    metric_series.SERIES_CACHE.clear()
    run_compare.FRAGMENT_CACHE.clear()

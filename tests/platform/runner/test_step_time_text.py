"""The time a step takes, as shown beside Launch and on each demo (runner.step_time): a step under
0.1 s reads in milliseconds ("about 30 ms a step"), never "about 0.0 s a step"."""

from __future__ import annotations

import pytest
from web_testlib import fast_passwords, make_experiment  # noqa: F401 (fast_passwords: autouse)

from experiments.models import MetricPoint, Run
from runner.step_time import expected_step_text, seconds_text


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0.0004, "0.4 ms"),
        (0.0032, "3.2 ms"),
        (0.03, "30 ms"),
        (0.0449, "45 ms"),
        (0.2, "0.2 s"),
        (0.8, "0.8 s"),
        (12.0, "12 s"),
        (210.0, "3.5 min"),
        (4320.0, "72.0 min"),
        (7200.0, "2.0 h"),
    ],
)
def test_seconds_text(seconds, text):
    assert seconds_text(seconds) == text


@pytest.mark.django_db
def test_a_fast_measured_step_reads_in_milliseconds(alice):
    experiment = make_experiment(alice, name="fast")
    run = Run.objects.create(
        experiment=experiment, config=experiment.config, status="succeeded", attempt=1, max_steps=5
    )
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, step=s, name="timing/step_s", value=v)
            for s, v in enumerate([9.0, 0.031, 0.029, 0.030, 0.032], start=1)
        ]
    )
    assert expected_step_text(experiment) == f"about 31 ms a step here (median of 5 steps of run {run.pk})"

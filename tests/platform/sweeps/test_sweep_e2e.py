"""A sweep end to end with real Celery processes (`manage.py worker`, `manage.py beat`) on the
configured back ends (the embedded default: SQLite and the filesystem broker): 6 trials of the tiny
config with a median pruner, the scheduler's tick and the trial-ended receiver launching them
two at a time. The metric is `learning_rate` (a constant schedule reports the searched value at
every step), so which trials are weak is known in advance: the grid runs the learning rates from
high to low, the first two complete, and each later one is below their median from its first step
and is pruned once past the 3 warmup steps, keeping the metrics and checkpoints it had. Then the
sweep's page in Chromium shows the six trials and draws both plots from them."""

from __future__ import annotations

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.conf import settings
from platform_testlib import tiny_config
from playwright.sync_api import expect
from runner_testlib import wait_for
from test_runner_e2e import procs  # noqa: F401 - the fixture that starts and kills the processes

from experiments.models import Checkpoint, Experiment, MetricPoint, Run, RunStatus
from sweeps import services
from sweeps.models import Sweep, SweepStatus

pytestmark = pytest.mark.django_db(transaction=True)

LEARNING_RATES = [0.004, 0.003, 0.002, 0.001, 0.0005, 0.0002]
SWEEP_TIMEOUT_S = 900


def test_a_sweep_of_six_trials_with_a_median_pruner_runs_end_to_end(procs, alice, logged_in_page):  # noqa: F811
    procs.worker()
    procs.start("beat", "--loglevel", "INFO", env={"PLATFORM_SWEEP_TICK_S": "0.5"})
    user = alice
    experiment = Experiment(owner=user, name="sweep e2e")
    experiment.set_config(
        tiny_config(
            train__max_steps=40,
            checkpoint__every_steps=2,
            checkpoint__keep_last=2,
            optimizer__schedule="constant",
            optimizer__warmup_steps=0,
        ),
        user=user,
    )
    sweep = services.create_sweep(
        experiment,
        {
            "name": "lr-e2e",
            "space": {"optimizer.learning_rate": {"type": "categorical", "choices": LEARNING_RATES}},
            "sampler": "grid",
            "pruner": "median",
            "metric": "learning_rate",
            "direction": "maximize",
            "max_trials": 6,
            "max_concurrent_trials": 2,
            "pruner_startup_trials": 2,
            "pruner_warmup_steps": 3,
        },
    )

    wait_for(
        lambda: Sweep.objects.get(pk=sweep.pk).status != SweepStatus.RUNNING,
        SWEEP_TIMEOUT_S,
        "the sweep to finish",
        procs,
        interval_s=1.0,
    )
    sweep.refresh_from_db()
    trials = list(sweep.trials.select_related("run").order_by("number"))
    assert sweep.status == SweepStatus.FINISHED, sweep.note
    assert [t.params["optimizer.learning_rate"] for t in trials] == LEARNING_RATES
    assert all(t.run is not None and t.status == t.run.status for t in trials), [(t.number, t.status) for t in trials]
    statuses = [t.status for t in trials]
    assert statuses[:2] == [RunStatus.SUCCEEDED, RunStatus.SUCCEEDED], f"{statuses}\n{procs.logs()}"
    assert [t.value for t in trials[:2]] == pytest.approx([0.004, 0.003])
    assert set(statuses) <= {RunStatus.SUCCEEDED, RunStatus.PRUNED}, f"{statuses}\n{procs.logs()}"
    pruned = [t for t in trials if t.status == RunStatus.PRUNED]
    assert pruned, f"no trial was pruned: {statuses}\n{procs.logs()}"
    for trial in pruned:
        run = Run.objects.get(pk=trial.run_id)
        assert run.stop_as == RunStatus.PRUNED and 3 <= run.step < 40, (trial.number, run.step)
        steps = set(MetricPoint.objects.filter(run=run, name="learning_rate").values_list("step", flat=True))
        assert steps == set(range(1, run.step + 1)), (trial.number, sorted(steps))
        assert trial.value == pytest.approx(LEARNING_RATES[trial.number])
        checkpoints = list(Checkpoint.objects.filter(run=run).values_list("step", "path"))
        assert checkpoints, f"trial {trial.number} kept no checkpoint"
        assert all((settings.ARTIFACTS_DIR / path).is_dir() for _step, path in checkpoints), checkpoints
        assert run.events.filter(message__contains="pruned by sweep 'lr-e2e' (median)").exists()
    assert all(t.run.name == f"lr-e2e #{t.number}" for t in trials)

    page = logged_in_page
    page.goto(f"/sweeps/{sweep.pk}/")
    expect(page.locator("#sweep-status .badge")).to_have_text("finished")
    expect(page.locator("#trial-table tbody tr")).to_have_count(6)
    expect(page.locator('#trial-table tr[data-status="pruned"]')).to_have_count(len(pruned))
    expect(page.locator("#sweep-plots")).to_have_attribute("data-parcoords-lines", "6")
    expect(page.locator("#sweep-scatter .scatterlayer .point")).to_have_count(6)

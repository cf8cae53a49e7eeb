"""sweeps.services and sweeps.scheduler against the database, the queue send faked: a sweep is
checked before any trial starts, trials launch up to max_concurrent_trials through the user's launch
path (caps apply: a refused launch waits and is retried), a trial whose config fails validation is
failed with the message while the sweep goes on, the median pruner prunes a weak running trial,
the sweep finishes when every trial ended, and cancelling stops its active trials."""

from __future__ import annotations

import pytest
from api_testlib import add_points, make_experiment

from experiments.models import Run, RunStatus
from sweeps import scheduler, services
from sweeps.models import Sweep, SweepStatus, Trial

S = RunStatus
LR = "optimizer.learning_rate"


def sweep_input(**fields) -> dict:
    return {
        "name": "lr-sweep",
        "space": {LR: {"type": "categorical", "choices": [0.004, 0.003, 0.002, 0.001]}},
        "sampler": "grid",
        "pruner": "median",
        "metric": "learning_rate",
        "direction": "maximize",
        "max_trials": 4,
        "max_concurrent_trials": 2,
        "pruner_startup_trials": 2,
        "pruner_warmup_steps": 0,
        **fields,
    }


def finish(run: Run, status: str = S.SUCCEEDED) -> None:
    Run.objects.filter(pk=run.pk).update(status=status)


def trials(sweep: Sweep) -> list[Trial]:
    return list(sweep.trials.select_related("run").order_by("number"))


def test_bad_input_is_refused_naming_each_field_and_creates_nothing(alice):
    experiment = make_experiment(alice)
    with pytest.raises(services.SweepInputError) as info:
        services.create_sweep(
            experiment,
            sweep_input(
                name="has space",
                metric="no/such",
                sampler="bayes",
                max_trials=0,
                space={
                    "optimizer.lr": {"type": "float", "low": 0.1, "high": 0.2},
                    "grpo.num_generations": {"type": "int", "low": 0, "high": 4},
                },
            ),
        )
    errors = info.value.errors
    assert set(errors) >= {"name", "metric", "sampler", "max_trials", "space.optimizer.lr"}, errors
    with pytest.raises(services.SweepInputError) as info:
        services.create_sweep(
            experiment, sweep_input(sampler="tpe", space={"grpo.num_generations": {"type": "int", "low": 0, "high": 4}})
        )
    assert "the value 0" in info.value.errors["space.grpo.num_generations"]
    assert not Sweep.objects.exists() and not Run.objects.exists()


def test_a_grid_sweep_runs_its_trials_two_at_a_time_and_finishes(
    alice, sent_messages, django_capture_on_commit_callbacks
):
    experiment = make_experiment(alice, train__max_steps=5)
    with django_capture_on_commit_callbacks(execute=True):
        sweep = services.create_sweep(experiment, sweep_input(pruner="none"))
    first = trials(sweep)
    assert [t.params for t in first] == [{LR: 0.004}, {LR: 0.003}]  # the grid's order
    assert [t.status for t in first] == [S.QUEUED, S.QUEUED] and len(sent_messages) == 2
    run = first[0].run
    assert run.name == "lr-sweep #0" and run.config["optimizer"]["learning_rate"] == 0.004
    assert list(run.tags.values_list("name", flat=True)) == ["lr-sweep"]
    assert experiment.config["optimizer"]["learning_rate"] != 0.004  # the experiment is unchanged
    scheduler.tick()
    assert len(trials(sweep)) == 2  # both still active
    finish(first[0].run)  # the receiver is not involved here: updates bypass transitions
    scheduler.tick()
    assert [t.status for t in trials(sweep)] == [S.SUCCEEDED, S.QUEUED, S.QUEUED]
    for t in trials(sweep):
        finish(t.run)
    scheduler.tick()
    for t in trials(sweep):
        if t.run:
            finish(t.run)
    scheduler.tick()
    sweep.refresh_from_db()
    assert sweep.status == SweepStatus.FINISHED and sweep.finished_at is not None
    assert [t.params[LR] for t in trials(sweep)] == [0.004, 0.003, 0.002, 0.001]


def test_a_run_ending_advances_its_sweep_without_a_tick(alice, sent_messages, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice)
    sweep = services.create_sweep(experiment, sweep_input(pruner="none", max_concurrent_trials=1))
    run = trials(sweep)[0].run
    Run.objects.filter(pk=run.pk).update(status=S.RUNNING)
    with django_capture_on_commit_callbacks(execute=True):
        assert run.transition(S.SUCCEEDED)
    assert [t.status for t in trials(sweep)] == [S.SUCCEEDED, S.QUEUED]


def two_finished_trials_and_a_running_third(alice):
    """A median-pruned sweep whose first two trials finished at 0.004 and 0.003 over steps 1-3, and
    whose third is running: (the sweep, the third trial)."""
    experiment = make_experiment(alice)
    sweep = services.create_sweep(experiment, sweep_input())
    t0, t1 = trials(sweep)
    for t, lr in ((t0, 0.004), (t1, 0.003)):
        add_points(t.run, {"learning_rate": [(s, lr) for s in (1, 2, 3)]})
        finish(t.run)
    scheduler.tick()
    t2 = trials(sweep)[2]
    Run.objects.filter(pk=t2.run.pk).update(status=S.RUNNING)
    return sweep, t2


def test_the_median_pruner_prunes_a_weak_running_trial(alice, sent_messages):
    sweep, t2 = two_finished_trials_and_a_running_third(alice)
    add_points(t2.run, {"learning_rate": [(1, 0.002), (2, 0.002)]})  # below the median 0.0035
    scheduler.tick()
    t2.run.refresh_from_db()
    assert t2.run.status == S.CANCELLING and t2.run.stop_as == S.PRUNED  # the worker ends it as pruned
    assert t2.run.events.filter(message__contains="pruned by sweep 'lr-sweep' (median) at step 2").exists()
    done = {t.number: t for t in trials(sweep)}
    assert done[0].value == 0.004 and done[0].value_step == 1 and done[1].value == 0.003
    assert done[2].value == 0.002


def test_a_strong_running_trial_is_not_pruned(alice, sent_messages):
    experiment = make_experiment(alice)
    sweep = services.create_sweep(
        experiment, sweep_input(space={LR: {"type": "categorical", "choices": [0.002, 0.001, 0.004, 0.003]}})
    )
    t0, t1 = trials(sweep)
    for t, lr in ((t0, 0.002), (t1, 0.001)):
        add_points(t.run, {"learning_rate": [(s, lr) for s in (1, 2)]})
        finish(t.run)
    scheduler.tick()
    t2 = trials(sweep)[2]
    Run.objects.filter(pk=t2.run.pk).update(status=S.RUNNING)
    add_points(t2.run, {"learning_rate": [(1, 0.004)]})
    scheduler.tick()
    assert Run.objects.get(pk=t2.run.pk).status == S.RUNNING


def test_a_trial_whose_config_is_invalid_fails_with_the_message_and_the_sweep_goes_on(alice, sent_messages):
    """Each value alone is valid (checked at creation), but together two exceed the step's size:
    prompts_per_step 2 with mini_batch_prompts 4."""
    experiment = make_experiment(alice)
    sweep = services.create_sweep(
        experiment,
        sweep_input(
            pruner="none",
            max_trials=4,
            max_concurrent_trials=4,
            space={
                "batch.prompts_per_step": {"type": "categorical", "choices": [2, 4]},
                "batch.mini_batch_prompts": {"type": "categorical", "choices": [2, 4]},
            },
        ),
    )
    rows = trials(sweep)
    assert len(rows) == 4
    bad = [t for t in rows if t.params == {"batch.mini_batch_prompts": 4, "batch.prompts_per_step": 2}]
    assert len(bad) == 1 and bad[0].status == S.FAILED and bad[0].run is None
    assert "mini_batch_prompts" in bad[0].error and "invalid" in bad[0].error
    assert sum(1 for t in rows if t.run is not None) == 3


def test_a_refused_launch_waits_with_a_note_and_is_retried(alice, sent_messages, settings):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 1
    experiment = make_experiment(alice)
    sweep = services.create_sweep(experiment, sweep_input(pruner="none"))
    rows = trials(sweep)
    assert rows[0].status == S.QUEUED and rows[1].status == "waiting" and rows[1].run is None
    sweep.refresh_from_db()
    assert "trial #1 waits" in sweep.note and "the limit is 1" in sweep.note
    finish(rows[0].run)
    scheduler.tick()
    rows = trials(sweep)
    assert rows[1].status == S.QUEUED and rows[1].run is not None and rows[1].error == ""
    assert rows[2].status == "waiting"  # the next one now waits behind it
    sweep.refresh_from_db()
    assert sweep.note.startswith("trial #2 waits")


def test_cancelling_a_sweep_cancels_its_active_trials(alice, sent_messages, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice)
    sweep = services.create_sweep(experiment, sweep_input())
    t0, t1 = trials(sweep)
    Run.objects.filter(pk=t1.run.pk).update(status=S.RUNNING)
    assert services.cancel_sweep(sweep) is True
    assert services.cancel_sweep(sweep) is False
    assert Run.objects.get(pk=t0.run.pk).status == S.CANCELLED
    assert Run.objects.get(pk=t1.run.pk).status == S.CANCELLING
    scheduler.tick()
    assert Sweep.objects.get(pk=sweep.pk).status == SweepStatus.CANCELLED and len(trials(sweep)) == 2
    with django_capture_on_commit_callbacks(execute=True):  # the worker stops it: the receiver syncs
        assert Run.objects.get(pk=t1.run.pk).transition(S.CANCELLED)
    assert [t.status for t in trials(sweep)] == [S.CANCELLED, S.CANCELLED]


def test_best_value_by_hand():
    points = [(1, 0.5), (2, float("nan")), (3, 0.9), (4, 0.9), (5, 0.1)]
    assert scheduler.best(points, "maximize") == (0.9, 3)
    assert scheduler.best(points, "minimize") == (0.1, 5)
    assert scheduler.best([(1, float("nan"))], "maximize") == (None, None)


def test_a_trial_whose_run_was_deleted_ends_and_the_sweep_goes_on(alice, sent_messages):
    experiment = make_experiment(alice)
    sweep = services.create_sweep(experiment, sweep_input(pruner="none", max_trials=2))
    t0, t1 = trials(sweep)
    t0.run.delete()
    finish(t1.run)
    scheduler.tick()
    t0, t1 = trials(sweep)
    assert (t0.status, t0.error, t1.status) == (S.CANCELLED, "its run was deleted", S.SUCCEEDED)
    assert Sweep.objects.get(pk=sweep.pk).status == SweepStatus.FINISHED


def test_a_tpe_sweep_asks_optuna_with_running_trials_as_context(alice, sent_messages):
    experiment = make_experiment(alice)
    space = {
        LR: {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
        "optimizer.name": {"type": "categorical", "choices": ["adamw", "adam"]},
    }
    sweep = services.create_sweep(experiment, sweep_input(sampler="tpe", pruner="none", space=space, seed=5))
    first = trials(sweep)
    assert len(first) == 2 and first[0].params != first[1].params
    for t in first:
        assert 1e-4 <= t.params[LR] <= 1e-2 and t.params["optimizer.name"] in ("adamw", "adam")
        assert t.run.config["optimizer"]["name"] == t.params["optimizer.name"]
        add_points(t.run, {"learning_rate": [(1, t.params[LR])]})
        finish(t.run)
    scheduler.tick()
    rows = trials(sweep)
    assert len(rows) == 4 and len({r.params[LR] for r in rows}) == 4
    # the same seed and history ask the same params: a second sweep repeats the first's draws
    again = services.create_sweep(experiment, sweep_input(sampler="tpe", pruner="none", space=space, seed=5))
    assert [t.params for t in trials(again)] == [t.params for t in first]


def test_a_halving_pruner_keeps_its_rungs_on_the_trial(alice, sent_messages):
    experiment = make_experiment(alice)
    sweep = services.create_sweep(
        experiment,
        sweep_input(pruner="successive_halving", pruner_warmup_steps=1, max_concurrent_trials=1, max_trials=4),
    )
    t0 = trials(sweep)[0]
    Run.objects.filter(pk=t0.run.pk).update(status=S.RUNNING)
    add_points(t0.run, {"learning_rate": [(1, 0.004), (2, 0.004)]})
    scheduler.tick()
    t0 = trials(sweep)[0]
    assert t0.optuna_attrs.get("completed_rung_0") == 0.004  # recorded while it ran, for later rebuilds
    assert t0.status == S.RUNNING  # alone in its rung: promoted, not pruned


def test_a_trial_is_judged_when_its_trainer_writes_the_metric_not_a_tick_later(alice, sent_messages):
    """The trainer's database hooks writing the sweep's metric (in the trainer's
    process) have the pruner judge that trial at once: no scheduler tick runs here."""
    from runner.db_hooks import DatabaseHooks

    sweep, t2 = two_finished_trials_and_a_running_third(alice)
    hooks = DatabaseHooks(t2.run.pk, t2.run.attempt, background_flush=False)
    hooks.on_step(1, {"loss/policy": 0.5})  # not the sweep's metric: nothing judged
    assert Run.objects.get(pk=t2.run.pk).status == S.RUNNING
    hooks.on_step(2, {"learning_rate": 0.002})  # below the median 0.0035
    hooks.flush()
    t2.run.refresh_from_db()
    assert t2.run.status == S.CANCELLING and t2.run.stop_as == S.PRUNED
    assert t2.run.events.filter(message__contains="pruned by sweep 'lr-sweep' (median) at step 2").exists()


def test_a_tick_over_sweeps_waiting_on_the_cap_validates_and_launches_nothing(
    alice, sent_messages, settings, monkeypatch
):
    """Sweeps whose trials wait on the owner's queued-run cap cost a count per tick, not
    a config validation and a refused launch each (40 such sweeps made a tick take 2.8-6.8 s)."""
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 1
    experiment = make_experiment(alice)
    sweeps = [services.create_sweep(experiment, sweep_input(name=f"s{n}", pruner="none")) for n in range(3)]
    assert Run.objects.filter(status=S.QUEUED).count() == 1
    validated, launched = [], []
    monkeypatch.setattr(scheduler.configs, "validated", lambda *a, **k: validated.append(a) or a[0])
    monkeypatch.setattr(scheduler.run_services, "launch_run", lambda *a, **k: launched.append(a))
    scheduler.tick()
    assert validated == [] and launched == []
    for sweep in sweeps:
        sweep.refresh_from_db()
        assert "waits" in sweep.note and "the limit is 1" in sweep.note, sweep.note

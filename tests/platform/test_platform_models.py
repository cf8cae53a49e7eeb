"""The run state machine is a compare-and-set; config versions are added only on change."""

from __future__ import annotations

from experiments.models import Experiment, Run, RunEvent

from platform_testlib import tiny_config


def make_run(user, status="queued", attempt=1):
    exp = Experiment.objects.create(owner=user, name="e", config=tiny_config())
    return Run.objects.create(experiment=exp, config=exp.config, status=status, attempt=attempt)


def test_transition_is_compare_and_set(alice):
    run = make_run(alice)
    other = Run.objects.get(pk=run.pk)  # a second process's stale copy
    assert run.transition("running", attempt=1)
    assert not other.transition("running", attempt=1)  # already running: the second start loses
    assert run.status == "running"
    assert RunEvent.objects.filter(run=run, kind="status").count() == 1


def test_transition_checks_attempt(alice):
    run = make_run(alice, attempt=2)
    assert not run.transition("running", attempt=1)  # a stale message for an earlier attempt
    assert Run.objects.get(pk=run.pk).status == "queued"


def test_disallowed_transition_refused(alice):
    run = make_run(alice, status="succeeded")
    assert not run.transition("paused")
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_visible_to(alice, bob, staff):
    run = make_run(alice)
    assert list(Run.objects.visible_to(alice)) == [run]
    assert list(Run.objects.visible_to(bob)) == []
    assert list(Run.objects.visible_to(staff)) == [run]
    assert Experiment.objects.visible_to(bob).count() == 0


def test_config_versions_only_on_change(alice):
    exp = Experiment(owner=alice, name="e", config={})
    v1 = exp.set_config(tiny_config(), user=alice)
    assert v1.number == 1
    assert exp.set_config(tiny_config(), user=alice) is None  # unchanged: no new version
    v2 = exp.set_config(tiny_config(seed=5), user=alice)
    assert v2.number == 2
    assert [v.number for v in exp.versions.order_by("number")] == [1, 2]

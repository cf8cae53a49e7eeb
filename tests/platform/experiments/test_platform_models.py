"""The run state machine is a compare-and-set; config versions are added only on change."""

from __future__ import annotations

from platform_testlib import tiny_config

from experiments.models import Experiment, Run, RunEvent


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


def _claim(run_id: int) -> None:
    """What a worker does with the queued run's message: queued -> running for its attempt."""
    run = Run.objects.get(pk=run_id)
    assert run.transition("running", attempt=run.attempt)


def test_double_resume_does_not_requeue_a_running_run(alice, sent_messages):
    from runner.services import resume_run

    run = make_run(alice, status="paused")
    first, second = Run.objects.get(pk=run.pk), Run.objects.get(pk=run.pk)  # two requests' stale copies
    assert resume_run(first)
    _claim(run.pk)
    before = Run.objects.values_list("status", "attempt").get(pk=run.pk)
    assert before == ("running", 2)
    assert not resume_run(second)  # it loaded "paused", but the run is running now
    assert Run.objects.values_list("status", "attempt").get(pk=run.pk) == before


def test_double_retry_does_not_requeue_a_running_run(alice, sent_messages):
    from runner.services import retry_run

    run = make_run(alice, status="failed")
    first, second = Run.objects.get(pk=run.pk), Run.objects.get(pk=run.pk)
    assert retry_run(first)
    _claim(run.pk)
    before = Run.objects.values_list("status", "attempt").get(pk=run.pk)
    assert before == ("running", 2)
    assert not retry_run(second)
    assert Run.objects.values_list("status", "attempt").get(pk=run.pk) == before


def test_stale_resume_does_not_retry_and_stale_retry_does_not_resume(alice, sent_messages):
    """A resume is only for a paused run, a retry only for a failed or cancelled one, as the
    database sees it (not as the caller's copy says)."""
    from runner.services import resume_run, retry_run

    run = make_run(alice, status="paused")
    stale = Run.objects.get(pk=run.pk)
    Run.objects.filter(pk=run.pk).update(status="failed")
    assert not resume_run(stale)
    assert Run.objects.get(pk=run.pk).status == "failed"
    stale = Run.objects.get(pk=run.pk)
    Run.objects.filter(pk=run.pk).update(status="paused")
    assert not retry_run(stale)
    assert Run.objects.get(pk=run.pk).status == "paused"


def test_only_the_attempt_that_holds_a_run_may_requeue_it(alice):
    run = make_run(alice, status="running", attempt=3)
    assert not Run.objects.get(pk=run.pk).transition("queued")  # no attempt named: refused
    assert not Run.objects.get(pk=run.pk).transition("queued", attempt=2)
    assert Run.objects.get(pk=run.pk).transition("queued", attempt=3)

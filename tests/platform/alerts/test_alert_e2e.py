"""Alerts end to end: a failing run (a learning rate that diverges) trained by a real worker,
with the real scheduler (`manage.py beat`) running the alerts job, sends a webhook to a local HTTP
receiver; a second rule's webhook, where nothing listens, records the error and keeps the delivery."""

from __future__ import annotations

import pytest
from alerts_testlib import Receiver, closed_port_url
from django.contrib.auth import get_user_model
from platform_testlib import tiny_config
from runner_testlib import platform_procs, wait_for

from alerts.models import AlertDelivery, AlertRule
from experiments.models import Experiment, Run
from runner.services import launch_run

pytestmark = pytest.mark.django_db(transaction=True)
ALERT_ENV = {
    "PLATFORM_ALERT_WEBHOOK_ALLOW": "127.0.0.1",
    "PLATFORM_ALERT_TICK_S": "1",
    "PLATFORM_ALERT_RETRY_S": "600",
    "PLATFORM_BASE_URL": "http://platform.test",
}


@pytest.fixture
def procs(transactional_db, tmp_path):
    with platform_procs(tmp_path) as procs:
        yield procs


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_a_failing_run_sends_a_webhook_to_a_local_receiver(procs, receiver):
    user = get_user_model().objects.create_user("alerted")
    experiment = Experiment(owner=user, name="diverges")
    experiment.set_config(tiny_config(optimizer__learning_rate=1e308, train__max_steps=4), user=user)
    AlertRule.objects.create(
        owner=user,
        experiment=experiment,
        events=["failed"],
        channel="webhook",
        target=receiver.url,
        min_interval_s=0,
        name="local",
    )
    unreachable = AlertRule.objects.create(
        owner=user, events=["failed"], channel="webhook", target=closed_port_url(), min_interval_s=0, name="nobody"
    )
    procs.start("worker", "--loglevel", "INFO", env=ALERT_ENV)
    procs.start("beat", "--loglevel", "INFO", env=ALERT_ENV)
    run = launch_run(experiment)

    wait_for(lambda: Run.objects.get(pk=run.pk).status == "failed", 180, "the run to fail", procs)
    wait_for(lambda: receiver.bodies, 60, "the webhook", procs)
    run.refresh_from_db()
    text = receiver.texts()[0]
    assert text.startswith(f'Run #{run.pk} of "diverges" failed at step ') and "training diverged" in text
    assert text.endswith(f"http://platform.test/runs/{run.pk}/")
    # the receiver holds the body before the worker has recorded the delivery as sent (it does so once
    # the POST has returned, and on SQLite the write may wait for the database lock)
    wait_for(
        lambda: AlertDelivery.objects.filter(rule__name="local").exclude(status="pending").exists(),
        60,
        "the delivery to be recorded",
        procs,
    )
    sent = AlertDelivery.objects.get(rule__name="local")
    assert (sent.status, sent.run_id, sent.event, sent.attempts) == ("sent", run.pk, "failed", 1)

    def tried_once():
        d = AlertDelivery.objects.filter(rule=unreachable).first()
        return d if d and d.attempts == 1 and d.error else None

    failed = wait_for(tried_once, 60, "the unreachable webhook's first try", procs)
    assert failed.status == "pending" and "connection refused" in failed.error  # kept; retried later
    assert len(receiver.bodies) == 1

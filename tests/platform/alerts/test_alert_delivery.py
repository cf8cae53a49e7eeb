"""Alert delivery against the database: a run's status change records pending deliveries (once, for
the rules that watch it), the scheduler's tick sends them to a local webhook receiver or by e-mail,
the rate limit, retries with the error kept when the webhook or the mail server is down, the URL
guard at send time, stalled runs and metric thresholds (notified once per stall / crossing)."""

from __future__ import annotations

import datetime as dt

import pytest
from alerts_testlib import closed_port_url, webhook_receiver  # noqa: F401 - fixture
from api_testlib import add_points, make_experiment, make_run
from django.core import mail
from django.utils import timezone

from alerts import delivery
from alerts.models import AlertDelivery, AlertRule

pytestmark = pytest.mark.django_db


def rule(owner, target, events=("failed",), channel="webhook", **fields) -> AlertRule:
    return AlertRule.objects.create(
        owner=owner,
        events=list(events),
        channel=channel,
        target=target,
        min_interval_s=fields.pop("min_interval_s", 0),
        **fields,
    )


def fail(run, django_capture_on_commit_callbacks, error="step 2: loss/policy is nan (non-finite)"):
    with django_capture_on_commit_callbacks(execute=True):
        assert run.transition("failed", error=error)


def test_a_failed_run_is_sent_to_the_webhook(alice, bob, webhook_receiver, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice, name="arith")
    other_experiment = make_experiment(alice, name="other")
    run = make_run(alice, status="running", experiment=experiment, step=2, name="lr-huge")
    watching = rule(alice, webhook_receiver.url, experiment=experiment)
    everywhere = rule(alice, webhook_receiver.url, events=("failed", "succeeded"))
    rule(alice, webhook_receiver.url, experiment=other_experiment)  # another experiment
    rule(alice, webhook_receiver.url, events=("succeeded",))  # another event
    rule(alice, webhook_receiver.url, enabled=False)  # disabled
    rule(bob, webhook_receiver.url)  # bob's: alice's runs are not his

    fail(run, django_capture_on_commit_callbacks)
    pending = AlertDelivery.objects.filter(status="pending")
    assert sorted(pending.values_list("rule_id", flat=True)) == sorted([watching.pk, everywhere.pk])
    assert set(pending.values_list("key", flat=True)) == {f"failed:{run.attempt}"}
    assert delivery.record_status_event(run.pk, "failed") == 0  # the same event again: nothing new

    assert delivery.tick() == {"sent": 2}
    text = f'Run lr-huge of "arith" failed at step 2/6. Error: step 2: loss/policy is nan (non-finite) http://localhost:8000/runs/{run.pk}/'
    assert webhook_receiver.texts() == [text, text]
    assert webhook_receiver.headers[0]["Content-Type"] == "application/json"
    sent = AlertDelivery.objects.get(rule=watching)
    assert (sent.status, sent.attempts, sent.error) == ("sent", 1, "") and sent.sent_at is not None
    assert delivery.tick() == {}  # nothing left


def test_the_rate_limit_logs_held_back_deliveries_and_counts_them_in_the_next(alice, webhook_receiver):
    r = rule(alice, webhook_receiver.url, events=("stalled",), min_interval_s=60)
    runs = [make_run(alice, status="running") for _ in range(3)]
    for run in runs[:2]:
        delivery.record(r, run, "stalled", "stalled:1:x", f"run {run.pk} stalled")
    assert delivery.tick() == {"sent": 1, "rate_limited": 1}
    held = AlertDelivery.objects.get(run=runs[1])
    assert held.status == "rate_limited" and "at most one notification per 60 s" in held.error
    # after the interval the next one goes out and says one was held back
    AlertDelivery.objects.filter(status="sent").update(sent_at=timezone.now() - dt.timedelta(seconds=61))
    delivery.record(r, runs[2], "stalled", "stalled:1:x", f"run {runs[2].pk} stalled")
    assert delivery.tick() == {"sent": 1}
    assert webhook_receiver.texts() == [
        f"run {runs[0].pk} stalled",
        f"run {runs[2].pk} stalled (+1 more alert held back by the rate limit; see the delivery log)",
    ]


def test_a_runs_end_waits_out_the_rate_limit_of_a_metric_notice_then_goes_out(
    alice, webhook_receiver, django_capture_on_commit_callbacks
):
    """One rule on a metric and on succeeded: the metric notice goes out, the run ends within the
    interval, and its end notice is neither rate_limited nor lost: it waits, pending, until the
    interval has passed, then is sent."""
    experiment = make_experiment(alice, name="arith")
    r = rule(
        alice,
        webhook_receiver.url,
        events=("metric", "succeeded"),
        experiment=experiment,
        metric_name="reward/mean",
        comparison=">",
        threshold=0.5,
        min_interval_s=60,
    )
    run = make_run(alice, status="running", experiment=experiment, step=6)
    add_points(run, {"reward/mean": [(6, 0.9)]})
    assert delivery.tick() == {"sent": 1}
    with django_capture_on_commit_callbacks(execute=True):
        assert run.transition("succeeded")
    assert delivery.tick() == {"pending": 1}  # within the interval: it waits
    end = AlertDelivery.objects.get(rule=r, event="succeeded")
    notice = AlertDelivery.objects.get(rule=r, event="metric")
    assert (end.status, end.attempts) == ("pending", 0)
    assert end.next_attempt_at == notice.sent_at + dt.timedelta(seconds=60)
    assert delivery.tick() == {}  # not due yet
    assert len(webhook_receiver.bodies) == 1
    # the interval has passed (moved back in the database rather than waited for)
    AlertDelivery.objects.filter(pk=notice.pk).update(sent_at=notice.sent_at - dt.timedelta(seconds=61))
    AlertDelivery.objects.filter(pk=end.pk).update(next_attempt_at=end.next_attempt_at - dt.timedelta(seconds=61))
    assert delivery.tick() == {"sent": 1}
    assert webhook_receiver.texts()[1] == (
        f'Run #{run.pk} of "arith" succeeded at step 6/6. http://localhost:8000/runs/{run.pk}/'
    )
    assert not AlertDelivery.objects.filter(status="rate_limited").exists()


def test_an_unreachable_webhook_is_retried_then_failed_with_the_error(alice, settings):
    settings.PLATFORM_ALERT_WEBHOOK_ALLOW = ["127.0.0.1"]
    settings.PLATFORM_ALERT_MAX_ATTEMPTS = 3
    settings.PLATFORM_ALERT_RETRY_S = 30
    url = closed_port_url()
    d = delivery.record(rule(alice, url), make_run(alice, status="failed"), "failed", "failed:1", "run failed")
    now = timezone.now()
    assert delivery.tick(now) == {"pending": 1}
    d.refresh_from_db()
    assert d.status == "pending" and d.attempts == 1
    assert (
        d.error.startswith("try 1: could not reach the webhook (http://127.0.0.1:") and "connection refused" in d.error
    )
    assert "secret-part" not in d.error  # the URL's secret is not written into the log
    assert 25 < (d.next_attempt_at - now).total_seconds() < 40  # backoff: 30 s
    assert delivery.tick(now) == {}  # not due yet
    assert delivery.tick(now + dt.timedelta(seconds=31)) == {"pending": 1}
    assert delivery.tick(now + dt.timedelta(hours=1)) == {"failed": 1}
    d.refresh_from_db()
    assert (d.status, d.attempts) == ("failed", 3) and d.error.startswith("try 3: could not reach")
    assert d.message == "run failed"  # kept: an admin can send it again


def test_a_webhook_error_status_is_recorded(alice, webhook_receiver, settings):
    settings.PLATFORM_ALERT_MAX_ATTEMPTS = 1
    webhook_receiver.status = 500
    d = delivery.record(rule(alice, webhook_receiver.url), make_run(alice), "failed", "failed:1", "m")
    assert delivery.tick() == {"failed": 1}
    d.refresh_from_db()
    assert d.error == "try 1: the webhook answered HTTP 500: ok" and len(webhook_receiver.bodies) == 1


def test_the_guard_runs_again_at_send_time(alice, webhook_receiver, settings):
    d = delivery.record(rule(alice, webhook_receiver.url), make_run(alice), "failed", "failed:1", "m")
    settings.PLATFORM_ALERT_WEBHOOK_ALLOW = []  # the admin withdrew the exception
    settings.PLATFORM_ALERT_MAX_ATTEMPTS = 1
    delivery.tick()
    d.refresh_from_db()
    assert d.status == "failed" and "refused: the webhook's host 127.0.0.1 is in a local or private network" in d.error
    assert webhook_receiver.bodies == []


def test_email_is_sent_and_a_mail_server_that_is_down_is_recorded(alice, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    r = rule(alice, "alice@example.com", channel="email")
    delivery.record(r, make_run(alice), "failed", "failed:1", 'Run #1 of "exp" failed at step 2/6. http://x/runs/1/')
    assert delivery.tick() == {"sent": 1}
    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["alice@example.com"], '[GRPO] Run #1 of "exp" failed at step 2/6')
    ]
    assert "http://x/runs/1/" in mail.outbox[0].body

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", int(closed_port_url().split(":")[2].split("/")[0])
    settings.PLATFORM_ALERT_MAX_ATTEMPTS = 1
    d = delivery.record(r, make_run(alice), "failed", "failed:1", "down")
    assert delivery.tick() == {"failed": 1}
    d.refresh_from_db()
    assert d.error.startswith("try 1: e-mail not sent: ConnectionRefusedError")


def test_an_email_written_to_a_file_is_logged_as_written_not_sent(alice, settings, tmp_path):
    """Without a mail server the file backend writes each mail under EMAIL_FILE_PATH: the delivery
    says `written`, and the rate limit counts it as one that went out."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path / "mail")
    r = rule(alice, "alice@example.com", channel="email", events=("stalled",), min_interval_s=60)
    d = delivery.record(r, make_run(alice), "stalled", "stalled:1:x", 'Run #1 of "exp" has stalled. http://x/runs/1/')
    assert delivery.tick() == {"written": 1}
    d.refresh_from_db()
    assert d.status == "written" and d.sent_at is not None
    (written,) = (tmp_path / "mail").iterdir()
    assert "http://x/runs/1/" in written.read_text()
    delivery.record(r, make_run(alice), "stalled", "stalled:1:x", "again")
    assert delivery.tick() == {"rate_limited": 1}
    # a webhook or a mail server is `sent`
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    other = rule(alice, "bob@example.com", channel="email")
    delivery.record(other, make_run(alice), "failed", "failed:1", "Run #2 failed. http://x/runs/2/")
    assert delivery.tick() == {"sent": 1}


def test_a_stalled_run_is_notified_once_per_stall(alice, webhook_receiver, settings):
    settings.PLATFORM_ALERT_STALL_AFTER_S = 10
    rule(alice, webhook_receiver.url, events=("stalled",))
    now = timezone.now()
    stalled = make_run(alice, status="running", heartbeat_at=now - dt.timedelta(seconds=30), step=4)
    make_run(alice, status="running", heartbeat_at=now + dt.timedelta(seconds=40))  # beating throughout
    make_run(alice, status="failed", heartbeat_at=now - dt.timedelta(seconds=300))  # not active
    delivery.tick(now)
    delivery.tick(now + dt.timedelta(seconds=5))
    assert webhook_receiver.texts() == [
        f'Run #{stalled.pk} of "exp" has stalled: no heartbeat for 30 s (at step 4). http://localhost:8000/runs/{stalled.pk}/'
    ]
    # the heartbeat came back, then stopped again: a new stall
    stalled.heartbeat_at = now + dt.timedelta(seconds=20)
    stalled.save(update_fields=["heartbeat_at"])
    delivery.tick(now + dt.timedelta(seconds=25))
    assert len(webhook_receiver.bodies) == 1
    delivery.tick(now + dt.timedelta(seconds=45))
    assert len(webhook_receiver.bodies) == 2 and "no heartbeat for 25 s" in webhook_receiver.texts()[1]


def test_a_metric_threshold_is_notified_once_per_crossing(alice, webhook_receiver):
    experiment = make_experiment(alice, name="arith")
    rule(
        alice,
        webhook_receiver.url,
        events=("metric",),
        experiment=experiment,
        metric_name="reward/mean",
        comparison="<",
        threshold=0.2,
    )
    run = make_run(alice, status="running", experiment=experiment)
    finished = make_run(alice, status="succeeded", experiment=experiment)
    add_points(finished, {"reward/mean": [(1, 0.0)]})
    add_points(run, {"reward/mean": [(1, 0.5)], "accuracy": [(1, 0.0)]})
    delivery.tick()
    assert webhook_receiver.bodies == []
    add_points(run, {"reward/mean": [(2, 0.1)]})
    delivery.tick()
    add_points(run, {"reward/mean": [(3, 0.05)]})  # still below: the same crossing
    delivery.tick()
    assert webhook_receiver.texts() == [
        f'Run #{run.pk} of "arith": reward/mean = 0.1 at step 2 (reward/mean < 0.2). http://localhost:8000/runs/{run.pk}/'
    ]
    add_points(run, {"reward/mean": [(4, 0.3), (5, 0.15)]})  # back above, then below again between two ticks
    delivery.tick()
    assert len(webhook_receiver.bodies) == 2 and "reward/mean = 0.15 at step 5" in webhook_receiver.texts()[1]
    add_points(run, {"reward/mean": [(6, float("nan"))]})  # NaN crosses nothing
    delivery.tick()
    assert len(webhook_receiver.bodies) == 2


@pytest.mark.parametrize(
    "start, status, recorded",
    [("running", "succeeded", True), ("cancelling", "pruned", True), ("cancelling", "cancelled", False)],
)
def test_succeeded_and_pruned_runs_are_recorded_cancelled_ones_not(
    alice, start, status, recorded, django_capture_on_commit_callbacks
):
    r = rule(alice, "alice@example.com", events=("succeeded", "pruned"), channel="email")
    run = make_run(alice, status=start, step=6, stop_as="pruned" if status == "pruned" else "")
    with django_capture_on_commit_callbacks(execute=True):
        assert run.transition(status)
    deliveries = list(AlertDelivery.objects.filter(rule=r).values_list("event", "key", "message"))
    assert deliveries == (
        [(status, f"{status}:1", f'Run #{run.pk} of "exp" {status} at step 6/6. http://localhost:8000/runs/{run.pk}/')]
        if recorded
        else []
    )


def metric_rule(owner, metric, comparison, threshold, for_steps) -> AlertRule:
    return rule(
        owner,
        "alice@example.com",
        events=("metric",),
        channel="email",
        metric_name=metric,
        comparison=comparison,
        threshold=threshold,
        for_steps=for_steps,
    )


def metric_keys(r) -> list[str]:
    return list(AlertDelivery.objects.filter(rule=r).order_by("id").values_list("key", flat=True))


def test_a_sustained_condition_is_notified_after_for_steps_points_once_per_crossing(alice):
    r = metric_rule(alice, "entropy", "<", 0.05, for_steps=3)
    run = make_run(alice, status="running")
    add_points(run, {"entropy": [(1, 0.5), (2, 0.04), (3, 0.03)]})  # below for 2 steps: fewer than 3
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"entropy": [(4, 0.5), (5, 0.04), (6, 0.03)]})  # back above, then below for 2 again
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"entropy": [(7, 0.02)]})  # the third step below
    assert delivery.record_metric_crossings() == 1
    assert AlertDelivery.objects.get(rule=r).message == (
        f'Run #{run.pk} of "exp": entropy = 0.02 at step 7 (entropy < 0.05 for 3 steps). '
        f"http://localhost:8000/runs/{run.pk}/"
    )
    add_points(run, {"entropy": [(8, 0.01)]})  # stays below: the same crossing
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"entropy": [(9, 0.06), (10, 0.01), (11, 0.01)]})  # falls back, below for 2 steps
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"entropy": [(12, 0.01)]})  # for 3 steps again: a new crossing
    assert delivery.record_metric_crossings() == 1
    # fell back and crossed again for 3 steps between two ticks: seen among the points since step 12
    add_points(run, {"entropy": [(13, 0.5), (14, 0.01), (15, 0.01), (16, 0.01)]})
    assert delivery.record_metric_crossings() == 1
    # NaN breaks the sustained condition; 3 finite steps below after it are a new crossing
    add_points(run, {"entropy": [(17, float("nan")), (18, 0.01), (19, 0.01)]})
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"entropy": [(20, 0.01)]})
    assert delivery.record_metric_crossings() == 1
    assert delivery.record_metric_crossings() == 0
    assert metric_keys(r) == ["metric:7", "metric:12", "metric:16", "metric:20"]


def test_a_stuck_metric_is_notified_once_until_it_moves(alice):
    r = metric_rule(alice, "reward/mean", "~", 0.25, for_steps=3)
    run = make_run(alice, status="running")
    add_points(run, {"reward/mean": [(1, 1.0), (2, 1.5)]})  # fewer points than for_steps
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"reward/mean": [(3, 1.625)]})  # 1.0 .. 1.625: varies by 0.625
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"reward/mean": [(4, 1.5)]})  # 1.5 .. 1.625: 0.125, stuck
    assert delivery.record_metric_crossings() == 1
    assert AlertDelivery.objects.get(rule=r).message == (
        f'Run #{run.pk} of "exp": reward/mean = 1.5 at step 4 (reward/mean stuck within 0.25 over 3 steps). '
        f"http://localhost:8000/runs/{run.pk}/"
    )
    add_points(run, {"reward/mean": [(5, 1.5)]})  # still stuck
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"reward/mean": [(6, 3.0), (7, 3.0)]})  # moved: [1.5, 3, 3] is not stuck
    assert delivery.record_metric_crossings() == 0
    add_points(run, {"reward/mean": [(8, 3.125)]})  # stuck again at about 3
    assert delivery.record_metric_crossings() == 1
    assert metric_keys(r) == ["metric:4", "metric:8"]


def test_only_the_newest_scan_points_are_read_after_a_notification(alice, monkeypatch):
    monkeypatch.setattr(delivery, "SCAN_POINTS", 4)
    r = metric_rule(alice, "entropy", "<", 0.05, for_steps=2)
    run = make_run(alice, status="running")
    add_points(run, {"entropy": [(1, 0.01), (2, 0.01)]})
    assert delivery.record_metric_crossings() == 1
    add_points(run, {"entropy": [(step, 0.01) for step in range(3, 9)]})  # 6 points since: more than 4
    assert delivery.record_metric_crossings() == 0  # held in every window of the newest 4
    add_points(run, {"entropy": [(9, 0.5), (10, 0.01), (11, 0.01)]})  # among the newest 4: [8, 9, 10, 11]
    assert delivery.record_metric_crossings() == 1
    assert metric_keys(r) == ["metric:2", "metric:11"]

"""Alert rules over the API, on the Alerts page and in the admin: creation with the one validation
(events, metric fields, e-mail, the webhook URL guard), your own experiments only, masked webhook
targets everywhere after saving, the delivery log, deleting, and another user's rules answering 404."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment, make_run, token_client
from django.urls import reverse

from alerts.models import AlertDelivery, AlertRule

pytestmark = pytest.mark.django_db

SECRET_URL = "https://hooks.slack.com/services/T000/B000/abcdefSECRETvalue1234"
PUBLIC = {"hooks.slack.com": ["54.1.2.3"]}


@pytest.fixture(autouse=True)
def public_dns(monkeypatch):
    """hooks.slack.com resolves to a public address without a network; other names fail to resolve."""
    from alerts import url_guard

    def resolve(host, port):
        if host not in PUBLIC:
            raise OSError("Name or service not known")
        return PUBLIC[host]

    monkeypatch.setattr(url_guard, "resolve", resolve)


def post(user, body) -> tuple[int, dict]:
    response = token_client(user).post("/api/alerts", json.dumps(body), content_type="application/json")
    return response.status_code, response.json()


def test_create_list_get_and_delete_over_the_api(alice, bob):
    experiment = make_experiment(alice, name="arith")
    status, body = post(
        alice,
        {
            "events": ["failed", "metric"],
            "channel": "webhook",
            "target": SECRET_URL,
            "experiment": experiment.pk,
            "metric_name": "reward/mean",
            "comparison": "<",
            "threshold": 0.1,
            "min_interval_s": 120,
            "name": "slack",
        },
    )
    assert status == 201, body
    rule = AlertRule.objects.get(pk=body["id"])
    assert (rule.owner, rule.experiment, rule.target, rule.events) == (
        alice,
        experiment,
        SECRET_URL,
        ["failed", "metric"],
    )
    assert body["target"] == "https://hooks.slack.com/…1234" and "SECRET" not in json.dumps(body)
    assert (body["metric_name"], body["comparison"], body["threshold"], body["min_interval_s"], body["enabled"]) == (
        "reward/mean",
        "<",
        0.1,
        120,
        True,
    )
    listed = token_client(alice).get("/api/alerts").json()
    assert listed["count"] == 1 and "SECRET" not in json.dumps(listed)
    assert token_client(alice).get(f"/api/alerts/{rule.pk}").json()["target"] == "https://hooks.slack.com/…1234"
    assert token_client(bob).get(f"/api/alerts/{rule.pk}").status_code == 404
    assert token_client(bob).get("/api/alerts").json() == {"rules": [], "count": 0}
    assert token_client(bob).delete(f"/api/alerts/{rule.pk}").status_code == 404
    patch = token_client(alice).patch(f"/api/alerts/{rule.pk}", {"enabled": False}, content_type="application/json")
    assert patch.status_code == 200 and patch.json()["enabled"] is False
    rule.refresh_from_db()
    assert rule.enabled is False
    assert token_client(alice).patch(
        f"/api/alerts/{rule.pk}", {"enabled": "no"}, content_type="application/json"
    ).json() == {"errors": {"enabled": "must be true or false, got 'no'"}}
    assert (
        token_client(bob)
        .patch(f"/api/alerts/{rule.pk}", {"enabled": True}, content_type="application/json")
        .status_code
        == 404
    )
    assert token_client(alice).delete(f"/api/alerts/{rule.pk}").status_code == 204
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(
    "body, field, message",
    [
        ({"events": [], "channel": "email", "target": "a@example.com"}, "events", "at least 1 item"),
        ({"events": ["exploded"], "channel": "email", "target": "a@example.com"}, "events", "item 0 must be 'failed'"),
        ({"events": "failed", "channel": "email", "target": "a@example.com"}, "events", "list"),
        (
            {"events": ["metric"], "channel": "email", "target": "a@example.com"},
            "metric_name",
            "required for the metric",
        ),
        (
            {
                "events": ["metric"],
                "channel": "email",
                "target": "a@example.com",
                "metric_name": "kl",
                "comparison": "<",
            },
            "threshold",
            "required",
        ),
        ({"events": ["failed"], "channel": "email", "target": "not-an-address"}, "target", "an e-mail address"),
        ({"events": ["failed"], "channel": "pager", "target": "x"}, "channel", "must be 'email' or 'webhook'"),
        (
            {"events": ["failed"], "channel": "webhook", "target": "http://127.0.0.1:8000/x"},
            "target",
            "local or private",
        ),
        (
            {"events": ["failed"], "channel": "webhook", "target": "http://10.0.0.8/x"},
            "target",
            "PLATFORM_ALERT_WEBHOOK_ALLOW",
        ),
        ({"events": ["failed"], "channel": "webhook", "target": "ftp://hooks.slack.com/x"}, "target", "only http"),
        (
            {"events": ["failed"], "channel": "webhook", "target": "https://evil.example/x"},
            None,
            None,
        ),  # resolves later
        (
            {"events": ["failed"], "channel": "email", "target": "a@example.com", "min_interval_s": -1},
            "min_interval_s",
            "greater than",
        ),
        (
            {"events": ["failed"], "channel": "email", "target": "a@example.com", "experiment": 999999},
            "experiment",
            "valid choice",
        ),
        (
            {"events": ["failed"], "channel": "email", "target": "a@example.com", "threshold": "x"},
            "threshold",
            "number",
        ),
    ],
)
def test_bad_rules_answer_400_naming_the_field(alice, body, field, message):
    status, answer = post(alice, body)
    if field is None:  # saved: a name that does not resolve now is checked again when sending
        assert status == 201, answer
        return
    assert status == 400 and message in answer["errors"][field], answer
    assert not AlertRule.objects.exists()


def test_only_your_own_experiments(alice, bob):
    bobs = make_experiment(bob, name="bobs")
    status, answer = post(
        alice, {"events": ["failed"], "channel": "email", "target": "a@example.com", "experiment": bobs.pk}
    )
    assert status == 400 and "experiment" in answer["errors"]


def test_the_delivery_log_over_the_api(alice, bob):
    rule = AlertRule.objects.create(owner=alice, events=["failed"], channel="webhook", target=SECRET_URL)
    run = make_run(alice, status="failed")
    AlertDelivery.objects.create(rule=rule, run=run, event="failed", key="failed:1", message="m1", status="sent")
    AlertDelivery.objects.create(
        rule=rule,
        run=run,
        event="failed",
        key="failed:2",
        message="m2",
        status="failed",
        error="try 3: could not reach the webhook",
        attempts=3,
    )
    body = token_client(alice).get("/api/alerts/deliveries").json()
    assert [d["message"] for d in body["deliveries"]] == ["m2", "m1"]
    assert body["deliveries"][0] | {"created_at": None} == {
        "id": body["deliveries"][0]["id"],
        "rule": rule.pk,
        "rule_name": f"alert {rule.pk}",
        "run": run.pk,
        "event": "failed",
        "status": "failed",
        "message": "m2",
        "error": "try 3: could not reach the webhook",
        "attempts": 3,
        "created_at": None,
        "sent_at": None,
    }
    assert [
        d["message"] for d in token_client(alice).get("/api/alerts/deliveries?status=sent").json()["deliveries"]
    ] == ["m1"]
    assert token_client(alice).get("/api/alerts/deliveries?status=nope").status_code == 400
    assert token_client(alice).get("/api/alerts/deliveries?limit=x").status_code == 400
    assert token_client(bob).get("/api/alerts/deliveries").json()["count"] == 0


def test_the_alerts_page(alice_client, alice, bob):
    experiment = make_experiment(alice, name="arith")
    page = alice_client.get(reverse("alert-list") + f"?experiment={experiment.pk}")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="nav-alerts"' in html and f'<option value="{experiment.pk}" selected>' in html
    response = alice_client.post(
        reverse("alert-list"),
        {
            "name": "slack",
            "experiment": str(experiment.pk),
            "events": ["failed", "stalled"],
            "channel": "webhook",
            "target": SECRET_URL,
            "min_interval_s": "60",
            "enabled": "on",
            "comparison": "",
        },
    )
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert (rule.experiment, rule.events, rule.enabled) == (experiment, ["failed", "stalled"], True)
    AlertDelivery.objects.create(
        rule=rule,
        run=make_run(alice, experiment=experiment),
        event="failed",
        key="k",
        message="Run #1 failed",
        status="failed",
        error="try 3: connection refused",
    )
    html = alice_client.get(reverse("alert-list")).content.decode()
    assert "https://hooks.slack.com/…1234" in html and "SECRET" not in html
    assert "Run #1 failed" in html and "try 3: connection refused" in html
    # a refused URL: the form again with the message, nothing saved
    response = alice_client.post(
        reverse("alert-list"), {"events": ["failed"], "channel": "webhook", "target": "http://192.168.0.2/hook"}
    )
    assert response.status_code == 400 and "local or private network" in response.content.decode()
    assert AlertRule.objects.count() == 1
    # toggle and delete: yours only
    alice_client.post(reverse("alert-toggle", args=[rule.pk]))
    rule.refresh_from_db()
    assert rule.enabled is False
    other = AlertRule.objects.create(owner=bob, events=["failed"], channel="email", target="b@example.com")
    assert alice_client.post(reverse("alert-delete", args=[other.pk])).status_code == 404
    alice_client.post(reverse("alert-delete", args=[rule.pk]))
    assert list(AlertRule.objects.all()) == [other]


def test_the_experiment_page_links_to_its_alerts(alice_client, alice):
    experiment = make_experiment(alice, name="arith")
    html = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert f'href="/alerts/?experiment={experiment.pk}"' in html


def test_the_admin_masks_targets_and_keeps_one_left_empty(client, staff, alice):
    client.force_login(staff)
    rule = AlertRule.objects.create(owner=alice, events=["failed"], channel="webhook", target=SECRET_URL, name="s")
    AlertDelivery.objects.create(rule=rule, event="failed", key="k", message="m", status="failed", error="e")
    for url in (
        reverse("admin:alerts_alertrule_changelist"),
        reverse("admin:alerts_alertrule_change", args=[rule.pk]),
        reverse("admin:alerts_alertdelivery_changelist"),
    ):
        response = client.get(url)
        assert response.status_code == 200 and "SECRET" not in response.content.decode(), url
    form = {
        "owner": alice.pk,
        "name": "renamed",
        "events": ["failed", "succeeded"],
        "channel": "webhook",
        "new_target": "",
        "comparison": "",
        "metric_name": "",
        "min_interval_s": "30",
        "enabled": "on",
    }
    response = client.post(reverse("admin:alerts_alertrule_change", args=[rule.pk]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    rule.refresh_from_db()
    assert (rule.name, rule.events, rule.target, rule.min_interval_s) == (
        "renamed",
        ["failed", "succeeded"],
        SECRET_URL,
        30,
    )
    response = client.post(
        reverse("admin:alerts_alertrule_change", args=[rule.pk]), form | {"new_target": "http://169.254.169.254/latest"}
    )
    assert response.status_code == 200 and "local or private network" in response.content.decode()
    rule.refresh_from_db()
    assert rule.target == SECRET_URL
    # "send again" puts a failed delivery back as pending
    client.post(
        reverse("admin:alerts_alertdelivery_changelist"),
        {"action": "send_again", "_selected_action": [AlertDelivery.objects.get().pk]},
    )
    assert AlertDelivery.objects.get().status == "pending"

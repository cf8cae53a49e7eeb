"""Alert rules over the API, on the Alerts page and in the admin: creation with the one validation
(events, metric fields, for_steps and stuck, e-mail, the webhook URL guard), your own experiments only,
masked webhook targets everywhere after saving, the delivery log, deleting, another user's rules
answering 404, and the collapse-detector presets filling in the page's form."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment, make_run, token_client
from django.urls import reverse

from alerts import rules
from alerts.models import AlertDelivery, AlertRule, rule_errors
from trainers.config.metric_names import is_metric_name

pytestmark = pytest.mark.django_db

SECRET_URL = "https://hooks.slack.com/services/T000/B000/abcdefSECRETvalue1234"
PUBLIC = {"hooks.slack.com": ["54.1.2.3"]}
METRIC = {"events": ["metric"], "channel": "email", "target": "a@example.com", "metric_name": "reward/mean"}


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
    assert body["for_steps"] == 1 and rule.for_steps == 1  # not given: the newest point alone, as before
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
        (METRIC | {"comparison": "~", "threshold": 0.01, "for_steps": 1}, "for_steps", "2 or more"),
        (METRIC | {"comparison": "~", "threshold": 0.01}, "for_steps", "2 or more"),  # default 1
        (METRIC | {"comparison": "~", "threshold": -0.01, "for_steps": 5}, "threshold", "0 or more"),
        (METRIC | {"comparison": "<", "threshold": 0.1, "for_steps": 0}, "for_steps", "1 to 1000"),
        (METRIC | {"comparison": "<", "threshold": 0.1, "for_steps": 1001}, "for_steps", "1 to 1000"),
        (METRIC | {"comparison": "<", "threshold": 0.1, "for_steps": "x"}, "for_steps", "whole number"),
        (METRIC | {"comparison": "<", "threshold": 0.1, "for_steps": True}, "for_steps", "got True"),
        (METRIC | {"comparison": "~~", "threshold": 0.1, "for_steps": 2}, "comparison", "'~'"),
    ],
)
def test_bad_rules_answer_400_naming_the_field(alice, body, field, message):
    status, answer = post(alice, body)
    if field is None:  # saved: a name that does not resolve now is checked again when sending
        assert status == 201, answer
        return
    assert status == 400 and message in answer["errors"][field], answer
    assert not AlertRule.objects.exists()


def test_a_stuck_rule_over_the_api(alice):
    status, body = post(
        alice,
        {
            "events": ["metric"],
            "channel": "email",
            "target": "a@example.com",
            "metric_name": "reward/mean",
            "comparison": "~",
            "threshold": 0.005,
            "for_steps": 20,
        },
    )
    assert status == 201, body
    assert (body["comparison"], body["threshold"], body["for_steps"]) == ("~", 0.005, 20)
    rule = AlertRule.objects.get(pk=body["id"])
    assert (rule.comparison, rule.for_steps) == ("~", 20)
    assert rule.describe() == "metric reward/mean stuck within 0.005 over 20 steps"
    assert token_client(alice).get(f"/api/alerts/{rule.pk}").json()["for_steps"] == 20
    assert [r["for_steps"] for r in token_client(alice).get("/api/alerts").json()["rules"]] == [20]


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


def test_the_collapse_presets_fill_in_the_form(alice_client, alice):
    experiment = make_experiment(alice, name="arith")
    html = alice_client.get(reverse("alert-list") + f"?experiment={experiment.pk}").content.decode()
    for slug in ("entropy-collapse", "reward-stuck", "sampler-mismatch"):  # each offered, keeping the experiment
        assert f'href="?experiment={experiment.pk}&amp;preset={slug}" id="preset-{slug}"' in html
    assert "<code>reward/mean stuck within 0.005 over 20 steps</code>" in html
    page = alice_client.get(reverse("alert-list") + f"?preset=reward-stuck&experiment={experiment.pk}")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'name="name" value="Reward stuck"' in html
    assert 'name="metric_name" value="reward/mean"' in html
    assert '<option value="~" selected>stuck (varies by at most)</option>' in html
    assert 'name="threshold" value="0.005"' in html and 'name="for_steps" value="20"' in html
    assert 'value="metric" id="id_events_4" checked>' in html and 'value="failed" id="id_events_0">' in html
    assert f'<option value="{experiment.pk}" selected>' in html
    # an unknown preset: the page, empty, with a message
    page = alice_client.get(reverse("alert-list") + "?preset=no-such")
    html = page.content.decode()
    assert page.status_code == 200 and "Unknown preset &#x27;no-such&#x27;: choose one of entropy-collapse" in html
    assert 'name="metric_name" maxlength="64"' in html and 'value="metric" id="id_events_4">' in html
    # the prefilled form, sent: the rule, listed with its steps
    response = alice_client.post(
        reverse("alert-list"),
        {
            "name": "Entropy collapse",
            "events": ["metric"],
            "metric_name": "entropy",
            "comparison": "<",
            "threshold": "0.05",
            "for_steps": "5",
            "channel": "email",
            "target": "alice@example.com",
            "min_interval_s": "60",
            "enabled": "on",
        },
    )
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert (rule.metric_name, rule.comparison, rule.threshold, rule.for_steps) == ("entropy", "<", 0.05, 5)
    assert "<td>metric entropy &lt; 0.05 for 5 steps</td>" in alice_client.get(reverse("alert-list")).content.decode()


def test_the_page_refuses_a_stuck_rule_over_one_step(alice_client, alice):
    form = {
        "events": ["metric"],
        "metric_name": "reward/mean",
        "comparison": "~",
        "threshold": "0.005",
        "for_steps": "1",
        "channel": "email",
        "target": "alice@example.com",
    }
    response = alice_client.post(reverse("alert-list"), form)
    html = response.content.decode()
    assert response.status_code == 400 and not AlertRule.objects.exists()
    field = html[html.index('id="field-for_steps"') : html.index('id="field-channel"')]
    assert "stuck compares several points: set for_steps to 2 or more" in field
    response = alice_client.post(reverse("alert-list"), form | {"for_steps": "", "threshold": "-1"})
    html = response.content.decode()
    assert response.status_code == 400 and "give 0 or more" in html and "set for_steps to 2 or more" in html
    assert alice_client.post(reverse("alert-list"), form | {"for_steps": "20"}).status_code == 302
    assert AlertRule.objects.get().for_steps == 20


def test_every_preset_is_a_valid_rule_on_a_metric_the_trainer_reports():
    for preset in rules.COLLAPSE_DETECTORS:
        args = (["metric"], "email", "a@example.com", preset.metric, preset.comparison, preset.threshold, 60.0)
        assert rule_errors(*args, preset.for_steps) == {}, preset.slug
        assert is_metric_name(preset.metric), preset.slug


def test_the_admin_form_checks_for_steps(client, staff, alice):
    client.force_login(staff)
    form = {
        "owner": alice.pk,
        "name": "stuck",
        "events": ["metric"],
        "metric_name": "reward/mean",
        "comparison": "~",
        "threshold": "0.005",
        "for_steps": "1",
        "channel": "email",
        "new_target": "alice@example.com",
        "min_interval_s": "60",
        "enabled": "on",
    }
    response = client.post(reverse("admin:alerts_alertrule_add"), form)
    assert response.status_code == 200 and "set for_steps to 2 or more" in response.content.decode()
    assert not AlertRule.objects.exists()
    response = client.post(reverse("admin:alerts_alertrule_add"), form | {"for_steps": "20"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert AlertRule.objects.get().for_steps == 20
    changelist = client.get(reverse("admin:alerts_alertrule_changelist")).content.decode()
    assert "metric reward/mean stuck within 0.005 over 20 steps" in changelist

"""`python -m grpo_client alerts add|list|disable|enable|log|delete` in a subprocess against a live
test server: the rule it makes, the masked URL it lists, the log, an error as one line (exit 1)."""

from __future__ import annotations

import pytest
from api_testlib import make_experiment, make_run
from test_cli_client import run_client

from alerts.models import AlertDelivery, AlertRule
from api.models import ApiToken
from grpo_client import cli

URL = "https://hooks.slack.com/services/T1/B2/cli-secret-abcdef"


@pytest.fixture
def cli_as_alice(live_server, alice, monkeypatch):
    from alerts import url_guard

    monkeypatch.setattr(url_guard, "resolve", lambda host, port: ["54.1.2.3"])  # a public address, offline
    key = ApiToken.issue(alice, name="cli").key
    return lambda *args: run_client(live_server.url, key, *args)


@pytest.mark.parametrize(
    "argv",
    [["alerts"], ["alerts", "add"], ["alerts", "list"], ["alerts", "log"], ["alerts", "delete"], ["alerts", "enable"]],
)
def test_every_alerts_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m grpo_client {' '.join(argv)}")


def test_add_list_disable_log_and_delete(cli_as_alice, alice):
    experiment = make_experiment(alice, name="arith")
    added = cli_as_alice(
        "alerts",
        "add",
        "--event",
        "failed",
        "--webhook",
        URL,
        "--experiment",
        str(experiment.pk),
        "--metric",
        "reward/mean",
        "--when",
        "<",
        "--threshold",
        "0.1",
        "--name",
        "slack",
    )
    assert added.returncode == 0, added.stderr
    rule = AlertRule.objects.get()
    assert added.stdout.strip() == str(rule.pk)
    assert (rule.events, rule.metric_name, rule.comparison, rule.threshold, rule.target) == (
        ["failed", "metric"],
        "reward/mean",
        "<",
        0.1,
        URL,
    )

    listed = cli_as_alice("alerts", "list")
    assert listed.returncode == 0 and "secret" not in listed.stdout
    assert listed.stdout.splitlines()[1].split() == [
        str(rule.pk),
        "slack",
        str(experiment.pk),
        "failed,reward/mean<0.1",
        "webhook",
        "https://hooks.slack.com/…cdef",
        "60",
        "yes",
    ]
    assert cli_as_alice("alerts", "disable", str(rule.pk)).stdout.strip() == f"alert {rule.pk}: disabled"
    rule.refresh_from_db()
    assert rule.enabled is False

    AlertDelivery.objects.create(
        rule=rule,
        run=make_run(alice, experiment=experiment),
        event="failed",
        key="k",
        message="m",
        status="failed",
        attempts=3,
        error="try 3: connection refused",
    )
    shown = cli_as_alice("alerts", "log", "--status", "failed")
    assert shown.returncode == 0 and shown.stdout.splitlines()[1].endswith(
        "failed  failed  3      try 3: connection refused"
    )

    refused = cli_as_alice("alerts", "add", "--event", "failed", "--webhook", "http://10.0.0.1/hook")
    assert refused.returncode == 1 and refused.stderr.startswith("error: HTTP 400: target: the webhook's host 10.0.0.1")
    assert cli_as_alice("alerts", "delete", str(rule.pk)).stdout.strip() == f"alert {rule.pk}: deleted"
    assert not AlertRule.objects.exists()
    missing = cli_as_alice("alerts", "delete", str(rule.pk))
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr


def test_add_a_stuck_rule_over_several_steps(cli_as_alice, alice):
    added = cli_as_alice(
        "alerts", "add", "--webhook", URL, "--metric", "reward/mean", "--when", "~", "--threshold", "0.005",
        "--for-steps", "20",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    rule = AlertRule.objects.get()
    assert (rule.events, rule.comparison, rule.threshold, rule.for_steps) == (["metric"], "~", 0.005, 20)
    assert cli_as_alice("alerts", "list").stdout.splitlines()[1].split()[3] == "reward/mean~0.005:20steps"
    refused = cli_as_alice("alerts", "add", "--webhook", URL, "--metric", "entropy", "--when", "~", "--threshold", "1")
    assert refused.returncode == 1 and "HTTP 400: for_steps" in refused.stderr

"""`python -m grpo_client evaluate | evaluations list | leaderboard` against a live test server, run
the way people run it (a subprocess with GRPO_SERVER and GRPO_TOKEN); no worker: the job stays
queued, finished jobs are written straight into the database."""

from __future__ import annotations

import pytest
from api_testlib import make_run
from django.utils import timezone
from test_cli_client import run_client

from api.models import ApiToken
from evaluations import services
from evaluations.models import EvaluationJob
from experiments.models import Checkpoint
from grpo_client import cli

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client_as_alice(live_server, alice, monkeypatch):
    monkeypatch.setattr(services, "send_when_committed", lambda job: None)  # no worker here
    key = ApiToken.issue(alice, name="cli").key
    return lambda *args: run_client(live_server.url, key, *args)


@pytest.mark.parametrize("argv", [["evaluate"], ["evaluations", "list"], ["leaderboard"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith(f"usage: python -m grpo_client {argv[0]}")


def test_evaluate_list_and_leaderboard(client_as_alice, alice, bob):
    run = make_run(alice, status="succeeded")
    checkpoint = Checkpoint.objects.create(run=run, step=2, path="p/2")
    out = client_as_alice("evaluate", str(run.pk), "--step", "2", "--dataset", "task:reverse", "--k", "2")
    assert out.returncode == 0, out.stderr
    job = EvaluationJob.objects.get(pk=int(out.stdout))
    assert (job.status, job.step, job.k, job.dataset_key) == ("queued", 2, 2, "task:reverse")

    refused = client_as_alice("evaluate", str(run.pk), "--step", "3", "--dataset", "task:reverse")
    assert refused.returncode == 1 and "has no checkpoint at step 3" in refused.stderr
    others = client_as_alice("evaluate", str(make_run(bob).pk), "--step", "1", "--dataset", "task:reverse")
    assert others.returncode == 1 and "HTTP 404" in others.stderr

    EvaluationJob.objects.filter(pk=job.pk).update(
        status="succeeded", accuracy=0.625, pass_at_k=0.75, reward_mean=0.5, finished_at=timezone.now()
    )
    listed = client_as_alice("evaluations", "list", "--status", "succeeded")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[1].split()[:9] == [
        str(job.pk),
        f"#{run.pk}",
        "step",
        "2",
        "task",
        "reverse",
        "succeeded",
        "0.625",
        "0.75",
    ]
    boards = client_as_alice("leaderboard")
    assert boards.stdout.splitlines()[1].split() == ["task:reverse", "task", "reverse", "1"]
    board = client_as_alice("leaderboard", "task:reverse")
    assert board.returncode == 0
    assert board.stdout.splitlines()[1].split() == [
        "1",
        f"#{run.pk}",
        "step",
        "2",
        "0.625",
        "0.75",
        "2",
        "0.5",
        str(job.pk),
        "64",
    ]
    assert checkpoint.evaluations.count() == 1

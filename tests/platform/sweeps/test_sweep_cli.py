"""`python -m grpo_client sweep create|list|show|cancel` in a subprocess against a live test
server: what it prints, the sweep and runs it makes, an error as one line with exit code 1."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment
from test_cli_client import run_client

from api.models import ApiToken
from experiments.models import Run, RunStatus
from grpo_client import cli
from sweeps.models import Sweep

SPACE = json.dumps({"optimizer.learning_rate": {"type": "categorical", "choices": [0.001, 0.002, 0.003]}})


@pytest.fixture
def cli_as_alice(live_server, alice, sent_messages):
    key = ApiToken.issue(alice, name="cli").key
    return lambda *args: run_client(live_server.url, key, *args)


@pytest.mark.parametrize(
    "argv", [["sweep"], ["sweep", "create"], ["sweep", "list"], ["sweep", "show"], ["sweep", "cancel"]]
)
def test_every_sweep_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m grpo_client {' '.join(argv)}")


def test_create_list_show_and_cancel(cli_as_alice, alice, tmp_path):
    experiment = make_experiment(alice, name="alice-exp")
    (tmp_path / "space.json").write_text(SPACE)
    created = cli_as_alice(
        "sweep",
        "create",
        str(experiment.pk),
        "--name",
        "lr",
        "--space",
        f"@{tmp_path / 'space.json'}",
        "--metric",
        "reward/mean",
        "--trials",
        "3",
        "--sampler",
        "grid",
        "--pruner",
        "median",
    )
    assert created.returncode == 0, created.stderr
    sweep = Sweep.objects.get()
    assert created.stdout.strip() == str(sweep.pk) and "2 of 3 trials started" in created.stderr
    assert sweep.sampler == "grid" and sweep.pruner == "median" and sweep.max_trials == 3

    listed = cli_as_alice("sweep", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["ID", "NAME", "EXPERIMENT", "STATUS", "TRIALS", "METRIC", "BEST"]
    assert listed.stdout.splitlines()[1].split()[:5] == [str(sweep.pk), "lr", "alice-exp", "running", "2/3"]

    shown = cli_as_alice("sweep", "show", str(sweep.pk))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "grid sampler, median pruner, reward/mean (maximize), 2/3 trials" in lines[0]
    assert lines[2].split()[:3] == ["0", "lr", "#0"] and "optimizer.learning_rate=0.001" in lines[2]
    assert lines[3].split()[:3] == ["1", "lr", "#1"] and "optimizer.learning_rate=0.002" in lines[3]

    cancelled = cli_as_alice("sweep", "cancel", str(sweep.pk))
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"sweep {sweep.pk}: cancelled"
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.CANCELLED}
    again = cli_as_alice("sweep", "cancel", str(sweep.pk))
    assert again.returncode == 1 and again.stderr.startswith("error: HTTP 409: cannot cancel sweep")


def test_a_bad_space_is_one_line_naming_the_field(cli_as_alice, alice):
    experiment = make_experiment(alice)
    result = cli_as_alice(
        "sweep",
        "create",
        str(experiment.pk),
        "--name",
        "x",
        "--space",
        '{"optimizer.lr": {"type": "float", "low": 0.1, "high": 0.2}}',
        "--metric",
        "reward/mean",
        "--trials",
        "2",
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: HTTP 400: space.optimizer.lr: no config field 'optimizer.lr'")
    assert not Sweep.objects.exists()
    result = cli_as_alice(
        "sweep",
        "create",
        str(experiment.pk),
        "--name",
        "x",
        "--space",
        "{nope",
        "--metric",
        "reward/mean",
        "--trials",
        "2",
    )
    assert result.returncode == 1 and "--space is not JSON" in result.stderr


def test_the_readme_synopsis_of_sweep_create_names_every_option_of_its_help():
    """The docs' (docs/platform-features.md) and the package docstring's `sweep create` synopsis name
    each option `grpo_client sweep create --help` has, and nothing else."""
    import argparse
    import re
    from pathlib import Path

    import grpo_client

    commands = cli.parser()._subparsers._group_actions[0].choices["sweep"]
    create = next(a for a in commands._actions if isinstance(a, argparse._SubParsersAction)).choices["create"]
    options = {s for a in create._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
    assert {"--seed", "--direction", "--pruner-startup-trials", "--pruner-warmup-steps"} <= options
    readme = (Path(__file__).resolve().parents[3] / "docs" / "platform-features.md").read_text()
    synopsis = re.search(r"`python -m grpo_client sweep create ([^`]*)`", readme).group(1)
    assert set(re.findall(r"--[a-z-]+", synopsis)) == options, synopsis
    docstring = re.search(r"grpo_client sweep create (.*?)\n    python", grpo_client.__doc__, re.S).group(1)
    assert set(re.findall(r"--[a-z-]+", docstring)) == options, docstring

"""The command-line client (grpo_client) against a live test server, run the way people run it: a
subprocess with GRPO_SERVER and GRPO_TOKEN in its environment. Each test checks what it prints
and what changed in the database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import yaml
from api_testlib import add_points, make_experiment, make_run, token_client
from platform_testlib import TINY_CONFIG_YAML

from api.models import ApiToken
from experiments.models import Checkpoint, Experiment, RolloutSample, Run
from grpo_client import cli, formatting
from grpo_client.api import error_message

REPO = Path(__file__).resolve().parents[3]
CLIENT_TIMEOUT_S = 60


def run_client(server: str, token: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_", "DJANGO_"))}
    env.update(GRPO_SERVER=server, GRPO_TOKEN=token)
    return subprocess.run(
        [sys.executable, "-m", "grpo_client", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
    )


@pytest.fixture
def cli_as_alice(live_server, alice, sent_messages):
    key = ApiToken.issue(alice, name="cli").key
    return lambda *args: run_client(live_server.url, key, *args)


# --- pure parts ---------------------------------------------------------------------------------


def test_error_messages_from_the_api_answers():
    assert error_message(404, b'{"error": "run 9 not found"}') == "HTTP 404: run 9 not found"
    assert (
        error_message(400, b'{"errors": {"name": "required", "config": "bad"}}')
        == "HTTP 400: name: required; config: bad"
    )
    assert error_message(502, b"<html>\nBad gateway</html>") == "HTTP 502: <html> Bad gateway</html>"


def test_watch_lines_and_tables():
    by_step = formatting.points_by_step({"loss": [[1, 2.0], [2, 1.5]], "reward/mean": [[2, 0.123456]]})
    assert by_step == {1: {"loss": 2.0}, 2: {"loss": 1.5, "reward/mean": 0.123456}}
    assert formatting.metric_line(2, by_step[2]) == "step 2  reward/mean=0.1235  loss=1.5"
    assert formatting.metric_line(2, by_step[2], only=["loss"]) == "step 2  loss=1.5"
    assert formatting.table(["ID", "NAME"], [["7", "a"], ["12", None]]) == "ID  NAME\n7   a\n12  -"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["experiments"],
        ["experiments", "list"],
        ["runs"],
        ["runs", "list"],
        ["launch"],
        ["watch"],
        ["pause"],
        ["resume"],
        ["cancel"],
        ["retry"],
        ["samples"],
        ["download"],
    ],
)
def test_every_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m grpo_client {' '.join(argv[:1])}".rstrip())


# --- against the live server --------------------------------------------------------------------


def test_experiments_and_runs_lists(cli_as_alice, alice, bob):
    experiment = make_experiment(alice, name="alice-exp")
    running = make_run(alice, status="running", experiment=experiment, step=3)
    make_run(alice, status="succeeded", experiment=experiment)
    make_run(bob, status="running", experiment=make_experiment(bob, name="bob-exp"))

    listed = cli_as_alice("experiments", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "OWNER", "VERSION", "RUNS", "UPDATED"]
    assert [line.split()[:5] for line in lines[1:]] == [[str(experiment.pk), "alice-exp", "alice", "1", "2"]]

    listed = cli_as_alice("runs", "list", "--status", "running")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:4] for line in listed.stdout.splitlines()[1:]] == [
        [str(running.pk), "alice-exp", "running", "3/6"]
    ]


def test_launch_a_yaml_config_with_overrides(cli_as_alice, sent_messages, tmp_path):
    config_file = tmp_path / "arith.yaml"
    config_file.write_text(TINY_CONFIG_YAML)
    launched = cli_as_alice("launch", str(config_file), "--set", "train.max_steps=3", "--set", "seed=7")
    assert launched.returncode == 0, launched.stderr
    run = Run.objects.get(pk=int(launched.stdout.strip()))  # stdout is the run's id alone
    assert run.status == "queued" and run.experiment.name == "arith"  # the file's name without .yaml
    assert (run.config["train"]["max_steps"], run.config["seed"]) == (3, 7)
    assert run.experiment.versions.count() == 1  # one request: the YAML with the overrides applied
    assert sent_messages == [(run.pk, 1, run.queue)]
    assert f"run {run.pk} queued" in launched.stderr


def test_launch_with_a_name(cli_as_alice, tmp_path):
    config_file = tmp_path / "arith.yaml"
    config_file.write_text(TINY_CONFIG_YAML)
    launched = cli_as_alice("launch", str(config_file), "--name", "my arithmetic")
    assert launched.returncode == 0, launched.stderr
    assert Run.objects.get(pk=int(launched.stdout.strip())).experiment.name == "my arithmetic"


def test_launch_into_an_experiment_by_name_or_id_reuses_it(cli_as_alice, alice, bob, tmp_path):
    """Every launch used to make a new experiment; --experiment NAME|ID reuses one (created
    by the first launch of a new name), its config a new version only when the YAML changed."""
    config_file = tmp_path / "arith.yaml"
    config_file.write_text(TINY_CONFIG_YAML)
    make_experiment(bob, name="sweeps")  # another user's experiment of that name is not visible to alice
    runs = []
    for extra in ([], [], ["--set", "train.max_steps=5"]):
        launched = cli_as_alice("launch", str(config_file), "--experiment", "sweeps", *extra)
        assert launched.returncode == 0, launched.stderr
        runs.append(Run.objects.get(pk=int(launched.stdout.strip())))
    experiment = runs[0].experiment
    assert {r.experiment_id for r in runs} == {experiment.pk} and experiment.owner == alice
    assert experiment.name == "sweeps" and experiment.versions.count() == 2  # the same YAML twice: one version
    assert runs[2].config["train"]["max_steps"] == 5
    by_id = cli_as_alice("launch", str(config_file), "--experiment", str(experiment.pk))
    assert by_id.returncode == 0 and Run.objects.get(pk=int(by_id.stdout)).experiment_id == experiment.pk
    assert Experiment.objects.filter(owner=alice).count() == 1
    make_experiment(alice, name="sweeps")
    twice = cli_as_alice("launch", str(config_file), "--experiment", "sweeps")
    assert twice.returncode == 1 and "2 experiments are named 'sweeps'" in twice.stderr
    both = cli_as_alice("launch", str(config_file), "--experiment", "sweeps", "--name", "x")
    assert both.returncode == 2


def test_an_override_repairs_an_invalid_base_config(cli_as_alice, tmp_path):
    """Like configs/smollm2-arith.yaml with --set model.path=...: the file alone is refused, the
    override applied before validation makes it valid."""
    config = yaml.safe_load(TINY_CONFIG_YAML)
    config["train"]["max_steps"] = "many"
    config_file = tmp_path / "bad.yaml"
    config_file.write_text(yaml.safe_dump(config))
    launched = cli_as_alice("launch", str(config_file), "--set", "train.max_steps=4")
    assert launched.returncode == 0, launched.stderr
    run = Run.objects.get(pk=int(launched.stdout.strip()))
    assert run.config["train"]["max_steps"] == 4 and run.experiment.versions.count() == 1


@pytest.mark.parametrize(
    "override, field",
    [
        ("train.max_steps=-3", "train.max_steps"),  # a value the schema refuses
        ("train.max_stepz=3", "train.max_stepz"),  # no such field
        ("seed.x=1", "seed"),  # below a value
        ("train.max_steps", "(--set)"),  # not PATH=VALUE
    ],
)
def test_a_refused_override_creates_nothing(cli_as_alice, alice, tmp_path, override, field):
    make_experiment(alice, name="already-there")
    config_file = tmp_path / "arith.yaml"
    config_file.write_text(TINY_CONFIG_YAML)
    launched = cli_as_alice("launch", str(config_file), "--set", "seed=1", "--set", override)
    assert launched.returncode == 1 and launched.stdout == ""
    assert launched.stderr.startswith(f"error: HTTP 400: {field}: "), launched.stderr
    assert list(Experiment.objects.values_list("name", flat=True)) == ["already-there"]
    assert not Run.objects.exists()


def test_a_refused_launch_says_the_experiment_was_kept(cli_as_alice, tmp_path):
    config_file = tmp_path / "arith.yaml"
    config_file.write_text(TINY_CONFIG_YAML)
    launched = cli_as_alice("launch", str(config_file), "--queue", "no-such-queue")
    assert launched.returncode == 1 and launched.stdout == ""
    experiment = Experiment.objects.get()
    assert launched.stderr.startswith(
        f"error: experiment {experiment.pk} was created, but no run was launched (HTTP 4"
    ), launched.stderr
    assert "queue" in launched.stderr and f"/experiments/{experiment.pk}/ once that is fixed" in launched.stderr
    assert not Run.objects.exists()


def test_the_api_applies_overrides_before_it_validates(alice):
    """The create request the client sends: `overrides` with config_yaml or config; checked as a
    list of strings, and only with a config."""
    client = token_client(alice)

    def post(body):
        return client.post("/api/experiments", json.dumps(body), content_type="application/json")

    bad = yaml.safe_load(TINY_CONFIG_YAML)
    bad["seed"] = "x"
    created = post({"name": "a", "config": bad, "overrides": ["seed=5", "train.max_steps=2"]})
    assert created.status_code == 201, created.content
    assert Experiment.objects.get(pk=created.json()["id"]).config["seed"] == 5
    assert bad["seed"] == "x"
    for body, field in [
        ({"name": "b", "config_yaml": TINY_CONFIG_YAML, "overrides": "seed=1"}, "overrides"),
        ({"name": "b", "config_yaml": TINY_CONFIG_YAML, "overrides": [1]}, "overrides"),
        ({"name": "b", "overrides": ["seed=1"]}, "overrides"),
        ({"name": "b", "config_yaml": "[1, 2]", "overrides": ["seed=1"]}, "(config)"),
    ]:
        refused = post(body)
        assert refused.status_code == 400 and field in refused.json()["errors"], (body, refused.content)
    assert Experiment.objects.count() == 1


def test_launch_an_invalid_config_names_the_field(cli_as_alice, tmp_path):
    config = yaml.safe_load(TINY_CONFIG_YAML)
    config["train"]["max_steps"] = "many"
    config_file = tmp_path / "bad.yaml"
    config_file.write_text(yaml.safe_dump(config))
    launched = cli_as_alice("launch", str(config_file))
    assert launched.returncode == 1
    assert launched.stderr.startswith("error: HTTP 400: ") and "train.max_steps" in launched.stderr
    assert launched.stdout == ""
    assert not Experiment.objects.exists()


def test_pause_resume_cancel(cli_as_alice, alice, sent_messages):
    running = make_run(alice, status="running")
    paused = make_run(alice, status="paused", experiment=running.experiment)

    paused_now = cli_as_alice("pause", str(running.pk))
    assert (paused_now.returncode, paused_now.stdout) == (0, f"run {running.pk}: pausing\n")
    resumed = cli_as_alice("resume", str(paused.pk))
    assert (resumed.returncode, resumed.stdout) == (0, f"run {paused.pk}: queued\n")
    assert sent_messages == [(paused.pk, 2, Run.objects.get(pk=paused.pk).queue)]
    cancelled = cli_as_alice("cancel", str(paused.pk))
    assert (cancelled.returncode, cancelled.stdout) == (0, f"run {paused.pk}: cancelled\n")
    assert Run.objects.get(pk=running.pk).status == "pausing"
    assert Run.objects.get(pk=paused.pk).status == "cancelled"

    again = cli_as_alice("cancel", str(paused.pk))
    assert again.returncode == 1
    assert again.stderr == f"error: HTTP 409: cannot cancel run {paused.pk}: it is cancelled\n"


def test_someone_elses_run_is_not_found(cli_as_alice, bob):
    bobs = make_run(bob, status="running")
    refused = cli_as_alice("pause", str(bobs.pk))
    assert refused.returncode == 1 and refused.stderr.startswith("error: HTTP 404: ")
    assert Run.objects.get(pk=bobs.pk).status == "running"


def test_samples_for_people_and_as_json_lines(cli_as_alice, alice):
    run = make_run(alice, status="succeeded", step=4)
    for step in (2, 4):
        for index in range(2):
            RolloutSample.objects.create(
                run=run,
                step=step,
                index=index,
                prompt=f"{step}+{index}=",
                completion=f"{step + index}",
                answer=f"{step + index}",
                reward=1.0,
                advantage=0.25 * index,
            )
    shown = cli_as_alice("samples", str(run.pk))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "step 4 (2 samples; steps with samples: 4, 2)"
    assert "--- sample 1  reward=1  advantage=0.25\nprompt:\n  4+1=\ncompletion:\n  5\nanswer: 5" in shown.stdout

    exported = cli_as_alice("samples", str(run.pk), "--step", "2", "--jsonl")
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [(s["step"], s["index"], s["prompt"]) for s in lines] == [(2, 0, "2+0="), (2, 1, "2+1=")]


def test_watch_prints_each_step_as_it_arrives_and_exits_when_the_run_ends(live_server, alice):
    run = make_run(alice, status="running", step=1)
    add_points(run, {"reward/mean": [(1, 0.25)], "loss": [(1, 2.0)]})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRPO_", "DJANGO_"))}
    env.update(GRPO_SERVER=live_server.url, GRPO_TOKEN=ApiToken.issue(alice).key)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "grpo_client", "watch", str(run.pk), "--interval", "0.1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killer = threading.Timer(CLIENT_TIMEOUT_S, watcher.kill)  # a hung watch fails the test, not the suite
    killer.start()
    try:
        assert watcher.stdout.readline() == "step 1  reward/mean=0.25  loss=2\n"
        add_points(run, {"reward/mean": [(2, 0.5), (3, 0.75)], "loss": [(2, 1.5)]})  # while it polls
        Run.objects.filter(pk=run.pk).update(status="succeeded", step=3)
        out, err = watcher.communicate()
    finally:
        killer.cancel()
    assert out == "step 2  reward/mean=0.5  loss=1.5\nstep 3  reward/mean=0.75\n"
    assert watcher.returncode == 0
    assert f"run {run.pk}: running (step 1/6)" in err and f"run {run.pk}: succeeded (step 3/6)" in err


def test_watch_a_failed_run_exits_1_with_its_error(cli_as_alice, alice):
    run = make_run(alice, status="failed", step=2, error="out of memory")
    add_points(run, {"reward/mean": [(1, 0.5), (2, 0.5)]})
    watched = cli_as_alice("watch", str(run.pk))
    assert watched.stdout == "step 1  reward/mean=0.5\nstep 2  reward/mean=0.5\n"
    assert watched.returncode == 1 and f"run {run.pk} failed: out of memory" in watched.stderr


def test_download_a_checkpoint(cli_as_alice, alice, monkeypatch, tmp_path):
    """The server's export is replaced by a small folder (a real one needs a trained model: see
    test_run_fork_training); the client's part is the streaming to --out."""
    import runner.downloads

    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    monkeypatch.setattr(runner.downloads, "hf_folder", lambda run, step: folder)
    run = make_run(alice, status="succeeded", step=4)
    Checkpoint.objects.create(run=run, step=4, path="x", size_bytes=10)
    out = tmp_path / "ckpt.zip"

    downloaded = cli_as_alice("download", str(run.pk), "--step", "4", "--out", str(out))
    assert downloaded.returncode == 0, downloaded.stderr
    assert downloaded.stdout == f"wrote {out} ({out.stat().st_size} bytes)\n"
    with zipfile.ZipFile(out) as archive:
        assert archive.read(f"run-{run.pk}-step-4/model.safetensors") == bytes(range(256)) * 40
        assert sorted(archive.namelist()) == [
            f"run-{run.pk}-step-4/config.json",
            f"run-{run.pk}-step-4/model.safetensors",
        ]


def test_a_refused_download_leaves_no_file(cli_as_alice, alice, tmp_path):
    run = make_run(alice, status="succeeded", step=4)  # a toy preset: no Hugging Face folder
    out = tmp_path / "ckpt.zip"
    refused = cli_as_alice("download", str(run.pk), "--step", "4", "--out", str(out))
    assert refused.returncode == 1 and refused.stderr.startswith("error: HTTP 409: ")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_token_is_one_line_and_exit_1(live_server, alice):
    refused = run_client(live_server.url, "not-a-key", "runs", "list")
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.startswith("error: HTTP 401: ") and refused.stderr.count("\n") == 1
    no_token = run_client(live_server.url, "", "experiments", "list")
    assert no_token.returncode == 1 and "set GRPO_TOKEN" in no_token.stderr


def test_an_unreachable_server_is_one_line_and_exit_1():
    refused = run_client("http://127.0.0.1:9", "key", "runs", "list")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: cannot reach http://127.0.0.1:9 ")


def test_a_usage_error_exits_2(live_server):
    wrong = run_client(live_server.url, "key", "pause", "not-a-number")
    assert wrong.returncode == 2 and "invalid int value" in wrong.stderr


def test_the_client_imports_only_the_standard_library():
    """It must run without the platform: no Django, trainers or platform code, no third-party package."""
    import ast

    imported = set()
    for path in (REPO / "grpo_client").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    assert "urllib" in imported and "argparse" in imported
    assert imported - set(sys.stdlib_module_names) == {"grpo_client"}

"""`python -m trainers validate|run` as DESIGN.md specifies them."""

import json
import os
import subprocess
import sys

import yaml

from tests.conftest import ROOT


def cli(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "trainers", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def test_validate_prints_the_batch_plan():
    out = cli("validate", "configs/demo.yaml", "--set", "batch.mini_batch_prompts=4", "--set", "grpo.num_iterations=2")
    assert out.returncode == 0, out.stderr
    assert "sequences per step            128" in out.stdout
    assert "optimizer updates per step    8" in out.stdout
    assert "accumulation steps            1" in out.stdout
    assert "old-policy log-prob passes    4  (of 32 sequences)" in out.stdout


def test_validate_reports_each_problem_with_field_and_fix_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump({"batch": {"prompts_per_step": 12, "mini_batch_prompts": 5}, "grpo": {"num_generatons": 4}})
    )
    out = cli("validate", str(bad))
    assert out.returncode == 2
    lines = [line.strip() for line in out.stderr.splitlines()]
    assert "grpo.num_generatons: unknown key; did you mean 'num_generations'?" in lines
    out = cli("validate", str(bad), "--set", "grpo.num_generatons=4", "--set", "grpo={}")
    assert out.returncode == 2
    out = cli(
        "validate", "configs/demo.yaml", "--set", "batch.prompts_per_step=12", "--set", "batch.mini_batch_prompts=5"
    )
    assert out.returncode == 2
    assert (
        "batch.mini_batch_prompts: batch.mini_batch_prompts=5 does not divide batch.prompts_per_step=12; "
        "use 1, 2, 3, 4, 6 or 12"
    ) in out.stderr


def test_validate_refuses_a_prompt_the_run_would_refuse_at_start(tmp_path):
    """A guess_number episode starts with the game's rules (the environment's reset),
    longer than the example's own prompt; validate passed such a config that then failed at start.
    It now encodes every prompt as its episode starts and exits 2 naming data.max_prompt_tokens."""
    config = {"data": {"task": "guess_number", "max_prompt_tokens": 64}, "env": {"name": "guess_number"}}
    path = tmp_path / "game.yaml"
    path.write_text(yaml.safe_dump(config))
    out = cli("validate", str(path))
    assert out.returncode == 2, out.stdout
    assert "data.max_prompt_tokens: training data: prompt 0 is 116 tokens" in out.stderr
    assert "over the limit max_prompt_tokens=64" in out.stderr
    roomy = cli("validate", str(path), "--set", "data.max_prompt_tokens=2048")
    assert roomy.returncode == 0, roomy.stderr


def test_every_shipped_config_validates(smollm2_dir):
    # configs/r1.yaml and smollm2-arith.yaml name var/models/smollm2-135m-instruct: the fixture fetches it
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        out = cli("validate", f"configs/{name}")
        assert out.returncode == 0, f"{name}: {out.stderr}"


def test_run_writes_metrics_checkpoints_and_summary(tmp_path):
    out_dir = tmp_path / "run"
    args = [
        "run",
        "configs/demo.yaml",
        "--out",
        str(out_dir),
        "--set",
        "train.max_steps=4",
        "--set",
        "checkpoint.every_steps=2",
        "--set",
        "batch.prompts_per_step=4",
        "--set",
        "eval.every_steps=2",
        "--set",
        "eval.prompts=8",
    ]
    out = cli(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for name in (
        "reward/mean",
        "accuracy",
        "loss/policy",
        "entropy",
        "grad_norm",
        "learning_rate",
        "timing/step_s",
        "throughput/tokens_per_s",
        "response_length/mean",
    ):
        assert name in rows[0], name
    assert "eval/accuracy" in rows[1] and "eval/accuracy" not in rows[0]
    assert sorted(os.listdir(out_dir / "checkpoints")) == ["2", "4"]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["final_step"] == 4 and len(summary["params_digest"]) == 64
    samples = [json.loads(line) for line in (out_dir / "samples.jsonl").read_text().splitlines()]
    assert {"prompt", "completion", "reward", "advantage"} <= set(samples[0])
    assert "train:" in out.stderr  # the progress bar

    # Run again with more steps: resumes from step 4, each step still once.
    out = cli(
        *args[:-8],
        "--set",
        "train.max_steps=5",
        "--set",
        "checkpoint.every_steps=2",
        "--set",
        "batch.prompts_per_step=4",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from checkpoint at step 4" in out.stderr
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]


def test_help_describes_commands():
    out = cli("run", "--help")
    assert out.returncode == 0 and "--set" in out.stdout and "resume" in out.stdout


def test_ctrl_c_pauses_with_a_checkpoint_and_exit_0(tmp_path):
    import signal
    import time

    out_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainers",
            "run",
            "configs/demo.yaml",
            "--out",
            str(out_dir),
            "--set",
            "train.max_steps=100000",
            "--set",
            "checkpoint.every_steps=0",
            "--set",
            "eval.every_steps=0",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = out_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert stdout.startswith("paused: step ")
    step = int(stdout.split()[2].rstrip(","))
    assert os.listdir(out_dir / "checkpoints") == [str(step)]
    assert len(metrics.read_text().splitlines()) == step


def test_validate_and_run_refuse_code_tests_where_the_sandbox_cannot_run(tmp_path):
    """Without bubblewrap (a PATH that lacks it) the code sandbox cannot isolate code: a config whose
    rewards run code is refused before anything runs, naming the field and the fix."""
    config = tmp_path / "code.yaml"
    config.write_text(yaml.safe_dump({"data": {"task": "python_functions", "max_prompt_tokens": 256}}))
    env = {**os.environ, "PYTHONPATH": ROOT, "PATH": str(tmp_path)}
    for args in (["validate", str(config)], ["run", str(config), "--out", str(tmp_path / "run")]):
        out = subprocess.run(
            [sys.executable, "-m", "trainers", *args], cwd=ROOT, capture_output=True, text=True, env=env
        )
        assert out.returncode == 2, out.stderr
        assert "rewards: code_tests cannot run on this machine" in out.stderr
        assert "needs bubblewrap (bwrap): ./scripts/setup.sh installs it" in out.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert cli("validate", str(config)).returncode == 0  # with bubblewrap on the PATH it is valid


def test_run_refuses_a_step_whose_memory_estimate_is_over_the_machines(tmp_path):
    """16,384-token completions of 4,096 sequences: even with what the run chooses to fit (remat on,
    a small train micro-batch) the estimate (validate's: the rollout's 64 GiB of KV pages and their
    view) is above any machine this runs on, so `run` stops before anything runs, naming the fields
    to lower and the flag that starts it anyway; validate prints the same estimate."""
    config = tmp_path / "long.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"preset": "tiny"},
                "data": {"task": "arithmetic"},
                "rollout": {"max_new_tokens": 16384, "stop_at_eos": False},
                "batch": {"prompts_per_step": 256},
                "grpo": {"num_generations": 16, "beta": 0.04},
            }
        )
    )
    out = cli("run", str(config), "--out", str(tmp_path / "run"))
    assert out.returncode == 2, out.stderr
    assert "cannot run here" in out.stderr and "memory: a step needs about " in out.stderr
    assert "more than this machine's " in out.stderr
    assert "lower rollout.decode_slots, batch.rollout_micro_batch_sequences, rollout.max_new_tokens" in out.stderr
    assert out.stderr.rstrip().endswith("or run with --ignore-memory-estimate")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    estimate = out.stderr.split("a step needs about ")[1].split(" GiB")[0]
    assert f"Memory of a step (estimate)     {estimate} GiB" in cli("validate", str(config)).stdout

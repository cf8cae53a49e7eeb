"""Exact resume: N steps in one go equal k steps + SIGKILL + rerun to N (same params_digest), with
mu > 1 and several mini-batches; metrics.jsonl holds each step once; data order survives resume."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from tests.conftest import ROOT
from trainers.config import parse_config
from trainers.data.examples import load_examples
from trainers.data.prompt_stream import PromptStream
from trainers.loop.trainer import train
from trainers.step.hooks import Hooks

RAW = {
    "seed": 3,
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 20, "eval_prompts": 0},
    # 8 prompts/step over a 20-prompt epoch: steps cross epoch ends; mu=2 x 2 mini-batches = 4 updates
    "batch": {
        "prompts_per_step": 8,
        "mini_batch_prompts": 4,
        "train_micro_batch_sequences": 8,
        "rollout_micro_batch_sequences": 16,
        "logprob_micro_batch_sequences": 16,
    },
    "grpo": {"num_generations": 4, "num_iterations": 2, "beta": 0.04},
    "train": {"max_steps": 8},
    "checkpoint": {"every_steps": 3, "keep_last": 2},
}

# Runs the real trainer with file hooks, slowed down after each step so the test can kill it mid-run.
SLOW_RUN = textwrap.dedent("""
    import sys, time
    from trainers.config import load_config
    from trainers.step.hooks import Hooks, MultiHooks
    from trainers.loop.run_files import RunFilesHooks
    from trainers.loop.trainer import train

    class Slow(Hooks):
        def on_step(self, step, metrics):
            time.sleep(0.3)

    out = sys.argv[2]
    train(load_config(sys.argv[1]), out, MultiHooks(RunFilesHooks(out), Slow()))
""")


def _metrics_steps(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if line.strip()]


def _wait_for_step(run_dir, step, proc, timeout_s=600):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        path = os.path.join(run_dir, "metrics.jsonl")
        if os.path.exists(path) and any(s >= step for s in _metrics_steps(run_dir)):
            return
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("straight"))
    return train(parse_config(RAW), run_dir), run_dir


def test_kill_and_resume_gives_the_same_parameters(uninterrupted, tmp_path):
    straight, _ = uninterrupted
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(RAW))
    script = tmp_path / "slow_run.py"
    script.write_text(SLOW_RUN)
    run_dir = str(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, str(script), str(config_path), run_dir], env=env, cwd=ROOT)
    try:
        _wait_for_step(run_dir, 4, proc)  # checkpoint at 3 exists, step 4 reported after it
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    steps_before = _metrics_steps(run_dir)
    assert 4 in steps_before and max(steps_before) < 8

    resumed = subprocess.run(
        [sys.executable, "-m", "trainers", "run", str(config_path), "--out", run_dir],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from checkpoint at step 3" in resumed.stderr
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["final_step"] == 8
    assert summary["params_digest"] == straight.params_digest
    assert _metrics_steps(run_dir) == list(range(1, 9))  # each step once, in order


def test_resume_continues_the_data_stream_exactly(uninterrupted, tmp_path):
    """Prompts seen per step are the stream's; a run stopped at a checkpoint continues where it was."""
    seen = {}

    class Record(Hooks):
        def on_samples(self, step, samples):
            seen.setdefault(step, []).append(samples[0]["prompt"])

    raw = {**RAW, "train": {"max_steps": 3, "samples_per_step": 32}}
    run_dir = str(tmp_path / "run")
    train(parse_config(raw), run_dir, Record())
    raw["train"] = {"max_steps": 5, "samples_per_step": 32}
    result = train(parse_config(raw), run_dir, Record())
    assert result.final_step == 5 and sorted(seen) == [1, 2, 3, 4, 5]
    examples, _ = load_examples("arithmetic", None, None, 20, 0, 3)
    stream = PromptStream(examples, seed=3)
    for step in range(1, 6):
        assert seen[step][0] == stream.take((step - 1) * 8, 8)[0]["prompt"]


def test_checkpoint_holds_data_position_and_counters(uninterrupted):
    _, run_dir = uninterrupted
    from trainers.loop.checkpoint import Checkpointer

    ckpt = Checkpointer(os.path.join(run_dir, "checkpoints"), keep_last=2)
    assert ckpt.all_steps() == [6, 8]  # keep_last=2 of 3, 6, 8
    with open(os.path.join(run_dir, "checkpoints", "8", "meta", "metadata")) as f:
        meta = json.load(f)
    assert meta["step"] == 8 and meta["data_position"] == 64 and meta["epoch"] == 3
    assert meta["optimizer_updates"] == 32
    ckpt.close()

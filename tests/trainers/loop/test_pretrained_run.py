"""The pretrained path end to end on a tiny Hugging Face folder: `run` trains it (chat template,
KL to a reference loaded from the same folder), `generate` answers from the run directory and from
the export, and `export` writes a folder that transformers loads with the same logits as the
trained checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
import yaml

from tests.conftest import ROOT
from tests.tiny_models import write_tiny_model
from trainers.config import parse_config
from trainers.data.encoding import PROMPT_BUCKET_TOKENS
from trainers.data.hf_tokenizer import HFTokenizer
from trainers.loop.policy import load_policy
from trainers.loop.run_files import RunFilesHooks
from trainers.loop.trainer import GRPOTrainer, train
from trainers.models import transformer as model_lib


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainers", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _config(model_dir, **extra) -> dict:
    raw = {
        "seed": 3,
        "model": {"path": str(model_dir)},
        "data": {
            "task": "arithmetic_words",
            "train_prompts": 64,
            "eval_prompts": 4,
            "max_prompt_tokens": 256,
            "system_prompt": "Answer with the number.",
        },
        # alphabet_match gives a random policy partial credit, so its groups have advantages to learn from
        "rewards": [{"name": "math_answer", "weight": 1.0}, {"name": "alphabet_match", "weight": 1.0}],
        "rollout": {"max_new_tokens": 8},
        "batch": {"prompts_per_step": 2},
        "grpo": {"num_generations": 2, "beta": 0.04},
        "optimizer": {"learning_rate": 1.0e-2},
        "train": {"max_steps": 2},
        "checkpoint": {"every_steps": 1},
        "eval": {"every_steps": 2, "before_training": True},
    }
    for section, fields in extra.items():
        raw.setdefault(section, {}).update(fields)
    return raw


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("pretrained")
    model_dir = write_tiny_model(base / "model")
    run_dir = base / "run"
    (base / "config.yaml").write_text(yaml.safe_dump(_config(model_dir)))
    done = _cli("run", str(base / "config.yaml"), "--out", str(run_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    return model_dir, run_dir


def test_run_trains_the_folder_with_its_chat_template_and_reference(trained):
    model_dir, run_dir = trained
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]  # step 0: the starting policy's held-out scores
    assert "eval/accuracy" in rows[0] and "eval/accuracy" in rows[2]
    assert all("kl" in r for r in rows[1:])  # beta > 0: the reference from the same folder is used
    assert rows[1]["kl"] == pytest.approx(0.0, abs=1e-6)  # the first step's policy is the reference
    assert rows[2]["kl"] > 0.0
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["model"]["path"] == str(model_dir)  # stored absolute: the run dir works from anywhere
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and all(isinstance(s["completion"], str) for s in samples)


def test_prompts_use_the_chat_template_and_bucketed_lengths(tmp_path):
    model_dir = write_tiny_model(tmp_path / "model")
    trainer = GRPOTrainer(parse_config(_config(model_dir)), str(tmp_path / "run"))
    tokenizer = HFTokenizer.from_folder(str(model_dir))
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    example = rollout.examples[0]
    expected = tokenizer.encode(
        "<|im_start|>system\nAnswer with the number.<|im_end|>\n<|im_start|>user\n"
        + example["prompt"]
        + "<|im_end|>\n<|im_start|>assistant\n",
        add_bos=False,
    )
    row = rollout.prompt_tokens[0][rollout.prompt_valid[0]]
    assert row.tolist() == expected
    assert rollout.prompt_tokens.shape[1] % PROMPT_BUCKET_TOKENS == 0
    trainer.source.stop()


def test_export_loads_in_transformers_with_the_checkpoint_logits(trained, tmp_path):
    _, run_dir = trained
    out = tmp_path / "export"
    done = _cli("export", str(run_dir), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(out))
    policy = load_policy(str(run_dir))  # the newest checkpoint: step 2
    tokens = np.array([[1, 40, 41, 42, 43, 44, 45, 46, 47]], np.int32)
    ours = np.asarray(
        model_lib.forward(policy.graphdef, policy.params, jnp.asarray(tokens), jnp.ones(tokens.shape, bool))
    )
    reference = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = reference(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    assert np.max(np.abs(ours - theirs)) <= 1e-4
    # The trained weights, not the starting ones: the first checkpoint's logits differ.
    first = load_policy(str(run_dir), step=1)
    first_logits = np.asarray(
        model_lib.forward(first.graphdef, first.params, jnp.asarray(tokens), jnp.ones(tokens.shape, bool))
    )
    assert np.max(np.abs(first_logits - ours)) > 1e-3


def test_export_bfloat16_and_refusals(trained, tmp_path):
    _, run_dir = trained
    done = _cli("export", str(run_dir), "--out", str(tmp_path / "bf16"), "--dtype", "bfloat16", "--step", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    again = _cli("export", str(run_dir), "--out", str(tmp_path / "bf16"))
    assert again.returncode == 2 and "not empty" in again.stderr
    missing = _cli("export", str(run_dir), "--out", str(tmp_path / "x"), "--step", "7")
    assert missing.returncode == 2 and "no checkpoint at step 7" in missing.stderr


def test_generate_from_run_dir_and_export_agree(trained, tmp_path):
    _, run_dir = trained
    out = tmp_path / "export"
    assert _cli("export", str(run_dir), "--out", str(out)).returncode == 0
    from_run = _cli("generate", "--model", str(run_dir), "--json", "--max-new-tokens", "6", "Tom has 3 apples.")
    from_export = _cli(
        "generate",
        "--model",
        str(out),
        "--json",
        "--max-new-tokens",
        "6",
        "--system-prompt",
        "Answer with the number.",
        "Tom has 3 apples.",
    )
    assert from_run.returncode == 0, from_run.stderr[-2000:]
    assert from_export.returncode == 0, from_export.stderr[-2000:]
    row = json.loads(from_run.stdout.strip().splitlines()[-1])
    assert row["prompt"] == "Tom has 3 apples." and isinstance(row["completion"], str)
    # The run's system prompt applies to the run directory; given explicitly, the export matches it.
    assert json.loads(from_export.stdout.strip().splitlines()[-1]) == row


def test_toy_run_cannot_be_exported(tmp_path):
    config = {
        "model": {"preset": "tiny"},
        "train": {"max_steps": 1},
        "batch": {"prompts_per_step": 2},
        "grpo": {"num_generations": 2},
        "data": {"train_prompts": 8},
    }
    train(parse_config(config), str(tmp_path / "run"), hooks=RunFilesHooks(str(tmp_path / "run")))
    done = _cli("export", str(tmp_path / "run"), "--out", str(tmp_path / "x"))
    assert done.returncode == 2 and "export needs a run on a Hugging Face model" in done.stderr


def test_a_prompt_over_the_limit_stops_the_run_before_its_first_step(tmp_path):
    from trainers.data.examples import DataError

    model_dir = write_tiny_model(tmp_path / "model")
    config = parse_config(_config(model_dir, data={"max_prompt_tokens": 40}))
    with pytest.raises(DataError, match=r"training data: prompt \d+ is \d+ tokens .*data.max_prompt_tokens"):
        GRPOTrainer(config, str(tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_config_refuses_what_a_pretrained_model_needs_and_lacks(tmp_path):
    from trainers.config import ConfigError

    model_dir = write_tiny_model(tmp_path / "model")
    cases = {
        "data.system_prompt": {"data": {"task": "arithmetic", "system_prompt": "Be brief."}},
        "data.chat_template": {"data": {"task": "arithmetic", "chat_template": True}},
        "data.tokenizer": {"model": {"path": str(model_dir)}, "data": {"tokenizer": "char"}},
    }
    for field, raw in cases.items():
        with pytest.raises(ConfigError) as info:
            parse_config(raw)
        assert field in [p.field for p in info.value.problems], (field, info.value.problems)
    with pytest.raises(ConfigError) as info:
        parse_config({"model": {"path": str(tmp_path / "nowhere")}})
    assert [p.field for p in info.value.problems] == ["model.path"]


def test_generate_on_the_real_smollm2_answers_with_this_projects_stack(smollm2_dir):
    """This project's loader, tokenizer, chat template and sampler on the converted SmolLM2 (the
    GGUF tests check the same facts with transformers): greedy answers name Paris and 12."""
    done = _cli(
        "generate",
        "--model",
        str(smollm2_dir),
        "--json",
        "--max-new-tokens",
        "32",
        "Name the capital of France.",
        "What is 7 + 5?",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r["prompt"] for r in rows] == ["Name the capital of France.", "What is 7 + 5?"]
    assert "Paris" in rows[0]["completion"]
    assert "12" in rows[1]["completion"]

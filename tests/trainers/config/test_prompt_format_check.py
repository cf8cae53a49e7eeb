"""Validation refuses a chat-message dataset with a `model.preset` (the built-in character
tokenizer has no chat template), naming the data field and the fix, instead of a traceback at
launch; `validate` exits 2 with that line. Only the file's first example is read."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from trainers.config import ConfigError, parse_config
from trainers.config.checks import check_prompt_format

CHAT = json.dumps({"prompt": [{"role": "user", "content": "1+1="}], "answer": "2"}) + "\n"
PLAIN = json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n"


def raw(path, **data):
    return {
        "model": {"preset": "tiny"},
        "data": {"train_path": str(path), **data},
        "rewards": [{"name": "exact_match", "weight": 1.0}],
    }


def test_chat_prompts_with_a_preset_are_refused_naming_the_field(tmp_path):
    chat, plain = tmp_path / "chat.jsonl", tmp_path / "plain.jsonl"
    chat.write_text("\n" + CHAT + "not json: never read\n")  # a blank first line is skipped
    plain.write_text(PLAIN * 3)
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(chat))
    [problem] = caught.value.problems
    assert problem.field == "data.train_path"
    assert "chat messages" in problem.message and "model.preset 'tiny'" in problem.message
    assert "model.path" in problem.message
    with pytest.raises(ConfigError) as caught:
        parse_config(raw(plain, eval_path=str(chat)))
    assert [p.field for p in caught.value.problems] == ["data.eval_path"]
    assert parse_config(raw(plain)).data.train_path == str(plain)
    # a name given beside the path (the platform resolved it): the problem names the dataset field
    config = parse_config(raw(plain))
    config.data.train_path, config.data.train_dataset = str(chat), "mine"
    assert [p.field for p in check_prompt_format(config)] == ["data.train_dataset"]
    # an unreadable file is left to the path check and the loader
    config.data.train_path = str(tmp_path / "missing.jsonl")
    assert check_prompt_format(config) == []


def test_validate_exits_2_with_the_problem(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(CHAT * 4)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(raw(chat)))
    out = subprocess.run(
        [sys.executable, "-m", "trainers", "validate", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "data.train_path: its prompts are chat messages" in out.stderr

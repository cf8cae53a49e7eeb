"""trainers.commands.evaluate and `python -m trainers evaluate` on the tiny Hugging Face model: accuracy and
pass@k against values computed by hand from answers chosen to match (or not) the model's own greedy
completions; a dataset of the wrong shape fails with a clear message before any weight is read."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.tiny_models import write_tiny_model
from trainers import cli
from trainers.commands.evaluate import evaluate_policy_on, evaluation_examples
from trainers.config import parse_config
from trainers.data.examples import DataError

PROMPTS = ["What is 12+34?", "Tom has 3 apples.", "Anna reads 7 pages"]
WRONG = "no completion of the model ends like this 123"


def _write_jsonl(path, answers):
    path.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in zip(PROMPTS, answers)))
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model folder, a config dict naming a JSONL eval set, the model's greedy completion of each prompt)."""
    base = tmp_path_factory.mktemp("evaluate")
    model = str(write_tiny_model(base / "model"))
    data = _write_jsonl(base / "probe.jsonl", [WRONG] * 3)
    raw = {
        "model": {"path": model},
        "data": {"train_path": data, "eval_path": data, "chat_template": False},
        "rewards": [{"name": "exact_match", "weight": 1.0}],
        # top_k 1: every sample is the greedy completion, so pass@k is known by hand
        "rollout": {"max_new_tokens": 5, "top_k": 1},
        "batch": {"prompts_per_step": 2, "rollout_micro_batch_sequences": 2},
        "grpo": {"num_generations": 2},
        "eval": {"samples_per_prompt": 2},
    }
    probe = evaluate_policy_on(model, parse_config(raw))
    assert probe.metrics["accuracy"] == 0.0
    return base, model, raw, [row["completion"] for row in probe.rows]


def test_accuracy_and_pass_at_k_by_hand(setup):
    """Answers = the greedy completions of prompts 0 and 1, a wrong one for prompt 2: accuracy 2/3,
    mean exact_match reward 2/3; both samples of a prompt equal its greedy completion (top_k 1), so
    c = 2, 2, 0 of n = 2: pass@1 = pass@2 = 2/3. Progress comes per chunk of 2 prompts."""
    base, model, raw, completions = setup
    data = _write_jsonl(base / "two_right.jsonl", [completions[0], completions[1], WRONG])
    calls = []
    result = evaluate_policy_on(model, parse_config(raw), dataset=data, progress=lambda d, t: calls.append((d, t)))
    assert result.metrics["accuracy"] == pytest.approx(2 / 3)
    assert result.metrics["reward_mean"] == pytest.approx(2 / 3)
    assert result.metrics["pass@1"] == pytest.approx(2 / 3)
    assert result.metrics["pass@2"] == pytest.approx(2 / 3)
    assert [r["correct"] for r in result.rows] == [True, True, False]
    assert [r["samples_correct"] for r in result.rows] == [2, 2, 0]
    assert [r["completion"] for r in result.rows] == completions
    assert [r["prompt"] for r in result.rows] == PROMPTS
    assert calls == [(2, 3), (3, 3)]


def test_prompts_limit_and_a_task_dataset(setup):
    _, model, raw, _ = setup
    config = parse_config(raw)
    result = evaluate_policy_on(
        model, config, dataset=_write_jsonl(setup[0] / "all.jsonl", setup[3]), prompts=1, samples_per_prompt=1
    )
    assert len(result.rows) == 1 and result.metrics == {"reward_mean": 1.0, "accuracy": 1.0}
    held_out = evaluation_examples(config, "arithmetic", prompts=5)
    assert len(held_out) == 5 and all("=" in e["prompt"] for e in held_out)


def test_wrong_shape_dataset_fails_before_loading(setup, tmp_path):
    _, model, raw, _ = setup
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "2+2", "solution": "4"}) + "\n")
    with pytest.raises(DataError, match="missing 'prompt'"):
        evaluate_policy_on(model, parse_config(raw), dataset=str(bad))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="empty"):
        evaluate_policy_on(model, parse_config(raw), dataset=str(empty))


def test_cli_writes_rows_and_prints_the_summary(setup, tmp_path, capsys):
    base, model, raw, completions = setup
    config_file = tmp_path / "eval.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    data = _write_jsonl(tmp_path / "one_right.jsonl", [completions[0], WRONG, WRONG])
    out = tmp_path / "rows.jsonl"
    code = cli.main(
        ["evaluate", model, "--config", str(config_file), "--dataset", data, "--out", str(out), "--json-progress"]
    )
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert printed[:-1] == [{"progress": {"done": 2, "total": 3}}, {"progress": {"done": 3, "total": 3}}]
    summary = printed[-1]["summary"]
    assert summary["accuracy"] == pytest.approx(1 / 3) and summary["pass@2"] == pytest.approx(1 / 3)
    assert summary["prompts"] == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["correct"] for r in rows] == [True, False, False]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "2+2"}) + "\n")
    code = cli.main(["evaluate", model, "--config", str(config_file), "--dataset", str(bad), "--out", str(out)])
    assert code == cli.EXIT_INVALID
    assert "missing 'answer'" in capsys.readouterr().err

"""math_answer (math-verify), math_format, accuracy by math_answer, pass@k, and the arithmetic word
problem generator with its make-dataset command. Expected values are written out by hand."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from trainers.data.examples import read_jsonl
from trainers.data.rewards import (
    accuracy,
    boxed_answer,
    final_answer_text,
    is_correct,
    math_answer,
    math_format,
    score,
    strip_thousands_separators,
)
from trainers.data.word_problems import make_problems, make_train_eval
from trainers.loop.scoring import pass_at_k


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("So the answer is \\boxed{42}.", "42", 1.0),
        ("The total is 40 + 2.\n#### 42", "42", 1.0),
        ("First 40, then two more: 42", "42", 1.0),  # a final number
        ("\\boxed{41}, or maybe 42", "42", 0.0),  # the boxed answer wins over a later number
        ("\\boxed{\\frac{84}{2}}", "42", 1.0),  # equivalent forms count
        ("\\boxed{0.5}", "1/2", 1.0),
        ("It costs $1,200 in all.", "1200", 1.0),
        ("#### 7", "Tom has 7 apples.\n#### 7", 1.0),  # a GSM8K-style gold answer
        ("no number here", "42", 0.0),
        ("\\boxed{}", "42", 0.0),
        ("\\boxed{43}", "42", 0.0),
        ("\\boxed{9^{9^{99999}}}", "4", 0.0),  # compared as text: sympy would never finish
        # two brace levels inside \boxed: the whole box is the answer, not its last number "2"
        ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),
        ("\\boxed{\\frac{\\sqrt{3}}{2}}", "2", 0.0),
        ("\\fbox{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0),
        # commas that separate items are kept on both sides, so tuples, intervals and lists match themselves
        ("\\boxed{(1,2)}", "(1,2)", 1.0),
        ("\\boxed{(1,3)}", "(1,2)", 0.0),
        ("\\boxed{[-1, 3)}", "[-1, 3)", 1.0),
        ("\\boxed{(-1, 3)}", "[-1, 3)", 0.0),
        ("\\boxed{1, 2, 3}", "1, 2, 3", 1.0),
        ("\\boxed{1, 2, 4}", "1, 2, 3", 0.0),
        # thousands separators still go, on either side
        ("\\boxed{1234}", "1,234", 1.0),
        ("\\boxed{1,234}", "1234", 1.0),
        ("\\boxed{1,234,567}", "1234567", 1.0),
        ("\\boxed{1,235}", "1,234", 0.0),
    ],
)
def test_math_answer(completion, answer, expected):
    assert math_answer(completion, {"prompt": "q", "answer": answer}) == expected


def test_final_answer_text_and_format():
    assert final_answer_text("a \\boxed{1} b \\boxed{2}") == "2"
    assert final_answer_text("#### 1,234 then 5") == "1234"
    assert final_answer_text("none") is None
    example = {"prompt": "q", "answer": "3"}
    assert math_format("\\boxed{3}", example) == 1.0
    assert math_format("#### 3", example) == 0.0 and math_format("\\boxed{ }", example) == 0.0


def test_boxed_answer_counts_braces():
    assert boxed_answer("\\boxed{\\frac{\\sqrt{3}}{2}}") == "\\frac{\\sqrt{3}}{2}"
    assert boxed_answer("\\boxed{1} then \\fbox{2} then \\boxed {x^{2^{3}}}.") == "x^{2^{3}}"  # the last box
    assert boxed_answer("\\boxed{\\{1, 2\\}}") == "\\{1, 2\\}"  # escaped braces are not brace levels
    assert boxed_answer("\\boxed{\\boxed{7}}") == "\\boxed{7}"  # nested boxes: the outer one
    assert boxed_answer("\\boxed{1} and \\boxed{\\frac{2}{3}") == "1"  # an unclosed box does not count
    assert boxed_answer("no box") is None and boxed_answer("\\boxed{ }") is None
    assert math_format("\\boxed{\\frac{\\sqrt{3}}{2}}", {"prompt": "q", "answer": "1"}) == 1.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,234", "1234"),
        ("1,234,567", "1234567"),
        ("-1,234.5", "-1234.5"),
        ("$1,200 and 3,000", "$1200 and 3000"),
        ("1, 2, 3", "1, 2, 3"),
        ("(1,2)", "(1,2)"),
        ("[-1, 3)", "[-1, 3)"),
        ("1,2345", "1,2345"),
        ("12,34", "12,34"),
        ("1,234,5", "1,234,5"),
        ("0.123,456", "0.123,456"),
        ("1234,567", "1234,567"),
    ],
)
def test_strip_thousands_separators(text, expected):
    assert strip_thousands_separators(text) == expected


def test_accuracy_follows_math_answer_when_it_is_a_reward():
    example = {"prompt": "q", "answer": "1/2"}
    assert not is_correct("\\boxed{0.5}", example)  # exact / numeric match say no
    _, components = score(["\\boxed{0.5}"], [example], [("math_answer", 1.0), ("math_format", 0.1)])
    assert accuracy(["\\boxed{0.5}"], [example], components).tolist() == [True]
    _, components = score(["\\boxed{0.5}"], [example], [("numeric_match", 1.0)])
    assert accuracy(["\\boxed{0.5}"], [example], components).tolist() == [False]


def test_pass_at_k_by_hand():
    """n = 3 samples; correct counts c = 1, 0, 3, 1. The unbiased estimate 1 - C(n-c, k)/C(n, k):
    k=1: c/n = 1/3, 0, 1, 1/3 -> 5/12; k=2: 1 - C(2,2)/C(3,2) = 2/3, 0, 1, 2/3 -> 7/12;
    k=3 = n: any correct -> 3/4."""
    correct = np.array([[False, False, True], [False, False, False], [True, True, True], [False, True, False]])
    assert pass_at_k(correct, 1) == pytest.approx(5 / 12)
    assert pass_at_k(correct, 2) == pytest.approx(7 / 12)
    assert pass_at_k(correct, 3) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        pass_at_k(correct, 4)


def test_word_problems_are_correct_distinct_and_held_out():
    train, held_out = make_train_eval(3, 400, 100)
    assert len(train) == 400 and len(held_out) == 100
    assert len({r["prompt"] for r in train}) == 400
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held_out}
    for row in train + held_out:
        numbers = [int(n) for n in re.findall(r"\d+", row["expression"])]
        assert [int(n) for n in re.findall(r"\d+", row["prompt"])] == numbers  # the story states them in order
        value = eval(row["expression"].replace("/", "//"))  # noqa: S307 - digits and + - * // only
        assert row["answer"] == str(value) and value > 0
        if "/" in row["expression"]:
            assert numbers[0] % numbers[1] == 0
    assert make_problems(3, 10) == train[:10]  # deterministic in the seed
    assert make_problems(4, 10) != train[:10]


def test_make_dataset_command(tmp_path):
    out = tmp_path / "words.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers",
            "make-dataset",
            "arithmetic-words",
            "--out",
            str(out),
            "--count",
            "50",
            "--eval-count",
            "20",
            "--seed",
            "7",
        ],
        check=True,
        cwd=tmp_path.parent,
        env={"PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[3])},
    )
    train, held_out = read_jsonl(str(out)), read_jsonl(str(tmp_path / "words.eval.jsonl"))
    assert (len(train), len(held_out)) == (50, 20)
    assert train == [json.loads(json.dumps(r)) for r in make_train_eval(7, 50, 20)[0]]


def test_a_run_on_word_problems_reports_math_accuracy_and_pass_at_k(tmp_path):
    from trainers.config import parse_config
    from trainers.data.word_problems import write_jsonl
    from trainers.loop.trainer import train
    from trainers.step.hooks import Hooks

    train_rows, eval_rows = make_train_eval(0, 16, 4)
    write_jsonl(str(tmp_path / "train.jsonl"), train_rows)
    write_jsonl(str(tmp_path / "eval.jsonl"), eval_rows)
    config = parse_config(
        {
            "model": {"preset": "tiny"},
            "data": {
                "train_path": str(tmp_path / "train.jsonl"),
                "eval_path": str(tmp_path / "eval.jsonl"),
                "max_prompt_tokens": 160,
            },
            "rewards": [{"name": "math_answer", "weight": 1.0}, {"name": "math_format", "weight": 0.1}],
            "rollout": {"max_new_tokens": 8},
            "batch": {"prompts_per_step": 2},
            "grpo": {"num_generations": 2, "beta": 0.0},
            "train": {"max_steps": 1},
            "checkpoint": {"every_steps": 0},
            "eval": {"every_steps": 1, "samples_per_prompt": 3, "pass_k": 2},
        }
    )
    steps = []

    class Record(Hooks):
        def on_step(self, step, metrics):
            steps.append(metrics)

    train(config, str(tmp_path / "run"), Record())
    (metrics,) = steps
    assert 0.0 <= metrics["eval/pass@1"] <= metrics["eval/pass@2"] <= 1.0 and 0.0 <= metrics["eval/accuracy"] <= 1.0
    assert "eval/pass@3" not in metrics  # k is eval.pass_k, in the name
    assert metrics["reward/mean"] >= 0.0

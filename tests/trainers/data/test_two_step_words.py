"""The arithmetic_words_two_step task: every problem adds and subtracts twice, answers are right,
train and held-out prompts are disjoint, and the mixed arithmetic_words task draws what it drew before."""

import re

from trainers.data import rewards, tasks
from trainers.data.word_problems import make_problems, make_train_eval


def test_two_step_problems_are_two_step_correct_and_held_out():
    train, held_out = make_train_eval(5, 300, 100, two_step_only=True)
    assert len({r["prompt"] for r in train}) == 300
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held_out}
    shapes = set()
    for row in train + held_out:
        a, op1, b, op2, c = row["expression"].split()
        shapes.add(op1 + op2)
        assert [int(n) for n in re.findall(r"\d+", row["prompt"])] == [int(a), int(b), int(c)]
        first = int(a) + int(b) if op1 == "+" else int(a) - int(b)
        value = first - int(c) if op2 == "-" else first + int(c)
        assert first > 0 and value > 0 and row["answer"] == str(value)
    assert shapes == {"+-", "-+"}  # both templates occur


def test_the_task_is_registered_and_scored_by_math_answer():
    task = tasks.get_task("arithmetic_words_two_step")
    assert task.default_rewards == [("math_answer", 1.0)]
    examples = task.make_examples(0, 20)
    assert examples == make_problems(0, 20, two_step_only=True)
    assert all(rewards.is_correct(f"So the answer is {e['answer']}.", e) for e in examples)
    train, held_out = tasks.make_train_eval("arithmetic_words_two_step", 0, 50, 20)
    assert not {e["prompt"] for e in train} & {e["prompt"] for e in held_out}


def test_the_mixed_task_is_unchanged():
    # The first problems of seed 0, as drawn before the two-step task was added.
    rows = make_problems(0, 3)
    assert [r["expression"] for r in rows] == EXPECTED_MIXED_SEED0


EXPECTED_MIXED_SEED0 = ["13 - 1", "27 + 18 - 43", "17 + 24 - 28"]


def test_the_hard_task_is_about_four_in_five_two_step_and_correct():
    rows = tasks.get_task("arithmetic_words_hard").make_examples(0, 2000)
    assert rows == make_problems(0, 2000, mostly_two_step=True)
    two_step = sum(len(r["expression"].split()) == 5 for r in rows)
    # P(two-step) = 3/4 + 1/4 x 1/5 (the mixed draw's own two-step template) = 0.8
    assert abs(two_step / len(rows) - 0.8) < 0.03
    assert all(rewards.is_correct(f"So the answer is {r['answer']}.", r) for r in rows)
    train, held_out = tasks.make_train_eval("arithmetic_words_hard", 0, 200, 50)
    assert not {e["prompt"] for e in train} & {e["prompt"] for e in held_out}

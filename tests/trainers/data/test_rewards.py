"""Tests for trainers/data/rewards.py, values computed by hand."""

from fractions import Fraction

import numpy as np
import pytest

from trainers.data import rewards
from trainers.data.rewards import (
    alphabet_match,
    char_overlap,
    countdown,
    countdown_partial,
    countdown_value,
    exact_match,
    gsm8k_answer,
    gsm8k_format,
    is_correct,
    numeric_match,
    prefix_match,
    score,
)


def ex(answer, **extra):
    return {"prompt": "p=", "answer": answer, **extra}


CD = ex("3*5+7", numbers=[3, 5, 7], target=22)


def test_exact_match():
    assert exact_match("32", ex("32")) == 1.0
    assert exact_match("  32\n", ex("32")) == 1.0
    assert exact_match("320", ex("32")) == 0.0
    assert exact_match("", ex("32")) == 0.0


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("dcba", 1.0),
        ("dcb", 3 / 4),  # 3 matches / max(3, 4)
        ("dxba", 3 / 4),  # d, b, a match
        ("dcbaa", 4 / 5),  # 4 matches / max(5, 4): overlong is penalised
        ("dcbaxxxx", 4 / 8),
        ("abcd", 0.0),
        ("d", 1 / 4),
        ("", 0.0),
        (" dc ", 2 / 4),  # stripped
    ],
)
def test_prefix_match(completion, expected):
    assert prefix_match(completion, ex("dcba")) == pytest.approx(expected)


def test_prefix_match_empty_answer():
    assert prefix_match("", ex("")) == 1.0
    assert prefix_match("x", ex("")) == 0.0


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("57", "32", 1.0),  # both digits, right length
        ("5", "32", 1 / 2),
        ("5x", "32", 1 / 2),
        ("5789", "32", 2 / 4),  # min(4, 2) / max(4, 2)
        ("abc", "32", 0.0),
        ("zzzz", "dcba", 1.0),
        ("zZ1", "dcba", 1 / 4),
        ("", "dcba", 0.0),
        ("1+2", "3*5+7", 3 / 5),  # alphabet of "3*5+7": digits, "*", "+"
    ],
)
def test_alphabet_match(completion, answer, expected):
    assert alphabet_match(completion, ex(answer)) == pytest.approx(expected)


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("abcd", 1.0),  # same characters, any order
        ("aabb", 2 / 4),  # one a and one b count
        ("dcbaxy", 4 / 6),
        ("d", 1 / 4),
        ("xyz", 0.0),
        ("", 0.0),
    ],
)
def test_char_overlap(completion, expected):
    assert char_overlap(completion, ex("dcba")) == pytest.approx(expected)
    assert char_overlap("", ex("")) == 1.0


def test_answer_alphabet():
    assert rewards.answer_alphabet("32") == frozenset("0123456789")
    assert rewards.answer_alphabet("a-B") == frozenset("abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOPQRSTUVWXYZ")


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("32", "32", 1.0),
        ("the answer is 32", "32", 1.0),
        ("31 no, 32", "32", 1.0),  # last number counts
        ("32 no, 31", "32", 0.0),
        ("32.0", "32", 1.0),
        ("1,200", "1200", 1.0),
        ("-4", "-4", 1.0),
        ("no number", "32", 0.0),
        ("32", "dcba", 0.0),  # answer is not numeric
        ("so 72", "Natalia sold 48/2 = 24 clips.\n#### 72", 1.0),
    ],
)
def test_numeric_match(completion, answer, expected):
    assert numeric_match(completion, ex(answer)) == expected


def test_gsm8k_format():
    assert gsm8k_format("reasoning... #### 72", ex("72")) == 1.0
    assert gsm8k_format("####72", ex("72")) == 1.0
    assert gsm8k_format("#### $1,200", ex("1200")) == 1.0
    assert gsm8k_format("the answer is 72", ex("72")) == 0.0
    assert gsm8k_format("#### seventy-two", ex("72")) == 0.0
    assert gsm8k_format("### 72", ex("72")) == 0.0


def test_gsm8k_answer():
    gsm8k = ex("Natalia sold 48/2 = 24 clips in May.\n#### 72")
    assert gsm8k_answer("48 + 24 = 72\n#### 72", gsm8k) == 1.0
    assert gsm8k_answer("#### 72", ex("72")) == 1.0
    assert gsm8k_answer("#### 1,200", ex("#### 1200")) == 1.0
    assert gsm8k_answer("#### 71 ... #### 72", gsm8k) == 1.0  # the last marker counts
    assert gsm8k_answer("#### 72 ... #### 71", gsm8k) == 0.0
    assert gsm8k_answer("72", gsm8k) == 0.0  # no marker
    assert gsm8k_answer("#### 24", gsm8k) == 0.0
    assert gsm8k_answer("#### 72", ex("abc")) == 0.0


def test_answer_number():
    assert rewards.answer_number("32") == 32
    assert rewards.answer_number(" -4.5 ") == Fraction(-9, 2)
    assert rewards.answer_number("text\n#### 1,000") == 1000
    assert rewards.answer_number("dcba") is None
    assert rewards.answer_number("3 apples") is None


@pytest.mark.parametrize(
    "completion",
    ["3*5+7", " 3*5+7 ", "7+5*3", "(3*5)+7", "5*3+7", "(7+5*3)"],
)
def test_countdown_valid(completion):
    assert countdown(completion, CD) == 1.0
    assert countdown_partial(completion, CD) == 1.0
    assert is_correct(completion, CD)


@pytest.mark.parametrize(
    "completion, why",
    [
        ("3*5+7+3", "3 used twice"),
        ("3+5+7", "evaluates to 15"),
        ("22", "22 is not a given number"),
        ("3*5+7=22", "'=' not allowed"),
        ("__import__('os')", "names not allowed"),
        ("3*5+7 if 1 else 0", "letters not allowed"),
        ("3**5", "power not allowed"),
        ("-3+25", "unary minus / 25 not given"),
        ("7/(5-5)", "division by zero (and 5 reused)"),
        ("(3*5+7", "syntax error"),
        ("", "empty"),
        ("3.0*5+7", "'.' not allowed"),
        ("3*5\n+7", "newline inside"),
        ("(" * 150 + "3" + ")" * 150, "too deep/long"),
    ],
)
def test_countdown_invalid(completion, why):
    assert countdown(completion, CD) == 0.0, why
    assert not is_correct(completion, CD), why


def test_countdown_division_is_exact():
    example = ex("8/4+1", numbers=[1, 4, 8], target=3)
    assert countdown("8/4+1", example) == 1.0
    assert countdown("3/4*8+1", ex("", numbers=[1, 3, 4, 8], target=7)) == 1.0  # 3/4 * 8 = 6 exactly
    assert countdown_value("4/8", [4, 8]) == Fraction(1, 2)
    assert countdown("(8+1)/4", ex("", numbers=[1, 4, 8], target=2)) == 0.0  # 9/4 != 2


def test_countdown_repeated_numbers_in_example():
    example = ex("5*5", numbers=[5, 5, 2], target=25)
    assert countdown("5*5", example) == 1.0
    assert countdown("5*5*5", ex("", numbers=[5, 5, 2], target=125)) == 0.0


def test_countdown_partial_values():
    # 3+5+7 = 15: 0.25 + 0.75 * (1 - 7/22)
    assert countdown_partial("3+5+7", CD) == pytest.approx(0.25 + 0.75 * (1 - 7 / 22))
    # 3*5*7 = 105: |105 - 22| / 22 > 1 -> closeness 0
    assert countdown_partial("3*5*7", CD) == pytest.approx(0.25)
    assert countdown_partial("7", CD) == pytest.approx(0.25 + 0.75 * (1 - 15 / 22))
    assert countdown_partial("9", CD) == 0.0
    assert countdown_partial("3+3", CD) == 0.0


def test_countdown_requires_fields():
    with pytest.raises(ValueError, match="numbers"):
        countdown("3+4", ex("7"))


def test_countdown_accepts_string_target():
    assert countdown("3*5+7", ex("", numbers=[3, 5, 7], target="22")) == 1.0


def test_is_correct_non_countdown():
    assert is_correct("dcba", ex("dcba"))
    assert not is_correct("dcb", ex("dcba"))
    assert is_correct("32", ex("32"))
    assert is_correct("= 32", ex("32"))
    assert is_correct("so #### 72", ex("reasoning\n#### 72"))
    assert not is_correct("33", ex("32"))


def test_all_rewards_in_unit_interval():
    completions = ["", "32", "dcba", "#### 72", "3*5+7", "x" * 30, "\ufffd\ufffd"]
    examples = [ex("32"), ex("dcba"), ex("a\n#### 72"), CD]
    for name in rewards.REWARDS:
        reward_fn = rewards.REWARDS[name]
        if rewards.REWARDS.get(name).meta.get("batched"):  # code_tests: tests/trainers/data/test_code_rewards.py
            continue
        for example in examples:
            if name.startswith("countdown") and "numbers" not in example:
                continue
            for completion in completions:
                assert 0.0 <= reward_fn(completion, example) <= 1.0, (name, completion)


def test_score_weighting():
    completions = ["32", "3", "99", "320"]
    examples = [ex("32")] * 4
    total, components = score(completions, examples, [("exact_match", 1.0), ("prefix_match", 0.5)])
    assert total.dtype == np.float32 and total.shape == (4,)
    np.testing.assert_allclose(components["exact_match"], [1, 0, 0, 0])
    np.testing.assert_allclose(components["prefix_match"], [1, 0.5, 0, 2 / 3], rtol=1e-6)
    np.testing.assert_allclose(total, [1.5, 0.25, 0, 1 / 3], rtol=1e-6)
    assert set(components) == {"exact_match", "prefix_match"}
    assert all(values.dtype == np.float32 for values in components.values())


def test_score_rejects_bad_specs():
    with pytest.raises(ValueError, match="unknown reward"):
        score(["1"], [ex("1")], [("nope", 1.0)])
    with pytest.raises(ValueError, match="twice"):
        score(["1"], [ex("1")], [("exact_match", 1.0), ("exact_match", 2.0)])
    with pytest.raises(ValueError, match="empty"):
        score(["1"], [ex("1")], [])
    with pytest.raises(ValueError, match="completions"):
        score(["1", "2"], [ex("1")], [("exact_match", 1.0)])


def test_reward_names():
    assert rewards.REWARDS.names() == (
        "exact_match",
        "prefix_match",
        "alphabet_match",
        "char_overlap",
        "numeric_match",
        "gsm8k_format",
        "gsm8k_answer",
        "countdown",
        "countdown_partial",
        "math_answer",
        "math_format",
        "code_tests",
        "judge",
    )
    assert rewards.REWARDS["countdown"] is rewards.countdown

"""The code_tests reward and the python_functions task: code blocks found, tests run in the sandbox,
the fraction passed, and problems whose reference solutions pass their own tests."""

from collections import Counter

import numpy as np
import pytest

from trainers.data import rewards
from trainers.data.rewards import accuracy, code_of, score
from trainers.data.tasks import make_train_eval

EXAMPLE = {
    "prompt": "Write a Python function clamp(x) that returns x limited to the range from -3 to 5.",
    "answer": "",
    "tests": [
        "assert clamp(0) == 0",
        "assert clamp(-10) == -3",
        "assert clamp(9) == 5",
        "assert clamp(5) == 5",
        "assert clamp(-3) == -3",
    ],
}


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("Sure:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1\n"),
        ("```\nx = 2\n```", "x = 2\n"),
        ("```py\ny = 3\n", "y = 3\n"),  # cut off before the closing fence
        ("def g(): pass", "def g(): pass"),  # no fence: the whole completion
        ("```python\na = 1\n```\n```python\nb = 2\n```", "a = 1\n"),  # the first block
    ],
)
def test_the_code_of_a_completion(completion, code):
    assert code_of(completion) == code


def test_code_tests_scores_the_fraction_of_tests_passed():
    completions = [
        "```python\ndef clamp(x):\n    return min(max(x, -3), 5)\n```",  # all 5
        "```python\ndef clamp(x):\n    return min(x, 5)\n```",  # 4 of 5: no lower bound
        "```python\ndef clamp(x):\n    return 0\n```",  # only clamp(0) == 0
        "```python\nimport os\nos._exit(0)\n```",  # an early exit passes nothing
        "```python\ndef clamp(x):\n    while True:\n        pass\n```",  # every test times out
    ]
    total, components = score(completions, [EXAMPLE] * 5, [("code_tests", 1.0)])
    # min(x, 5): clamp(0)=0 yes, clamp(-10)=-10 no, clamp(9)=5 yes, clamp(5)=5 yes, clamp(-3)=-3 yes
    np.testing.assert_allclose(components["code_tests"], [1.0, 0.8, 0.2, 0.0, 0.0])
    np.testing.assert_allclose(total, components["code_tests"])
    assert accuracy(completions, [EXAMPLE] * 5, components).tolist() == [True, False, False, False, False]


def test_a_machine_without_the_sandbox_fails_the_run_instead_of_scoring_zeros(monkeypatch):
    from trainers.sandbox.runner import Outcome

    class Unavailable:
        def run_many(self, programs):
            return [Outcome(error="the sandbox cannot isolate code here: unshare: Operation not permitted")] * len(
                programs
            )

    monkeypatch.setattr(rewards, "_SANDBOX", Unavailable())
    with pytest.raises(RuntimeError, match="code_tests: the sandbox cannot isolate code here: unshare"):
        score(["x = 1"], [EXAMPLE], [("code_tests", 1.0)])


def test_python_functions_problems_pass_their_own_reference_and_not_a_constant():
    train, evaluation = make_train_eval("python_functions", 3, 40, 10)
    assert not {e["prompt"] for e in train} & {e["prompt"] for e in evaluation}
    assert train == make_train_eval("python_functions", 3, 40, 10)[0]  # deterministic
    examples = train[:16]
    for e in examples:
        assert len(e["tests"]) == 5 and all(t.startswith(f"assert {e['entry_point']}(") for t in e["tests"])
        assert e["prompt"].startswith(f"Write a Python function {e['entry_point']}(")
    references, _ = score([e["answer"] for e in examples], examples, [("code_tests", 1.0)])
    assert references.tolist() == [1.0] * len(examples)
    constant = [f"def {e['entry_point']}(*args):\n    return None\n" for e in examples]
    nothing, _ = score(constant, examples, [("code_tests", 1.0)])
    assert nothing.tolist() == [0.0] * len(examples)


def test_python_functions_keeps_every_kind_of_problem_at_a_training_set_of_thousands():
    # Prompts are unique, so a kind with few distinct prompts runs out and the rest fill the set: before
    # the constants' ranges were widened, 2,000 training prompts were over half clamp problems.
    from trainers.data.code_problems import TEMPLATES

    train, evaluation = make_train_eval("python_functions", 0, 2000, 100)
    kind_of = {name: template.names[0] for template in TEMPLATES for name in template.names}
    counts = Counter(kind_of[e["entry_point"]] for e in train)
    assert set(counts) == set(kind_of.values())
    assert max(counts.values()) <= 2 * len(train) / len(TEMPLATES)  # none above twice its even share
    assert min(counts.values()) >= len(train) / len(TEMPLATES) / 2


def test_each_tests_result_comes_back_as_the_rewards_details():
    from trainers.data.rewards import score_with_details

    completion = "```python\ndef clamp(x):\n    return min(x, 5)\n```"
    total, _, details = score_with_details([completion], [EXAMPLE], [("code_tests", 1.0), ("exact_match", 0.0)])
    assert total.tolist() == [pytest.approx(0.8)]
    (found,) = details
    assert list(found) == ["code_tests"]  # exact_match gives no details
    assert found["code_tests"][1] == {"test": "assert clamp(-10) == -3", "passed": False, "reason": "AssertionError"}
    assert [t["passed"] for t in found["code_tests"]] == [True, False, True, True, True]
    assert score_with_details(["1"], [{"answer": "1"}], [("exact_match", 1.0)])[2] is None


def test_is_correct_runs_a_code_examples_tests():
    from trainers.data.rewards import is_correct

    assert is_correct("```python\ndef clamp(x):\n    return min(max(x, -3), 5)\n```", EXAMPLE)
    assert not is_correct("```python\ndef clamp(x):\n    return min(x, 5)\n```", EXAMPLE)  # 4 of 5

"""The code_tests reward and the python_functions task: code blocks found, tests run in the sandbox,
the fraction passed, and problems whose reference solutions pass their own tests."""

import ast
from collections import Counter

import numpy as np
import pytest

from trainers.data import rewards
from trainers.data.code_problems import TESTS_PER_PROBLEM
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
        ("```python\na = 1\n```\n```python\nb = 2\n```", "b = 2\n"),  # the last block
        # a tag other than python or py: the closing fence used to open a block of the prose after it
        ("```python3\nx = 1\n```\nThis prints nothing.", "x = 1\n"),
        ("```PY3\nx = 1\n```", "x = 1\n"),  # any case
        ("  ```  Python \nx = 1\n  ```  \n", "x = 1\n"),  # spaces around the fence and its tag
        ("```python\r\nx = 1\r\n```\r\nDone.", "x = 1\r\n"),  # CRLF line ends
        ("Output:\n```text\n1 2 3\n```\nCode:\n```python\nprint(1)\n```\nOK", "print(1)\n"),  # text skipped
        ("```python\nprint(1)\n```\nIt prints:\n```text\n1\n```", "print(1)\n"),  # the last Python one
        ("```text\nhi\n```\n```py\nx = 1", "x = 1"),  # the last block, cut off
        ("Run:\n```bash\nrm -rf ~\n```\nThen look.", ""),  # fenced, but no Python: nothing runs
        ("```sh\nls\n", ""),  # an unclosed block of another language
        ("Use ```python``` blocks.\nx = 1", "Use ```python``` blocks.\nx = 1"),  # no fence line: all of it
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
        assert len(e["tests"]) == TESTS_PER_PROBLEM
        assert all(t.startswith(f"assert {e['entry_point']}(") for t in e["tests"])
        assert e["prompt"].startswith(f"Write a Python function {e['entry_point']}(")
    references, _ = score([e["answer"] for e in examples], examples, [("code_tests", 1.0)])
    assert references.tolist() == [1.0] * len(examples)
    constant = [f"def {e['entry_point']}(*args):\n    return None\n" for e in examples]
    nothing, _ = score(constant, examples, [("code_tests", 1.0)])
    assert nothing.tolist() == [0.0] * len(examples)


def test_no_constant_program_does_well_on_python_functions():
    # A policy reads the prompt, so it can return the best constant for each problem: its most frequent
    # expected value, passing that value's share of the tests. With five tests whose inputs were drawn
    # blindly (divisible(n) by 180: all five False) that share averaged 0.448 on these 500; now a bool is True in
    # half of a problem's tests and False in the other half, any other value in one test only.
    train, evaluation = make_train_eval("python_functions", 0, 400, 100)
    best = []
    for e in train + evaluation:
        namespace = {}
        exec(code_of(e["answer"]), namespace)  # the reference solution, generated here
        expected = []
        for test in e["tests"]:  # each exactly `assert <call> == <literal>`, the reference's value there
            (statement,) = ast.parse(test).body
            assert isinstance(statement, ast.Assert) and statement.msg is None
            compare = statement.test
            assert isinstance(compare, ast.Compare) and [type(op) for op in compare.ops] == [ast.Eq]
            call = compare.left
            assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords
            assert call.func.id == e["entry_point"]
            value = ast.literal_eval(compare.comparators[0])
            got = namespace[e["entry_point"]](*[ast.literal_eval(a) for a in call.args])
            assert type(got) is type(value) and got == value
            expected.append(repr(value))
        counts = Counter(expected)
        assert len(expected) == TESTS_PER_PROBLEM and len(counts) > 1
        if type(value) is bool:
            assert counts == {"True": 5, "False": 5}
        else:
            assert max(counts.values()) == 1
        best.append(max(counts.values()) / len(expected))
    booleans = sum(share == 0.5 for share in best)
    assert 0 < booleans < len(best)  # divisible and starts_with, two kinds of ten
    assert np.mean(best) == pytest.approx((0.5 * booleans + 0.1 * (len(best) - booleans)) / len(best))
    assert np.mean(best) <= 0.2


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
    assert found["code_tests"][1] == {
        "test": "assert clamp(-10) == -3",
        "passed": False,
        "reason": "AssertionError: expected -3, got -10",
        "checked": "outside",  # the value clamp(-10) had in the sandbox, compared with -3 out of its reach
    }
    assert [t["passed"] for t in found["code_tests"]] == [True, False, True, True, True]
    assert score_with_details(["1"], [{"answer": "1"}], [("exact_match", 1.0)])[2] is None


def test_is_correct_runs_a_code_examples_tests():
    from trainers.data.rewards import is_correct

    assert is_correct("```python\ndef clamp(x):\n    return min(max(x, -3), 5)\n```", EXAMPLE)
    assert not is_correct("```python\ndef clamp(x):\n    return min(x, 5)\n```", EXAMPLE)  # 4 of 5

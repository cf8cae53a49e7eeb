"""Which tests are compared outside the sandbox, what crosses its boundary, and the verdicts: pure,
against hand-written statements and values."""

import json

import pytest

from trainers.commands import sandbox as sandbox_command
from trainers.sandbox import checks
from trainers.sandbox.child import plain


@pytest.mark.parametrize(
    ("test", "expression", "op", "expected", "message"),
    [
        ("assert add(1, 2) == 3", "add(1, 2)", "==", 3, ""),
        ("assert 3 == add(1, 2)", "add(1, 2)", "==", 3, ""),
        ("assert f('x') != 'y', 'differs'", "f('x')", "!=", "y", "differs"),
        ("assert pair() == (1, [2, {'a': None}])", "pair()", "==", (1, [2, {"a": None}]), ""),
        ("assert g(0) is None", "g(0)", "is", None, ""),
        ("assert g(0) is not True", "g(0)", "is not", True, ""),
        ("assert is_prime(7)", "is_prime(7)", "truthy", None, ""),
        ("assert not is_prime(8)", "is_prime(8)", "falsy", None, ""),
        ("assert f(-1) == -1.5", "f(-1)", "==", -1.5, ""),
    ],
)
def test_tests_of_the_listed_forms_are_compared_outside(test, expression, op, expected, message):
    check = checks.parse(test)
    assert (check.expression, check.op, check.expected, check.message) == (expression, op, expected, message)
    assert check.job() == {"expression": expression}  # the expected value never enters the sandbox


@pytest.mark.parametrize(
    "test",
    [
        "assert f(1) == g(1)",  # no literal side
        "assert (f(1) == 2) == True",  # the comparison would run inside
        "assert f(1) == 2 and f(2) == 3",  # an `and` would run inside
        "assert not f(1) == 2",
        "assert f(1) < 3",
        "assert f(1) is 3",  # `is` only with None, True, False
        "assert f(1) == 2, message",  # a message that is not a literal string
        "x = f(1)\nassert x == 2",  # two statements
        "f(1)",
        "assert 1 == 1",  # nothing of the code's
        "def broken(",
    ],
)
def test_other_statements_run_inside(test):
    check = checks.parse(test)
    assert not check.outside and check.job() == {"statement": test}


@pytest.mark.parametrize(
    ("test", "value", "verdict"),
    [
        ("assert f() == 3", 3, (True, "")),
        ("assert f() == 3", 3.0, (True, "")),  # as Python compares them
        ("assert f() == 3", 4, (False, "AssertionError: expected 3, got 4")),
        ("assert f() == (1, 2)", [1, 2], (False, "AssertionError: expected (1, 2), got [1, 2]")),
        ("assert f() == 'a', 'the letter a'", "b", (False, "AssertionError: the letter a")),
        ("assert f() != 3", 3, (False, "AssertionError: expected anything but 3, got 3")),
        ("assert f() is None", 0, (False, "AssertionError: expected None, got 0")),
        ("assert f() is True", 1, (False, "AssertionError: expected True, got 1")),
        ("assert f()", [], (False, "AssertionError: expected a true value, got []")),
        ("assert not f()", "", (True, "")),
    ],
)
def test_verdicts_follow_python_on_plain_values(test, value, verdict):
    assert checks.parse(test).verdict(value) == verdict


@pytest.mark.parametrize(
    "value",
    [None, True, 3, -2.5, "é", [1, [2]], (1, (2,)), {"a": (1,), 2: [3]}, {1, "x"}, frozenset({4}), b"\x00\xff", ()],
)
def test_plain_values_cross_the_boundary_unchanged(value):
    decoded = checks.decode(json.loads(json.dumps(plain(value))))
    assert decoded == value and type(decoded) is (set if type(value) is frozenset else type(value))


def test_anything_else_is_not_plain():
    class Anything:
        def __eq__(self, other):
            return True

    class Int(int):
        pass

    for value in (Anything(), Int(3), [1, Int(2)], {"k": object()}, 1j):
        with pytest.raises(TypeError, match="not a plain value"):
            plain(value)
    nested: list = []
    nested.append(nested)
    with pytest.raises(TypeError, match="nested too deeply"):
        plain(nested)
    for data in ({"object": 1}, {"tuple": 1}, {"bytes": "zz"}, {"set": [[1]]}, {"a": 1, "b": 2}):
        with pytest.raises(checks.NotPlain):
            checks.decode(data)


def test_the_sandbox_command_reports_each_test(tmp_path, capsys):
    program = tmp_path / "add.py"
    program.write_text("def add(a, b):\n    return a + b\n")
    tests = ["assert add(1, 2) == 3", "assert add(1, 1) == 3", "for i in range(3):\n    assert add(i, 0) == i"]
    from trainers.cli import main

    assert main(["sandbox", str(program), *[f"--test={t}" for t in tests], "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "results": [
            {"test": tests[0], "passed": True, "reason": "", "checked": "outside"},
            {"test": tests[1], "passed": False, "reason": "AssertionError: expected 3, got 2", "checked": "outside"},
            {"test": tests[2], "passed": True, "reason": "", "checked": "inside"},
        ],
        "error": None,
    }
    assert main(["sandbox", str(program), "--test", tests[0]]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "pass  assert add(1, 2) == 3  (compared outside the sandbox)",
        "1 of 1 tests passed",
    ]
    assert main(["sandbox", str(program)]) == 2 and "no test given" in capsys.readouterr().err
    report = {"results": [], "error": "the sandbox cannot isolate code here: no bwrap"}
    assert sandbox_command.exit_status(report) == 2
    assert sandbox_command.lines(report) == ["sandbox: the sandbox cannot isolate code here: no bwrap"]

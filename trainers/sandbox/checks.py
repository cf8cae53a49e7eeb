"""Tests the sandbox checks outside the code's reach, and the plain values that cross its boundary.

Code in the sandbox runs in the same process as whatever reports its result, so in there nothing is
unforgeable: it can replace `exec`, read the harness's frames, or write a made-up answer to the
result pipe. A test of the form `assert <expression> <op> <literal>` is therefore split: the sandbox
evaluates only the expression and sends back its value as plain data; the literal never enters the
sandbox, and the comparison runs here. Code that wants to pass must produce the right value; an
object whose `__eq__` always answers True is not plain data and fails.

The forms checked outside (`Check.outside`):

    assert EXPR == LITERAL      assert LITERAL == EXPR      assert EXPR != LITERAL
    assert EXPR is None / True / False       assert EXPR is not None / True / False
    assert EXPR                 assert not EXPR             (truth of the plain value)

each with an optional message (`assert ..., "why"`), where EXPR is not itself a comparison or an
`and`/`or` (those would run inside, through the code's own `__eq__`). LITERAL is anything `ast.literal_eval` reads:
numbers, strings, bytes, True/False/None, tuples, lists, dicts and sets of those. Any other
statement runs inside the sandbox as before and passes when it runs to its end; its result says
`checked: "inside"`.

Plain values cross the boundary as JSON (`encode`, in the sandbox's child, which repeats the same
few lines since it may import nothing of this project; `decode` here): None, bool, int, float and
str as themselves, lists as lists; tuples, dicts, sets and bytes tagged so that nothing changes
type: {"tuple": [...]}, {"dict": [[key, value], ...]}, {"set": [...]}, {"bytes": "hex"}.

Pure: tests call these with hand-written statements and values.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

VALUE_CHARS = 120
"""How much of an expected or actual value a failure's reason shows."""

_NAMED_CONSTANTS = (None, True, False)


@dataclasses.dataclass(frozen=True)
class Check:
    """One test as the sandbox runs it. `expression` set: evaluated inside, compared here with `op`
    against `expected`; else `statement` runs inside and passes when it ends."""

    source: str
    expression: str = ""
    op: str = ""
    expected: Any = None
    message: str = ""

    @property
    def outside(self) -> bool:
        return bool(self.expression)

    def job(self) -> dict:
        """What the sandbox's child is sent: never the expected value."""
        return {"expression": self.expression} if self.outside else {"statement": self.source}

    def verdict(self, value: Any) -> tuple[bool, str]:
        """Whether the plain `value` the sandbox sent passes this check, and the reason when not."""
        try:
            passed = _compare(self.op, value, self.expected)
        except TypeError as exc:  # e.g. an unhashable key in a decoded set
            return False, f"the value could not be compared: {exc}"
        if passed:
            return True, ""
        if self.message:
            return False, f"AssertionError: {self.message}"
        return False, f"AssertionError: {_expectation(self.op, self.expected)}, got {_shown(value)}"


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _computed(node: ast.expr) -> bool:
    """Whether an expression is one whose value the code computes but whose top is not itself a
    comparison or a boolean operation (those would run the code's own `__eq__` or `__bool__`
    inside, where an answer can be forged) nor a literal (nothing of the code's to check)."""
    return not isinstance(node, (ast.Compare, ast.BoolOp)) and not _literal(node)[0]


def parse(source: str) -> Check:
    """The Check for a test statement (module docstring): outside when it has one of the forms
    there, else a statement run inside."""
    inside = Check(source=source)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return inside  # the child reports the syntax error as the test's failure
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return inside
    node = tree.body[0]
    message = ""
    if node.msg is not None:
        ok, message = _literal(node.msg)
        if not ok or not isinstance(message, str):
            return inside
    test = node.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.NotEq)):
            symbol = "==" if isinstance(op, ast.Eq) else "!="
            for expression, literal in ((left, right), (right, left)):
                ok, expected = _literal(literal)
                if ok and _computed(expression):
                    return Check(source, ast.unparse(expression), symbol, expected, message)
            return inside
        if isinstance(op, (ast.Is, ast.IsNot)):
            ok, expected = _literal(right)
            if ok and any(expected is constant for constant in _NAMED_CONSTANTS) and _computed(left):
                return Check(source, ast.unparse(left), "is" if isinstance(op, ast.Is) else "is not", expected, message)
        return inside
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if _computed(test.operand):
            return Check(source, ast.unparse(test.operand), "falsy", None, message)
        return inside
    if _computed(test):
        return Check(source, ast.unparse(test), "truthy", None, message)
    return inside


def _compare(op: str, value: Any, expected: Any) -> bool:
    if op == "==":
        return bool(value == expected)
    if op == "!=":
        return bool(value != expected)
    if op == "is":
        return value is expected
    if op == "is not":
        return value is not expected
    if op == "truthy":
        return bool(value)
    if op == "falsy":
        return not value
    raise ValueError(f"unknown comparison {op!r}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def _expectation(op: str, expected: Any) -> str:
    return {
        "==": f"expected {_shown(expected)}",
        "!=": f"expected anything but {_shown(expected)}",
        "is": f"expected {_shown(expected)}",
        "is not": f"expected anything but {_shown(expected)}",
        "truthy": "expected a true value",
        "falsy": "expected a false value",
    }[op]


class NotPlain(ValueError):
    """A value the sandbox sent is not plain data in the encoding of the module docstring."""


def decode(data: Any, depth: int = 0) -> Any:
    """The Python value of `encode`'s JSON (module docstring). NotPlain for anything else."""
    if depth > 64:
        raise NotPlain("the value is nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(item, depth + 1) for item in data]
    if isinstance(data, dict) and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "tuple" and isinstance(body, list):
            return tuple(decode(item, depth + 1) for item in body)
        if tag == "set" and isinstance(body, list):
            try:
                return {decode(item, depth + 1) for item in body}
            except TypeError as exc:
                raise NotPlain(f"a set of unhashable values: {exc}") from None
        if tag == "dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
            try:
                return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
            except TypeError as exc:
                raise NotPlain(f"a dict with unhashable keys: {exc}") from None
        if tag == "bytes" and isinstance(body, str):
            try:
                return bytes.fromhex(body)
            except ValueError:
                raise NotPlain("bytes that are not hex") from None
    raise NotPlain(f"not a plain value: {str(data)[:VALUE_CHARS]}")

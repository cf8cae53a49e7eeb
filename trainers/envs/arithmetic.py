"""A safe arithmetic evaluator for the calculator tool: exact, bounded, and never `eval`.

`evaluate(expression)` reads the expression with Python's `ast` parser and walks the tree itself,
allowing only numbers, + - * / // % **, unary + and -, and parentheses. Values are exact
`fractions.Fraction`s ("1/3 * 3" is 1, "0.1 + 0.2" is 3/10). Everything a model could write to make
it slow or huge is refused before it is computed:

- the expression's length (`max_chars`), its parts (MAX_NODES) and its nesting (MAX_DEPTH);
- every number, literal or intermediate, must have at most `max_result_digits` digits in its
  numerator and in its denominator ("1e400" is refused as a literal, never built);
- `**` needs a whole-number exponent ("2**(1/2)" is refused: the result is not a fraction), and the
  result's size is estimated first, digits = |exponent| * log10(|base|), so "9**9**9" is refused in
  microseconds ("about 369693100 digits") instead of computed.

A refusal raises `ArithmeticRefused` with a short reason the calculator sends back to the model.
`format_number` writes a result: integers as integers ("11", "-4"), other values as an exact decimal
when one has at most MAX_DECIMAL_PLACES places ("2.5", "0.125"), else as a fraction ("1/3", "-22/7").
The model may write the unicode minus "−", "×" and "÷"; they are read as - * /.
"""

from __future__ import annotations

import ast
import math
import re
from fractions import Fraction

MAX_NODES = 100
"""Most syntax-tree nodes an expression may have (numbers and operators)."""
MAX_DEPTH = 64
"""Deepest nesting of operators an expression may have (a sum of n numbers nests n - 1 deep)."""
MAX_DECIMAL_PLACES = 12
"""A non-integer result with an exact decimal of at most this many places is written as one."""
_MAX_EXPONENT_CHARS = 6  # a literal's exponent ("1e400", "1e0000000") of more digits is refused before it is read

_SYMBOLS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "*", "\u22c5": "*", "\u00f7": "/"})
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_LITERAL_RE = re.compile(r"(?P<whole>[0-9_]*)(?:\.(?P<fraction>[0-9_]*))?(?:[eE](?P<exponent>[+-]?[0-9_]+))?")
ALLOWED = "numbers and + - * / // % ** ( )"


class ArithmeticRefused(ValueError):
    """An expression the calculator will not compute; the message says why, in a few words."""


def digit_count(n: int) -> int:
    """Decimal digits of |n| (0 has one)."""
    return len(str(abs(n)))


def normalize(expression: str) -> str:
    """The expression with the unicode minus, dash, times and division signs as - * /, outer spaces
    and one trailing "=" removed ("39 − 28 =" -> "39 - 28")."""
    text = expression.translate(_SYMBOLS).strip()
    if text.endswith("="):
        text = text[:-1].rstrip()
    return text


def evaluate(expression: str, max_result_digits: int = 30, max_chars: int = 200) -> Fraction:
    """The exact value of `expression`; ArithmeticRefused saying why it is refused (see the module
    docstring), ZeroDivisionError never escapes (it is refused as "division by zero")."""
    text = normalize(expression)
    if not text:
        raise ArithmeticRefused("empty expression")
    if len(text) > max_chars:
        raise ArithmeticRefused(f"expression is {len(text)} characters; at most {max_chars}")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ArithmeticRefused(f"cannot parse {text!r}; use {ALLOWED}") from None
    walker = _Walker(text, max_result_digits)
    return walker.value(tree.body, depth=1)


class _Walker:
    """Evaluates one parsed expression, counting its nodes against MAX_NODES."""

    def __init__(self, text: str, max_result_digits: int) -> None:
        self.text = text
        self.max_digits = max_result_digits
        self.nodes = 0

    def value(self, node: ast.AST, depth: int) -> Fraction:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ArithmeticRefused(f"expression too long: more than {MAX_NODES} numbers and operators")
        if depth > MAX_DEPTH:
            raise ArithmeticRefused(f"expression nested too deeply: more than {MAX_DEPTH} levels")
        if isinstance(node, ast.Constant):
            return self.literal(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            operand = self.value(node.operand, depth + 1)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left = self.value(node.left, depth + 1)
            right = self.value(node.right, depth + 1)
            return self.checked(self.binary(node.op, left, right))
        raise ArithmeticRefused(_unsupported(node))

    def literal(self, node: ast.Constant) -> Fraction:
        """A number as written (its source text, so "0.1" is exactly 1/10 and "1e400" is refused
        without building 10**400)."""
        source = ast.get_source_segment(self.text, node) or ""
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ArithmeticRefused(f"{source or repr(node.value)} is not a number; use {ALLOWED}")
        match = _LITERAL_RE.fullmatch(source)
        if match is None:  # 0x10, 0o7, 0b1
            raise ArithmeticRefused(f"{source} is not a decimal number")
        whole = match["whole"].replace("_", "").lstrip("0")
        fraction = (match["fraction"] or "").replace("_", "").rstrip("0")
        exponent_text = (match["exponent"] or "0").replace("_", "")
        if len(whole) > self.max_digits or len(fraction) > self.max_digits:
            raise ArithmeticRefused(f"{source} has too many digits; at most {self.max_digits}")
        mantissa = int(whole + fraction or "0")
        if mantissa == 0:
            return Fraction(0)
        if len(exponent_text.lstrip("+-")) > _MAX_EXPONENT_CHARS:  # leading zeros too: int() reads at most 4300
            raise ArithmeticRefused(f"{source} has too many digits; at most {self.max_digits}")
        scale = int(exponent_text) - len(fraction)
        if abs(scale) > 2 * self.max_digits + 1:
            raise ArithmeticRefused(f"{source} has too many digits; at most {self.max_digits}")
        value = Fraction(mantissa) * Fraction(10) ** scale
        return self.checked(value)

    def binary(self, op: ast.operator, left: Fraction, right: Fraction) -> Fraction:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.Pow):
            return self.power(left, right)
        if right == 0:
            raise ArithmeticRefused("division by zero")
        if isinstance(op, ast.Div):
            return left / right
        if isinstance(op, ast.FloorDiv):
            return Fraction(left // right)
        return left % right

    def power(self, base: Fraction, exponent: Fraction) -> Fraction:
        """base ** exponent for a whole-number exponent, its size estimated before it is computed."""
        if exponent.denominator != 1:
            raise ArithmeticRefused("** needs a whole-number exponent")
        e = exponent.numerator
        if e == 0:
            return Fraction(1)
        if base == 0:
            if e < 0:
                raise ArithmeticRefused("division by zero")
            return Fraction(0)
        if base in (1, -1):
            return base if e % 2 else Fraction(1)
        largest = max(abs(base.numerator), base.denominator)
        estimated_digits = abs(e) * math.log10(largest)
        if estimated_digits > self.max_digits + 1:
            raise ArithmeticRefused(f"result too large: about {estimated_digits:.0f} digits; at most {self.max_digits}")
        return base**e

    def checked(self, value: Fraction) -> Fraction:
        """`value`, or ArithmeticRefused when its numerator or denominator has too many digits."""
        digits = max(digit_count(value.numerator), digit_count(value.denominator))
        if digits > self.max_digits:
            raise ArithmeticRefused(f"result too large: {digits} digits; at most {self.max_digits}")
        return value


def _unsupported(node: ast.AST) -> str:
    """Why a node other than a number or an allowed operator is refused, with the fix."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        return "^ is not a power here: write ** (2**3 is 8)"
    if isinstance(node, ast.BinOp):
        return f"this operator is not supported: only {ALLOWED} are allowed"
    if isinstance(node, ast.Tuple):
        return "commas are not allowed: write 1234, not 1,234"
    if isinstance(node, ast.Name):
        return f"unknown name {node.id!r}: only {ALLOWED} are allowed"
    if isinstance(node, ast.Call):
        return f"function calls are not supported: only {ALLOWED} are allowed"
    return f"{type(node).__name__} is not supported: only {ALLOWED} are allowed"


def format_number(value: Fraction) -> str:
    """`value` as the calculator writes it: "11", "-4", "2.5", "0.125", or "1/3" (a fraction when
    the exact decimal would need more than MAX_DECIMAL_PLACES places)."""
    if value.denominator == 1:
        return str(value.numerator)
    places = _decimal_places(value.denominator)
    if places is None or places > MAX_DECIMAL_PLACES:
        return f"{value.numerator}/{value.denominator}"
    scaled = abs(value.numerator) * 10**places // value.denominator
    sign = "-" if value < 0 else ""
    whole, fraction = divmod(scaled, 10**places)
    return f"{sign}{whole}.{fraction:0{places}d}".rstrip("0")


def _decimal_places(denominator: int) -> int | None:
    """Places of the exact decimal of a fraction with this (reduced) denominator: the larger power of
    2 or 5 in it; None when it has another prime factor (the decimal never ends)."""
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    return max(twos, fives) if denominator == 1 else None

"""Generated Python programming problems with unit tests (the `python_functions` task).

Each problem asks for one small function, described in English, and carries ten tests, each
`assert name(args) == literal`: the literal is the reference implementation's value there, on
inputs drawn from the same seed. The tests' expected values are spread so that no constant program
does well: a function returning a bool expects True in half of its tests and False in the other
half, any other function expects a different value in every test (so the best constant passes at
most one of ten). The `code_tests` reward (trainers.data.rewards) runs a completion's code against
them in the sandbox (trainers.sandbox). Deterministic in (seed, stream); pure Python.

An example: {"prompt": str, "answer": str (a reference solution, shown in the rollout browser),
"tests": [str] * 10, "entry_point": str}.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import numpy as np

TESTS_PER_PROBLEM = 10
# Draws of one call's arguments before a problem gives up: over 2,000 problems of each kind, none
# needed more than 70.
_CALL_DRAWS = 400
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
INSTRUCTION = "Answer with only the function, in a ```python code block."


@dataclasses.dataclass(frozen=True)
class Template:
    """One kind of problem, under one of `names`: `describe(p)` the English, `solve(p, *args)` the
    reference, `source(p)` its code, `inputs(rng, p)` one call's arguments, `params(rng)` the
    problem's constants."""

    names: tuple[str, ...]
    signature: str
    params: Callable[[np.random.Generator], dict]
    describe: Callable[[dict], str]
    solve: Callable[..., object]
    source: Callable[[dict], str]
    inputs: Callable[[np.random.Generator, dict], tuple]


def _ints(rng: np.random.Generator, low: int = -9, high: int = 20, size: tuple[int, int] = (0, 7)) -> list[int]:
    return [int(v) for v in rng.integers(low, high, int(rng.integers(*size)))]


def _word(rng: np.random.Generator, letters: str = "abcde", size: tuple[int, int] = (0, 9)) -> str:
    return "".join(rng.choice(list(letters), int(rng.integers(*size))))


def _mix(rng: np.random.Generator, hits: list, misses: list) -> list:
    """0 to 12 items drawn from hits and 0 to 5 from misses, shuffled: what a counting function sees,
    its count spread evenly over 0..12."""
    items = [hits[i] for i in rng.integers(0, len(hits), int(rng.integers(0, 13)))]
    items += [misses[i] for i in rng.integers(0, len(misses), int(rng.integers(0, 6)))]
    return [items[i] for i in rng.permutation(len(items))]


TEMPLATES = (
    Template(
        ("sum_above", "total_above", "sum_greater_than"),
        "(xs)",
        lambda rng: {"k": int(rng.integers(-150, 150))},
        lambda p: f"returns the sum of the numbers in the list xs that are greater than {p['k']}",
        lambda p, xs: sum(x for x in xs if x > p["k"]),
        lambda p: f"    return sum(x for x in xs if x > {p['k']})",
        lambda rng, p: (_ints(rng, p["k"] - 15, p["k"] + 15),),
    ),
    Template(
        ("count_char", "count_letters", "letter_count"),
        "(s)",
        lambda rng: {"cs": "".join(sorted(rng.choice(list(_LETTERS), int(rng.integers(1, 3)), replace=False)))},
        lambda p: (
            f"returns how many times the letter {p['cs']!r} appears in the string s"
            if len(p["cs"]) == 1
            else f"returns how many characters of the string s are {p['cs'][0]!r} or {p['cs'][1]!r}"
        ),
        lambda p, s: sum(1 for ch in s if ch in p["cs"]),
        lambda p: f"    return sum(1 for ch in s if ch in {p['cs']!r})",
        lambda rng, p: ("".join(_mix(rng, list(p["cs"]), [ch for ch in "abcdefg" if ch not in p["cs"]])),),
    ),
    Template(
        ("scale", "multiply_all", "scaled"),
        "(xs)",
        lambda rng: {"k": int(rng.integers(2, 300))},
        lambda p: f"returns a new list with every number of the list xs multiplied by {p['k']}",
        lambda p, xs: [x * p["k"] for x in xs],
        lambda p: f"    return [x * {p['k']} for x in xs]",
        lambda rng, p: (_ints(rng),),
    ),
    Template(
        ("divisible", "is_divisible", "divides"),
        "(n)",
        lambda rng: {"k": int(rng.integers(2, 300))},
        lambda p: f"returns True if the integer n is divisible by {p['k']}, and False otherwise",
        lambda p, n: n % p["k"] == 0,
        lambda p: f"    return n % {p['k']} == 0",
        lambda rng, p: (int(rng.integers(-1000, 1000)) if rng.random() < 0.5 else p["k"] * int(rng.integers(-5, 10)),),
    ),
    Template(
        ("clamp", "limit", "bounded"),
        "(x)",
        lambda rng: (lambda lo: {"lo": lo, "hi": lo + int(rng.integers(12, 46))})(int(rng.integers(-30, 30))),
        lambda p: f"returns x limited to the range from {p['lo']} to {p['hi']} (the nearest end when x is outside)",
        lambda p, x: min(max(x, p["lo"]), p["hi"]),
        lambda p: f"    return min(max(x, {p['lo']}), {p['hi']})",
        lambda rng, p: (int(rng.integers(p["lo"] - 10, p["hi"] + 11)),),
    ),
    Template(
        ("last_items", "tail", "last_n"),
        "(xs)",
        lambda rng: {"k": int(rng.integers(1, 10)), "m": int(rng.integers(0, 100))},
        lambda p: (
            f"returns the last {p['k']} items of the list xs (all of them if it has fewer)"
            + (f", each increased by {p['m']}" if p["m"] else "")
        ),
        lambda p, xs: [x + p["m"] for x in xs[-p["k"] :]],
        lambda p: f"    return [x + {p['m']} for x in xs[-{p['k']}:]]",
        lambda rng, p: (_ints(rng, size=(0, p["k"] + 5)),),
    ),
    Template(
        ("digit_sum", "sum_digits", "digits_total"),
        "(n)",
        lambda rng: {"k": int(rng.integers(0, 300))},
        lambda p: f"returns the sum of the decimal digits of the non-negative integer n, plus {p['k']}",
        lambda p, n: sum(int(d) for d in str(n)) + p["k"],
        lambda p: f"    return sum(int(d) for d in str(n)) + {p['k']}",
        lambda rng, p: (int(rng.integers(0, 100000)),),
    ),
    Template(
        ("repeat_word", "repeat", "repeated"),
        "(s)",
        lambda rng: {
            "k": int(rng.integers(2, 10)),
            "sep": str(rng.choice(["-", " ", ",", "+", ";", "|", ":", "/", "_", ""])),
            "upper": bool(rng.random() < 0.5),
        },
        lambda p: (
            f"returns the string s{' in upper case' if p['upper'] else ''} repeated {p['k']} times, "
            f"joined by {p['sep']!r}"
        ),
        lambda p, s: p["sep"].join([s.upper() if p["upper"] else s] * p["k"]),
        lambda p: f"    return {p['sep']!r}.join([s{'.upper()' if p['upper'] else ''}] * {p['k']})",
        lambda rng, p: (_word(rng, size=(1, 5)),),
    ),
    Template(
        ("starts_with", "has_prefix", "begins_with"),
        "(s)",
        lambda rng: {"prefix": _word(rng, "abcdef", (1, 4))},
        lambda p: f"returns True if the string s starts with {p['prefix']!r}, and False otherwise",
        lambda p, s: s.startswith(p["prefix"]),
        lambda p: f"    return s.startswith({p['prefix']!r})",
        lambda rng, p: ((p["prefix"] if rng.random() < 0.5 else "") + _word(rng, "abcdef", (0, 4)),),
    ),
    Template(
        ("count_even", "even_count", "evens"),
        "(xs)",
        lambda rng: {"k": int(rng.integers(0, 300))},
        lambda p: f"returns the number of even numbers in the list xs, plus {p['k']}",
        lambda p, xs: sum(1 for x in xs if x % 2 == 0) + p["k"],
        lambda p: f"    return sum(1 for x in xs if x % 2 == 0) + {p['k']}",
        lambda rng, p: (_mix(rng, list(range(-10, 20, 2)), list(range(-9, 20, 2))),),
    ),
)


def make_problem(rng: np.random.Generator) -> dict:
    """One problem: a template, its constants, a name, and TESTS_PER_PROBLEM tests (`_test_calls`)."""
    template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    params = template.params(rng)
    name = template.names[int(rng.integers(len(template.names)))]
    calls = _test_calls(rng, template, params)
    tests = [
        f"assert {name}({', '.join(repr(a) for a in args)}) == {template.solve(params, *args)!r}" for args in calls
    ]
    prompt = f"Write a Python function {name}{template.signature} that {template.describe(params)}. {INSTRUCTION}"
    answer = f"```python\ndef {name}{template.signature}:\n{template.source(params)}\n```"
    return {"prompt": prompt, "answer": answer, "tests": tests, "entry_point": name}


def _test_calls(rng: np.random.Generator, template: Template, params: dict) -> list[tuple]:
    """TESTS_PER_PROBLEM distinct calls' arguments, drawn from template.inputs, keeping a call only
    while its expected value has fewer tests than its share: half of them for a bool (so True and
    False each get half), one for any other value (so every test expects a different one).
    RuntimeError when _CALL_DRAWS draws do not fill them."""
    calls: list[tuple] = []
    counts: Counter[str] = Counter()
    for _ in range(_CALL_DRAWS):
        args = template.inputs(rng, params)
        expected = template.solve(params, *args)
        share = TESTS_PER_PROBLEM // 2 if isinstance(expected, bool) else 1
        if args in calls or counts[repr(expected)] >= share:
            continue
        calls.append(args)
        counts[repr(expected)] += 1
        if len(calls) == TESTS_PER_PROBLEM:
            return calls
    raise RuntimeError(f"{template.names[0]} {params}: {_CALL_DRAWS} draws gave only {len(calls)} spread tests")

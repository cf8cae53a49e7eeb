"""Arithmetic word problems as JSONL, for GRPO on a pretrained instruct model with `math_answer`.

Each row is `{"prompt", "answer", "expression"}`: a short story problem in English, its answer as a
whole number, and the arithmetic that gives it (`"12 + 5 - 3"`, for readers and tests). One or
two operations on small numbers: hard enough that a 135M instruct model gets some wrong, easy
enough that it gets some right, so GRPO groups carry signal. With `two_step_only`, every problem
adds and subtracts twice (the `arithmetic_words_two_step` task, where most groups are flat). Deterministic in (seed,
stream): train rows come from stream 0, eval rows from stream 1 with every train prompt excluded, so the
held-out prompts never appear in training.

With `calculator`, the problems are the `arithmetic_words_calc` task's (`_calculator_problem`): the
same stories with two- and three-digit numbers (add, subtract, multiply by a one- or two-digit count,
or add then subtract), which a 135M model gets mostly wrong in its head but a calculator tool gets
right; each prompt ends with ANSWER_FORMAT, so the final answer is the last number (`math_answer`).
"""

from __future__ import annotations

import json
import os

import numpy as np

NAMES = (
    "Ana",
    "Ben",
    "Chloe",
    "David",
    "Emma",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jamal",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
)
ITEMS = ("apples", "books", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "coins", "cards")

TRAIN_STREAM = 0
EVAL_STREAM = 1

ANSWER_FORMAT = "Answer in one short sentence that ends with the number."
"""The answer-format instruction that ends every `arithmetic_words_calc` prompt: the system prompt of
configs/smollm2-arith.yaml, here in the prompt so that any system prompt (the calculator's) keeps it."""

CALCULATOR_KINDS = ("add", "add", "subtract", "subtract", "multiply", "multiply", "add_then_subtract")
"""The `arithmetic_words_calc` templates, one drawn uniformly from this tuple: one-step additions,
subtractions and multiplications 2/7 each, the two-step "has a, buys b, gives c away" 1/7."""


def _problem(rng: np.random.Generator) -> dict:
    """One problem drawn from `rng`: a template, names, an item, and numbers that keep every
    intermediate result a positive whole number."""
    name, friend = rng.choice(NAMES, size=2, replace=False)
    item = str(rng.choice(ITEMS))
    kind = int(rng.integers(0, 5))
    if kind == 0:
        a, b = (int(x) for x in rng.integers(2, 60, size=2))
        prompt = f"{name} has {a} {item}. {friend} gives {name} {b} more. How many {item} does {name} have now?"
        expression = f"{a} + {b}"
    elif kind == 1:
        a = int(rng.integers(10, 90))
        b = int(rng.integers(1, a))
        prompt = f"{name} had {a} {item} and gave {b} of them to {friend}. How many {item} does {name} have left?"
        expression = f"{a} - {b}"
    elif kind == 2:
        a, b = int(rng.integers(2, 13)), int(rng.integers(2, 13))
        prompt = f"{name} buys {a} boxes of {item} with {b} {item} in each box. How many {item} is that in all?"
        expression = f"{a} * {b}"
    elif kind == 3:
        each, people = int(rng.integers(2, 13)), int(rng.integers(2, 10))
        total = each * people
        prompt = f"{name} shares {total} {item} equally among {people} friends. How many {item} does each friend get?"
        expression = f"{total} / {people}"
    else:
        prompt, expression = _buy_then_give(rng, name, friend, item)
    answer = _evaluate(expression)
    return {"prompt": prompt, "answer": str(answer), "expression": expression}


def _buy_then_give(rng: np.random.Generator, name: str, friend: str, item: str) -> tuple[str, str]:
    """(prompt, expression) of "has a, buys b more, gives c away": a + b - c with 0 < c < a + b."""
    a, b = int(rng.integers(5, 50)), int(rng.integers(2, 30))
    c = int(rng.integers(2, a + b))
    prompt = (
        f"{name} has {a} {item} and buys {b} more. Then {name} gives {c} {item} to {friend}. "
        f"How many {item} does {name} have now?"
    )
    return prompt, f"{a} + {b} - {c}"


def _two_step_problem(rng: np.random.Generator) -> dict:
    """One two-step problem, each of two templates with probability 1/2: "has a, buys b, gives c
    away" (a + b - c) or "had a, gave b away, found c more" (a - b + c, with 0 < b < a). A 135M
    instruct model answers few of these right (greedy, 48 new tokens), so most GRPO groups of
    this task are flat: the sparse-reward setting of the learning curves (bench/learning_curves.py)."""
    name, friend = rng.choice(NAMES, size=2, replace=False)
    item = str(rng.choice(ITEMS))
    if int(rng.integers(0, 2)) == 0:
        prompt, expression = _buy_then_give(rng, name, friend, item)
    else:
        a = int(rng.integers(10, 90))
        b = int(rng.integers(1, a))
        c = int(rng.integers(2, 40))
        prompt = (
            f"{name} had {a} {item} and gave {b} of them to {friend}. Then {name} found {c} more {item}. "
            f"How many {item} does {name} have now?"
        )
        expression = f"{a} - {b} + {c}"
    return {"prompt": prompt, "answer": str(_evaluate(expression)), "expression": expression}


def _mostly_two_step_problem(rng: np.random.Generator) -> dict:
    """The `arithmetic_words_hard` draw: a mixed problem (`_problem`, four one-step templates of five)
    with probability 1/4, else a two-step one, so about one problem in five is one-step. The one-step
    ones are where a 135M instruct model starts (about a quarter right), the two-step ones where it
    fails (about 1%): a task below 10% at the start whose rewards are sparse but not absent."""
    return _problem(rng) if rng.random() < 0.25 else _two_step_problem(rng)


def _two_or_three_digits(rng: np.random.Generator) -> int:
    """A two-digit (10..99) or a three-digit (100..999) number, each length with probability 1/2."""
    return int(rng.integers(10, 100)) if rng.random() < 0.5 else int(rng.integers(100, 1000))


def _calculator_problem(rng: np.random.Generator) -> dict:
    """One `arithmetic_words_calc` problem (kinds: CALCULATOR_KINDS), its prompt ending with ANSWER_FORMAT:

    add:      a + b, a and b two- or three-digit;
    subtract: a - b, a two-digit (20..99) or three-digit with probability 1/2 each, 10 <= b < a
              (the answer is at least 1);
    multiply: boxes * per_box, boxes one-digit (2..9) or two-digit (10..99) with probability 1/2 each,
              per_box two- or three-digit;
    add_then_subtract: a + b - c, a and b two- or three-digit, 10 <= c < a + b and c <= 999.
    Every number and every intermediate result is a positive whole number."""
    name, friend = rng.choice(NAMES, size=2, replace=False)
    item = str(rng.choice(ITEMS))
    kind = CALCULATOR_KINDS[int(rng.integers(0, len(CALCULATOR_KINDS)))]
    if kind == "add":
        a, b = _two_or_three_digits(rng), _two_or_three_digits(rng)
        story = f"{name} has {a} {item}. {friend} gives {name} {b} more. How many {item} does {name} have now?"
        expression = f"{a} + {b}"
    elif kind == "subtract":
        a = int(rng.integers(20, 100)) if rng.random() < 0.5 else int(rng.integers(100, 1000))
        b = int(rng.integers(10, a))
        story = f"{name} had {a} {item} and gave {b} of them to {friend}. How many {item} does {name} have left?"
        expression = f"{a} - {b}"
    elif kind == "multiply":
        boxes = int(rng.integers(2, 10)) if rng.random() < 0.5 else int(rng.integers(10, 100))
        per_box = _two_or_three_digits(rng)
        story = (
            f"{name} buys {boxes} boxes of {item} with {per_box} {item} in each box. How many {item} is that in all?"
        )
        expression = f"{boxes} * {per_box}"
    else:
        a, b = _two_or_three_digits(rng), _two_or_three_digits(rng)
        c = int(rng.integers(10, min(a + b, 1000)))
        story = (
            f"{name} has {a} {item} and buys {b} more. Then {name} gives {c} {item} to {friend}. "
            f"How many {item} does {name} have now?"
        )
        expression = f"{a} + {b} - {c}"
    return {"prompt": f"{story} {ANSWER_FORMAT}", "answer": str(_evaluate(expression)), "expression": expression}


def _evaluate(expression: str) -> int:
    """The value of "a op b [op c]" with + - * / on whole numbers, left to right (no precedence is
    needed: the templates never mix * or / with + or -)."""
    tokens = expression.split()
    value = int(tokens[0])
    for op, number in zip(tokens[1::2], tokens[2::2]):
        n = int(number)
        if op == "+":
            value += n
        elif op == "-":
            value -= n
        elif op == "*":
            value *= n
        else:
            if value % n:
                raise ValueError(f"{expression} does not divide evenly")
            value //= n
    return value


def make_problems(
    seed: int,
    count: int,
    stream: int = TRAIN_STREAM,
    exclude_prompts: set[str] = frozenset(),
    two_step_only: bool = False,
    mostly_two_step: bool = False,
    calculator: bool = False,
) -> list[dict]:
    """`count` problems with distinct prompts, none in `exclude_prompts`, deterministic in (seed, stream).
    two_step_only: draw from the two-step templates only (`_two_step_problem`), not the five mixed ones;
    mostly_two_step: about four in five two-step (`_mostly_two_step_problem`); calculator: the
    two- and three-digit problems of `arithmetic_words_calc` (`_calculator_problem`). At most one of the three."""
    if two_step_only + mostly_two_step + calculator > 1:
        raise ValueError("make_problems: choose at most one of two_step_only, mostly_two_step and calculator")
    draw = (
        _two_step_problem
        if two_step_only
        else _mostly_two_step_problem
        if mostly_two_step
        else _calculator_problem
        if calculator
        else _problem
    )
    rng = np.random.default_rng([seed, stream])
    rows: list[dict] = []
    seen = set(exclude_prompts)
    attempts = 0
    while len(rows) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(f"could not draw {count} distinct problems (got {len(rows)}); ask for fewer")
        row = draw(rng)
        if row["prompt"] not in seen:
            seen.add(row["prompt"])
            rows.append(row)
    return rows


def make_train_eval(
    seed: int, train_count: int, eval_count: int, two_step_only: bool = False
) -> tuple[list[dict], list[dict]]:
    """(train, eval) problems: eval from its own stream with every train prompt excluded."""
    train = make_problems(seed, train_count, TRAIN_STREAM, two_step_only=two_step_only)
    held_out = make_problems(seed, eval_count, EVAL_STREAM, {row["prompt"] for row in train}, two_step_only)
    return train, held_out


def eval_path_for(out_path: str) -> str:
    """The default held-out file beside `out_path`: data/words.jsonl -> data/words.eval.jsonl."""
    root, ext = os.path.splitext(out_path)
    return f"{root}.eval{ext or '.jsonl'}"


def write_jsonl(path: str, rows: list[dict]) -> None:
    """One JSON object per line, written to a temporary file first so a reader never sees half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(partial, path)

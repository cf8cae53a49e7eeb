"""Built-in verifiable tasks, generated deterministically from a seed.

Each example is a dict {"prompt": str, "answer": str, ...} (countdown adds
"numbers": list[int] and "target": int). Prompts end in "=" and the model's
completion is the text after it. Within one call of make_examples the prompts
are distinct; `make_train_eval` draws eval examples from a second seed stream
and drops any prompt already in train, so the two never overlap.

Default rewards pair the exact criterion with partial credit: alphabet_match
(right characters, right length: learnable from a random-init model within a
few steps) and prefix_match (position-wise characters) or countdown_partial.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

import numpy as np

from trainers.data import code_problems, rewards, word_problems
from trainers.registry import Registry

_TRAIN_STREAM = 0
_EVAL_STREAM = 1
_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


@dataclasses.dataclass(frozen=True)
class Task:
    """A built-in task.

    Attributes:
      name: its name in TASKS.
      make_examples: (seed, count, exclude_prompts=(), stream=0) -> list of
        `count` examples with distinct prompts, none in exclude_prompts;
        deterministic in (seed, stream), and a prefix-stable sequence (the first
        k of count examples equal make_examples(seed, k)).
      default_rewards: (reward name of rewards.REWARDS, weight) pairs.
      max_new_tokens: completion budget in tokens (longest answer + EOS + slack).
      description: one line for humans.
    """

    name: str
    make_examples: Callable[..., list[dict]]
    default_rewards: list[tuple[str, float]]
    max_new_tokens: int
    description: str


def _unique_examples(
    make_one: Callable[[np.random.Generator], dict],
    task_name: str,
    seed: int,
    count: int,
    exclude_prompts: Collection[str],
    stream: int,
) -> list[dict]:
    """Draws examples with make_one from rng([stream, seed]) until `count` distinct
    prompts not in exclude_prompts are found; ValueError if the task's prompt space
    runs out (after 20 * count + 1000 draws: collecting k distinct prompts of a space
    of N takes about N * ln(N / (N - k)) draws, far fewer unless k is close to N)."""
    if seed < 0 or count < 0:
        raise ValueError(f"seed and count must be >= 0, got seed={seed}, count={count}")
    rng = np.random.default_rng([stream, seed])
    excluded = set(exclude_prompts)
    seen_prompts = set()
    examples = []
    max_draws = 20 * count + 1000
    draws = 0
    while len(examples) < count:
        if draws >= max_draws:
            raise ValueError(
                f"task {task_name!r}: found only {len(examples)} distinct prompts of {count} "
                f"requested after {draws} draws; ask for fewer examples"
            )
        example = make_one(rng)
        draws += 1
        prompt = example["prompt"]
        if prompt in seen_prompts or prompt in excluded:
            continue
        seen_prompts.add(prompt)
        examples.append(example)
    return examples


def _example_maker(task_name: str, make_one: Callable[[np.random.Generator], dict]):
    """Returns make_examples(seed, count, exclude_prompts=(), stream=0) for one task."""

    def make_examples(
        seed: int, count: int, exclude_prompts: Collection[str] = (), stream: int = _TRAIN_STREAM
    ) -> list[dict]:
        return _unique_examples(make_one, task_name, seed, count, exclude_prompts, stream)

    make_examples.__name__ = f"make_{task_name}_examples"
    return make_examples


# ---------------------------------------------------------------- generators


def _arithmetic_one(rng: np.random.Generator) -> dict:
    """ "a+b=" or "a-b=" with a, b in 0..99 and a non-negative result (1-3 digits)."""
    a, b = (int(x) for x in rng.integers(0, 100, size=2))
    if rng.random() < 0.5:
        return {"prompt": f"{a}+{b}=", "answer": str(a + b)}
    a, b = max(a, b), min(a, b)
    return {"prompt": f"{a}-{b}=", "answer": str(a - b)}


def _random_word(rng: np.random.Generator) -> str:
    """3 to 6 random lowercase letters."""
    length = int(rng.integers(3, 7))
    return "".join(rng.choice(_LETTERS, size=length))


def _reverse_one(rng: np.random.Generator) -> dict:
    word = _random_word(rng)
    return {"prompt": f"rev {word}=", "answer": word[::-1]}


def _copy_one(rng: np.random.Generator) -> dict:
    word = _random_word(rng)
    return {"prompt": f"copy {word}=", "answer": word}


def _sort_one(rng: np.random.Generator) -> dict:
    word = _random_word(rng)
    return {"prompt": f"sort {word}=", "answer": "".join(sorted(word))}


FIXED_LENGTH_PROMPT_CHARS = 31


def _fixed_length_one(rng: np.random.Generator) -> dict:
    """Exactly 31 prompt characters (30 random lowercase letters + "="), so with BOS
    every prompt is 32 tokens (benchmark workloads); the answer is the letters reversed."""
    letters = "".join(rng.choice(_LETTERS, size=FIXED_LENGTH_PROMPT_CHARS - 1))
    return {"prompt": f"{letters}=", "answer": letters[::-1]}


def _countdown_one(rng: np.random.Generator) -> dict:
    """Four numbers in 1..9 (the prompt lists them sorted) and a target in 1..729 reached
    by combining three of them with + - * (the stored answer): "2 3 5 7>22=" / "3*5+7"."""
    while True:
        numbers = [int(x) for x in rng.integers(1, 10, size=4)]
        a, b, c = (numbers[i] for i in rng.permutation(4)[:3])
        op1, op2 = (str(op) for op in rng.choice(np.array(list("+-*")), size=2))
        left = f"{a}{op1}{b}"
        if op2 == "*" and op1 in "+-":
            left = f"({left})"
        answer = f"{left}{op2}{c}"
        target = rewards.countdown_value(answer, numbers)
        if target is not None and target >= 1 and target.denominator == 1:
            break
    numbers = sorted(numbers)
    target = int(target)
    return {
        "prompt": " ".join(str(n) for n in numbers) + f">{target}=",
        "answer": answer,
        "numbers": numbers,
        "target": target,
    }


GUESS_NUMBER_WIDTHS = (10, 20, 50, 100)


def _guess_number_one(rng: np.random.Generator) -> dict:
    """A guessing game (the guess_number environment): a name, a range of 10, 20, 50 or 100 whole numbers
    starting at 1..100, and the secret in it, e.g. "Ana is thinking of a whole number from 1 to 100. ..." /
    "42". The range is also stored ("low", "high"); names and ranges give 8000 distinct prompts."""
    name = str(rng.choice(word_problems.NAMES))
    width = int(rng.choice(GUESS_NUMBER_WIDTHS))
    low = int(rng.integers(1, 101))
    high = low + width - 1
    secret = int(rng.integers(low, high + 1))
    prompt = (
        f"{name} is thinking of a whole number from {low} to {high}. Guess it: answer with one number. "
        f"{name} will say higher or lower."
    )
    return {"prompt": prompt, "answer": str(secret), "low": low, "high": high}


_TEXT_REWARDS = [("exact_match", 1.0), ("prefix_match", 0.5), ("alphabet_match", 0.25)]


def _word_problem_task(name: str, variant: dict[str, bool], description: str) -> Task:
    """A task of `word_problems.make_problems` drawn with `variant` (two_step_only / mostly_two_step),
    scored by math_answer, 128 new tokens at most."""
    return Task(
        name=name,
        make_examples=lambda seed, count, exclude_prompts=(), stream=0: word_problems.make_problems(
            seed, count, stream, set(exclude_prompts), **variant
        ),
        default_rewards=[("math_answer", 1.0)],
        max_new_tokens=128,
        description=description,
    )


TASKS = Registry("task")
"""The built-in tasks by name (`trainers.registry`); each entry's object is its Task, its doc the
description."""

for _task in (
    Task(
        name="arithmetic",
        make_examples=_example_maker("arithmetic", _arithmetic_one),
        default_rewards=list(_TEXT_REWARDS),
        max_new_tokens=6,
        description='add or subtract two numbers in 0..99: "23+9=" -> "32"',
    ),
    Task(
        name="reverse",
        make_examples=_example_maker("reverse", _reverse_one),
        default_rewards=list(_TEXT_REWARDS),
        max_new_tokens=8,
        description='reverse 3-6 lowercase letters: "rev abcd=" -> "dcba"',
    ),
    Task(
        name="copy",
        make_examples=_example_maker("copy", _copy_one),
        default_rewards=list(_TEXT_REWARDS),
        max_new_tokens=8,
        description='copy 3-6 lowercase letters: "copy abcd=" -> "abcd"',
    ),
    Task(
        name="sort",
        make_examples=_example_maker("sort", _sort_one),
        default_rewards=list(_TEXT_REWARDS),
        max_new_tokens=8,
        description='sort 3-6 lowercase letters: "sort dbca=" -> "abcd"',
    ),
    Task(
        name="fixed_length",
        make_examples=_example_maker("fixed_length", _fixed_length_one),
        default_rewards=list(_TEXT_REWARDS),
        max_new_tokens=32,
        description="benchmark shapes: 30 letters + '=' (32 tokens with BOS), answer the letters reversed",
    ),
    Task(
        name="countdown",
        make_examples=_example_maker("countdown", _countdown_one),
        default_rewards=[("countdown", 1.0), ("countdown_partial", 0.5), ("alphabet_match", 0.25)],
        max_new_tokens=12,
        description='reach the target with + - * / using each number at most once: "2 3 5 7>22=" -> "3*5+7"',
    ),
    Task(
        name="arithmetic_words",
        make_examples=lambda seed, count, exclude_prompts=(), stream=0: word_problems.make_problems(
            seed, count, stream, set(exclude_prompts)
        ),
        default_rewards=[("math_answer", 1.0)],
        max_new_tokens=128,
        description="one- and two-step arithmetic word problems in English for pretrained chat models "
        "(the make-dataset arithmetic-words generator): answer checked with math_answer",
    ),
    _word_problem_task(
        "arithmetic_words_two_step",
        {"two_step_only": True},
        "two-step arithmetic word problems only (a + b - c, a - b + c): sparse rewards for a small chat model "
        "(SmolLM2-135M-Instruct: 1% greedy), answer checked with math_answer",
    ),
    _word_problem_task(
        "arithmetic_words_hard",
        {"mostly_two_step": True},
        "arithmetic word problems, about four in five two-step: below 10% greedy for SmolLM2-135M-Instruct at "
        "the start, sparse but learnable rewards (the learning curves' task), answer checked with math_answer",
    ),
    _word_problem_task(
        "arithmetic_words_calc",
        {"calculator": True},
        "word problems with two- and three-digit numbers (add, subtract, multiply by a 1-2 digit count, some "
        "add-then-subtract), each prompt ending with the answer format: hard in a small model's head, easy with "
        "the calculator environment (configs/calculator-arith.yaml), answer checked with math_answer",
    ),
    Task(
        name="python_functions",
        make_examples=_example_maker("python_functions", code_problems.make_problem),
        default_rewards=[("code_tests", 1.0)],
        max_new_tokens=96,
        description="write one small Python function from its description (ten kinds, generated with ten unit "
        "tests each): scored by code_tests, the fraction of tests the code passes in the sandbox",
    ),
    Task(
        name="guess_number",
        make_examples=_example_maker("guess_number", _guess_number_one),
        # The game's own reward part ("solved", by turns used) is the signal; numeric_match at weight 0
        # only reports whether the last guess was the secret (score needs one reward).
        default_rewards=[("numeric_match", 0.0)],
        max_new_tokens=256,
        description="a higher/lower guessing game over several turns (env.name guess_number): guess the secret "
        "whole number; rewarded by the turns used",
    ),
):
    TASKS.add(_task.name, _task, doc=_task.description)


def get_task(name: str) -> Task:
    """Returns TASKS[name]; ValueError naming the known tasks otherwise."""
    return TASKS[name]


def make_train_eval(name: str, seed: int, train_count: int, eval_count: int) -> tuple[list[dict], list[dict]]:
    """Returns (train, eval) examples of task `name`: train from stream 0, eval from
    stream 1 with every train prompt excluded, so the two are disjoint."""
    task = get_task(name)
    train = task.make_examples(seed, train_count, stream=_TRAIN_STREAM)
    train_prompts = {example["prompt"] for example in train}
    eval_examples = task.make_examples(seed, eval_count, exclude_prompts=train_prompts, stream=_EVAL_STREAM)
    return train, eval_examples

"""Verifiable reward functions.

Every reward is a function `fn(completion: str, example: dict) -> float`
with a value in [0, 1], pure except `code_tests`, which runs the completion's code in the sandbox
and is registered `batched=True`: `fn(completions, examples) -> [N]`, so a step's programs run
side by side; and `judge`, batched too, which a second model scores: its registered function only
names it, and the run hands `score_with_details` the loaded judge (`trainers.rollout.judge`).
`completion` is the decoded model output (text after
the prompt, up to the first EOS); `example` is the dataset row, with at least
"prompt" (a str, or from JSONL a list of {"role", "content"} chat messages; only the judge
reads it) and "answer" (str) and, for countdown, "numbers" (list of int)
and "target" (int).

Rewards are registered by name in REWARDS (`trainers.registry`: one decorated
function each); a run's reward spec is a list of (name, weight) pairs, combined
by `score`.
"""

from __future__ import annotations

import ast
import functools
import logging
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np

from trainers.registry import Registry
from trainers.sandbox.runner import UNAVAILABLE, Sandbox

RewardFn = Callable[[str, dict], float]
REWARDS = Registry("reward")

# A number: optional minus sign directly before the digits, optional thousands
# separators ("1,234"), optional decimal part. "3-5" therefore reads as 3, -5.
_NUMBER_PATTERN = r"-?\d+(?:,\d{3})*(?:\.\d+)?"
_NUMBER_RE = re.compile(_NUMBER_PATTERN)
# GSM8K final answer marker: "#### 42", "####42", "#### $1,200".
_GSM8K_RE = re.compile(r"####\s*\$?\s*(" + _NUMBER_PATTERN + r")")

_COUNTDOWN_CHARS = frozenset("0123456789+-*/() ")
_COUNTDOWN_MAX_CHARS = 200
_COUNTDOWN_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


# ---------------------------------------------------------------- helpers


def _parse_number(text: str) -> Fraction | None:
    """Returns `text` (one number as matched by _NUMBER_RE) as an exact Fraction."""
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def last_number(text: str) -> Fraction | None:
    """Returns the last number in `text`, or None if it has none."""
    matches = _NUMBER_RE.findall(text)
    return _parse_number(matches[-1]) if matches else None


def gsm8k_number(text: str) -> Fraction | None:
    """Returns the number after the last "####" marker in `text`, or None."""
    matches = _GSM8K_RE.findall(text)
    return _parse_number(matches[-1]) if matches else None


def answer_number(answer: str) -> Fraction | None:
    """Returns the reference number of an answer string, or None if not numeric.

    A GSM8K answer ("...reasoning... #### 72") gives the number after "####";
    otherwise the whole stripped answer must be one number ("32", "1,200", "-4.5").
    """
    if "####" in answer:
        return gsm8k_number(answer)
    stripped = answer.strip()
    if _NUMBER_RE.fullmatch(stripped):
        return _parse_number(stripped)
    return None


def answer_alphabet(answer: str) -> frozenset[str]:
    """Returns the characters a completion for `answer` may reasonably use.

    The union of the character classes present in the answer: all digits if it
    has a digit, all lowercase letters if it has one, all uppercase letters if it
    has one; any other character of the answer is allowed as itself.
    """
    allowed = set()
    for char in answer:
        if char in string.digits:
            allowed.update(string.digits)
        elif char in string.ascii_lowercase:
            allowed.update(string.ascii_lowercase)
        elif char in string.ascii_uppercase:
            allowed.update(string.ascii_uppercase)
        else:
            allowed.add(char)
    return frozenset(allowed)


def _as_fraction(value) -> Fraction:
    """Returns an int, Fraction or numeric string as a Fraction."""
    if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
        return Fraction(value)
    return Fraction(str(value))


def _countdown_fields(example: dict) -> tuple[list[int], Fraction]:
    """Returns (numbers, target) of a countdown example; ValueError if absent."""
    if "numbers" not in example or "target" not in example:
        raise ValueError(
            "countdown rewards need 'numbers' (list of int) and 'target' (int) in the example; "
            f"got fields {sorted(example)}"
        )
    return [int(number) for number in example["numbers"]], _as_fraction(example["target"])


def _expression_constants(node: ast.AST) -> list[int] | None:
    """Returns the integer constants of an allowed expression tree, or None.

    Allowed: int literals and binary + - * / (parentheses only group; no unary
    minus, no names, calls, attributes, powers or any other node).
    """
    if isinstance(node, ast.Expression):
        return _expression_constants(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, _COUNTDOWN_OPERATORS):
        left = _expression_constants(node.left)
        right = _expression_constants(node.right)
        if left is None or right is None:
            return None
        return left + right
    return None


def _evaluate(node: ast.AST) -> Fraction:
    """Evaluates a tree accepted by _expression_constants exactly (ZeroDivisionError on /0)."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    left = _evaluate(node.left)
    right = _evaluate(node.right)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    return left / right


def countdown_value(expression: str, numbers: list[int]) -> Fraction | None:
    """Returns the exact value of a countdown expression, or None if it is not allowed.

    Allowed: the stripped text uses only digits, spaces, + - * / and parentheses
    (at most 200 characters), parses (with `ast`, never eval) as binary
    operations over integer literals, every literal is one of `numbers` and no
    number is used more often than it appears in `numbers`, and no division by
    zero occurs. Not every number has to be used.
    """
    text = expression.strip()
    if not text or len(text) > _COUNTDOWN_MAX_CHARS or not set(text) <= _COUNTDOWN_CHARS:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    try:
        used = _expression_constants(tree)
    except RecursionError:
        return None
    if used is None or not Counter(used) <= Counter(numbers):
        return None
    try:
        return _evaluate(tree)
    except (ZeroDivisionError, RecursionError):
        return None


# ---------------------------------------------------------------- rewards


@REWARDS.register("exact_match")
def exact_match(completion: str, example: dict) -> float:
    """1.0 if the stripped completion equals the stripped answer, else 0.0."""
    return float(completion.strip() == example["answer"].strip())


@REWARDS.register("prefix_match")
def prefix_match(completion: str, example: dict) -> float:
    """Partial credit: position-wise character matches, aligned at the start.

    With c = stripped completion and a = stripped answer:

        matches = #{i < min(len(c), len(a)) : c[i] == a[i]}
        reward  = matches / max(len(c), len(a))        (1.0 if both are empty)

    Characters beyond the answer's length only grow the denominator, so
    stopping at the right length matters: for a = "dcba", "dcba" -> 1,
    "dcb" -> 3/4, "dxba" -> 3/4, "dcbaa" -> 4/5, "abcd" -> 0.
    """
    c = completion.strip()
    a = example["answer"].strip()
    if not c and not a:
        return 1.0
    matches = sum(1 for c_char, a_char in zip(c, a) if c_char == a_char)
    return matches / max(len(c), len(a))


@REWARDS.register("alphabet_match")
def alphabet_match(completion: str, example: dict) -> float:
    """Partial credit for using the answer's alphabet and length (dense early signal).

    With c = stripped completion, a = stripped answer, and in_alphabet = number
    of characters of c in answer_alphabet(a) (digits for numbers, lowercase
    letters for words, ...):

        reward = min(in_alphabet, len(a)) / max(len(c), len(a))   (1.0 if both empty)

    E.g. a = "32": "57" -> 1, "5" -> 1/2, "5x" -> 1/2, "5789" -> 2/4.
    """
    c = completion.strip()
    a = example["answer"].strip()
    if not c and not a:
        return 1.0
    allowed = answer_alphabet(a)
    in_alphabet = sum(1 for char in c if char in allowed)
    return min(in_alphabet, len(a)) / max(len(c), len(a))


@REWARDS.register("char_overlap")
def char_overlap(completion: str, example: dict) -> float:
    """Partial credit for using the answer's characters, in any order.

    With c = stripped completion, a = stripped answer and overlap = size of the
    multiset intersection of their characters:

        reward = overlap / max(len(c), len(a))        (1.0 if both are empty)

    E.g. a = "dcba": "abcd" -> 1, "aabb" -> 2/4, "dcbaxy" -> 4/6, "d" -> 1/4.
    For copy/reverse/sort the answer's characters are the prompt word's, so this
    rewards attending to the prompt before the order is right.
    """
    c = completion.strip()
    a = example["answer"].strip()
    if not c and not a:
        return 1.0
    overlap = sum((Counter(c) & Counter(a)).values())
    return overlap / max(len(c), len(a))


@REWARDS.register("numeric_match")
def numeric_match(completion: str, example: dict) -> float:
    """1.0 if the last number in the completion equals the answer's number.

    The answer's number is given by answer_number (a plain number, or the
    number after "####"); 0.0 if either side has no number. Equality is exact
    ("32.0" equals "32"; "1,200" equals "1200").
    """
    expected = answer_number(example["answer"])
    got = last_number(completion)
    return float(expected is not None and got is not None and got == expected)


@REWARDS.register("gsm8k_format")
def gsm8k_format(completion: str, example: dict) -> float:
    """1.0 if the completion contains a GSM8K final answer "#### <number>", else 0.0."""
    return float(_GSM8K_RE.search(completion) is not None)


@REWARDS.register("gsm8k_answer")
def gsm8k_answer(completion: str, example: dict) -> float:
    """1.0 if the number after the completion's last "####" equals the answer's number.

    The answer may be a plain number or a full GSM8K answer ending "#### N".
    """
    expected = answer_number(example["answer"])
    got = gsm8k_number(completion)
    return float(expected is not None and got is not None and got == expected)


@REWARDS.register("countdown")
def countdown(completion: str, example: dict) -> float:
    """1.0 if the stripped completion is an allowed expression (see countdown_value)
    over example["numbers"] that evaluates exactly to example["target"], else 0.0.
    """
    numbers, target = _countdown_fields(example)
    value = countdown_value(completion, numbers)
    return float(value is not None and value == target)


@REWARDS.register("countdown_partial")
def countdown_partial(completion: str, example: dict) -> float:
    """Partial credit for countdown: 0 for a disallowed expression, otherwise

        reward = 0.25 + 0.75 * max(0, 1 - |value - target| / max(|target|, 1))

    so any allowed expression over the given numbers earns 0.25 and the exact
    solution earns 1.0. E.g. numbers [3, 5, 7], target 22: "3*5+7" -> 1,
    "3+5+7" (15) -> 0.25 + 0.75 * (1 - 7/22), "9" -> 0.
    """
    numbers, target = _countdown_fields(example)
    value = countdown_value(completion, numbers)
    if value is None:
        return 0.0
    closeness = max(Fraction(0), 1 - abs(value - target) / max(abs(target), Fraction(1)))
    return float(Fraction(1, 4) + Fraction(3, 4) * closeness)


# The opening of a boxed final answer: "\boxed{" or "\fbox{" (spaces allowed before the brace).
_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
# A thousands separator: a comma after 1-3 digits (not part of a longer number or list) and before
# exactly three digits, in a run of such groups ("1,234,567"); "1, 2, 3", "(1,2)" and "1,2345" keep theirs.
_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?!\d|,\d)")
# Completions longer than this are judged on their last MATH_TAIL_CHARS characters: the final
# answer is at the end, and sympy's parse time grows with the text it is given.
MATH_TAIL_CHARS = 2_000
# math-verify runs without a timeout here, so answers that sympy could take unbounded time to
# evaluate are compared as text only: longer than MATH_ANSWER_MAX_CHARS, more than one power, or an
# exponent of more than three digits (\boxed{9^{9^{99999}}} would otherwise hang the run).
MATH_ANSWER_MAX_CHARS = 100
_POWER_RE = re.compile(r"\^|\*\*")
_BIG_EXPONENT_RE = re.compile(r"(?:\^|\*\*)\s*\{?\s*\d{4,}")


def boxed_answer(text: str) -> str | None:
    r"""The stripped content of the last complete \boxed{...} or \fbox{...} in `text`, found by counting
    braces (any nesting: \boxed{\frac{\sqrt{3}}{2}}); None if there is none or it is blank.

    Escaped braces (\{ \}) are content, not brace levels. A box inside a box belongs to the outer one;
    a box never closed does not count."""
    last = None
    position = 0
    while (opening := _BOX_OPEN_RE.search(text, position)) is not None:
        depth, index = 1, opening.end()
        while index < len(text) and depth:
            char = text[index]
            if char == "\\":
                index += 2  # an escaped character (\{, \}, \\) is never a brace level
                continue
            depth += {"{": 1, "}": -1}.get(char, 0)
            index += 1
        if depth:  # not closed before the end of the text
            position = opening.end()
            continue
        last = text[opening.end() : index - 1]
        position = index
    if last is None or not last.strip():
        return None
    return last.strip()


def strip_thousands_separators(text: str) -> str:
    """`text` with the commas of thousands-grouped numbers removed ("1,234,567" -> "1234567"); commas
    between items ("1, 2, 3", "(1,2)", "[-1, 3)") and in other digit groupings ("1,2345") stay."""
    return _THOUSANDS_RE.sub(lambda match: match.group(0).replace(",", ""), text)


def final_answer_text(completion: str) -> str | None:
    r"""The completion's final answer as text: the last \boxed{...}, else the number after the last
    "####", else the last number; None if there is none of these."""
    tail = completion[-MATH_TAIL_CHARS:]
    boxed = boxed_answer(tail)
    if boxed is not None:
        return boxed
    marked = _GSM8K_RE.findall(tail)
    if marked:
        return marked[-1].replace(",", "")
    numbers = _NUMBER_RE.findall(tail)
    return numbers[-1].replace(",", "") if numbers else None


@functools.lru_cache(maxsize=1)
def _math_verify():
    """The math_verify module, imported on first use. Its warning that a timeout is disabled (printed
    on every call) is silenced: running without one is this module's choice, explained above."""

    # lazy: math-verify imports SymPy (seconds); only the math rewards need it
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return math_verify


@functools.lru_cache(maxsize=4096)
def _math_parse(text: str):
    """math-verify's parse of one answer (LaTeX or a plain expression), without its signal-based
    timeout (rewards are scored in the async collector's thread, where signals cannot be used).
    Cached: a prompt's gold answer is parsed once for its G completions (callers only read the
    list). math-verify is imported here, not at module level: validation reads the REWARDS names cheaply."""
    return _math_verify().parse(f"${text}$", parsing_timeout=None)


@REWARDS.register("math_answer")
def math_answer(completion: str, example: dict) -> float:
    r"""1.0 if the completion's final answer (`final_answer_text`: \boxed{}, "#### N", or the last
    number) equals the example's answer by Hugging Face's math-verify: equivalent forms count
    ("1/2", "0.5", "\frac{1}{2}"; "1,200" and "1200"). Thousands separators are removed from both sides
    (`strip_thousands_separators`); commas between items stay, so "(1,2)", "[-1, 3)" and "1, 2, 3" reach
    math-verify whole (it reads them as intervals and a set). 0.0 if there is no final answer."""
    got = final_answer_text(completion)
    if got is None:
        return 0.0
    got = strip_thousands_separators(got)
    expected = example["answer"]
    marked = _GSM8K_RE.findall(expected)
    expected = strip_thousands_separators(marked[-1] if marked else expected.strip())
    if not all(_safe_for_sympy(text) for text in (expected, got)):
        return float(got.replace(" ", "") == expected.replace(" ", ""))
    gold, answer = _math_parse(expected), _math_parse(got)
    return float(bool(gold) and bool(answer) and _math_verify().verify(gold, answer, timeout_seconds=None))


def _safe_for_sympy(text: str) -> bool:
    return (
        len(text) <= MATH_ANSWER_MAX_CHARS
        and len(_POWER_RE.findall(text)) <= 1
        and _BIG_EXPONENT_RE.search(text) is None
    )


@REWARDS.register("math_format")
def math_format(completion: str, example: dict) -> float:
    r"""1.0 if the completion states its final answer in \boxed{...} or \fbox{...} (non-empty, braces
    balanced: `boxed_answer`), else 0.0."""
    return float(boxed_answer(completion[-MATH_TAIL_CHARS:]) is not None)


# A fence line: only ``` and an optional language tag, spaces around them allowed; "\r\n" line ends too.
_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[ \t]*\r?$", re.MULTILINE)
PYTHON_TAGS = ("", "py", "python", "python3", "py3")
_SANDBOX = None


def code_of(completion: str) -> str:
    """The program in a completion: its last fenced Python block, else "" when it has fenced blocks
    but none in Python (nothing else runs), else, with no fence line at all, the whole completion.

    A block opens at a fence line (a line of only ``` and an optional tag, spaces around them
    allowed, "\n" or "\r\n" line ends) and closes at the next fence line without a tag, or at the
    end when the completion was cut off. It is Python when its tag is one of PYTHON_TAGS, in any
    case: none, py, python, python3 or py3."""
    blocks = []  # (tag, code)
    opened = None  # (tag, where its code starts) of the block still open
    for fence in _FENCE_RE.finditer(completion):
        if opened is None:
            opened = (fence.group(1).lower(), fence.end() + 1)
        elif not fence.group(1):
            blocks.append((opened[0], completion[opened[1] : fence.start()]))
            opened = None
    if opened is not None:
        blocks.append((opened[0], completion[opened[1] :]))
    if not blocks:
        return completion
    python = [code for tag, code in blocks if tag in PYTHON_TAGS]
    return python[-1] if python else ""


def sandbox():
    """This process's sandbox pool (trainers.sandbox.runner.Sandbox), started on first use: one
    program per CPU at a time, each test under the default limits."""
    global _SANDBOX
    if _SANDBOX is None:
        _SANDBOX = Sandbox()
    return _SANDBOX


@REWARDS.register("code_tests", batched=True)
def code_tests(completions: list[str], examples: list[dict]) -> tuple[np.ndarray, list[list[dict]]]:
    """The fraction of example["tests"] (Python statements, e.g. asserts) that pass when run after the
    completion's code (`code_of`), each test in a fresh process of the sandbox (trainers.sandbox:
    no network, a read-only file system but its own directory, time, CPU, memory and process
    limits). Code that fails, hangs or misbehaves scores 0 on the tests it spoils. Batched: the
    step's programs run side by side, one per CPU. A test `assert <expression> == <literal>` (and
    the other forms of trainers.sandbox.checks) is compared outside the sandbox, where the code
    cannot forge its result; others run inside. Its details, per completion: each test's
    {"test", "passed", "reason", "checked"} ("outside" or "inside"; the rollout browser shows them)."""
    programs = [(code_of(c), list(e["tests"])) for c, e in zip(completions, examples)]
    outcomes = sandbox().run_many(programs)
    isolation = [o.error for o in outcomes if o.error.startswith(UNAVAILABLE)]
    if isolation:  # nothing ran: a run must not learn from rewards of 0 that say nothing of the code
        raise RuntimeError(f"code_tests: {isolation[0]}")
    details = []
    for (_, tests), outcome in zip(programs, outcomes):
        results = outcome.results or [None] * len(tests)
        details.append(
            [
                {
                    "test": test,
                    "passed": bool(result and result.passed),
                    "reason": result.reason if result else outcome.error,
                    "checked": result.checked if result else "",
                }
                for test, result in zip(tests, results)
            ]
        )
    return np.array([o.passed_fraction for o in outcomes], dtype=np.float32), details


@REWARDS.register("judge", batched=True, needs_model=True)
def judge(completions: list[str], examples: list[dict]) -> tuple[np.ndarray, list[dict]]:
    """A second model's verdict on each completion (the config's `judge` section): the judge reads a
    prompt made of judge.template with the example's question, its reference answer and the
    completion, and scores it in [0, 1]: yes_no, p(yes) / (p(yes) + p(no)) of its next token; number,
    the first number it writes / judge.scale. Batched: the step's completions go through the judge
    model together. Its details, per completion: {"mode", "score", "verdict"}, in yes_no mode
    "logprob_yes" and "logprob_no", in number mode "output" (what the judge wrote) and "reason" (why a
    score is 0 or clipped; also for a judge prompt over judge.max_prompt_tokens). The judge model is
    loaded by the run (`trainers.rollout.judge`) and handed to `score_with_details` as a scorer."""
    raise RuntimeError(
        "the judge reward is scored by a judge model, which the run loads from judge.model_path "
        "(trainers.rollout.judge.load_judge) and hands to score_with_details as scorers={'judge': ...}"
    )


def check_specs(specs: list[tuple[str, float]]) -> None:
    """Raises ValueError unless specs is a non-empty list of (known name, finite weight)
    with no name repeated."""
    if not specs:
        raise ValueError("reward specs are empty; give at least one (name, weight)")
    seen = set()
    for name, weight in specs:
        if name not in REWARDS:
            raise ValueError(REWARDS.unknown(name))
        if name in seen:
            raise ValueError(f"reward {name!r} is listed twice")
        if not np.isfinite(weight):
            raise ValueError(f"reward {name!r} has non-finite weight {weight!r}")
        seen.add(name)


BatchedRewardFn = Callable[[list[str], list[dict]], Any]


def score(
    completions: list[str],
    examples: list[dict],
    specs: list[tuple[str, float]],
    scorers: Mapping[str, BatchedRewardFn] | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """`score_with_details` without the details."""
    total, components, _ = score_with_details(completions, examples, specs, scorers)
    return total, components


def score_with_details(
    completions: list[str],
    examples: list[dict],
    specs: list[tuple[str, float]],
    scorers: Mapping[str, BatchedRewardFn] | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray], list[dict[str, Any]] | None]:
    """Scores N completions against their examples.

    Args:
      completions: N decoded completions.
      examples: the N matching examples (completion i is scored against example i).
      specs: (reward name, weight) pairs, names of REWARDS, each at most once.
      scorers: reward name -> a batched function that scores it in place of the registry's entry: what
        a higher layer builds for a reward registered `needs_model` (the judge: a model the run loads,
        `trainers.rollout.judge`).

    Returns:
      total: [N] float32, sum over specs of weight * reward.
      components: reward name -> [N] float32 unweighted reward values in [0, 1].
      details: per completion, {reward name: what it found} for the batched rewards that return
        (values, details) (code_tests: each test's result); None when none does.
    """
    if len(completions) != len(examples):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples")
    check_specs(specs)
    total = np.zeros(len(completions), dtype=np.float32)
    components = {}
    details: list[dict[str, Any]] | None = None
    for name, weight in specs:
        entry = REWARDS.get(name)
        if entry.meta.get("batched"):  # fn(completions, examples) -> [N] or ([N], details): side by side
            fn = scorers[name] if scorers and name in scorers else entry.obj
            found = fn(list(completions), list(examples))
            if isinstance(found, tuple):
                found, per_completion = found
                details = details or [{} for _ in completions]
                for mine, detail in zip(details, per_completion):
                    mine[name] = detail
            values = np.asarray(found, dtype=np.float32)
        else:
            values = np.array(
                [entry.obj(completion, example) for completion, example in zip(completions, examples)],
                dtype=np.float32,
            )
        components[name] = values
        total += np.float32(weight) * values
    return total, components, details


def accuracy(completions: list[str], examples: list[dict], components: dict[str, np.ndarray]) -> np.ndarray:
    """[N] bool: which completions are correct, given `score`'s components for them. With
    `math_answer` among the rewards, its values (math-verify already judged every completion:
    not twice); with `code_tests`, every test passed; otherwise `is_correct` per completion."""
    if "math_answer" in components:
        return components["math_answer"] == 1.0
    if "code_tests" in components:
        return components["code_tests"] == 1.0
    return np.array([is_correct(c, e) for c, e in zip(completions, examples)], dtype=bool)


def is_correct(completion: str, example: dict) -> bool:
    """The accuracy criterion of a run without `math_answer` (see `accuracy`).

    Countdown examples (with "numbers" and "target"): the countdown verifier. Code examples (with
    "tests"): every test passes (`code_tests`).
    Otherwise: exact match (stripped), or, for a numeric answer, numeric_match.
    """
    if "numbers" in example and "target" in example:
        return countdown(completion, example) == 1.0
    if "tests" in example:  # code: every unit test passes (run in the sandbox)
        return bool(code_tests([completion], [example])[0][0] == 1.0)
    return exact_match(completion, example) == 1.0 or numeric_match(completion, example) == 1.0

"""The text side of the `judge` reward, no model and no JAX: the prompt a judge model reads for one
completion (`judge_prompt`), and its verdict as a score in [0, 1] (`yes_no_score` from the
log-probs of its next token, `number_score` from the text it wrote). The model side, which loads the
judge and runs it over a step's completions, is `trainers.rollout.judge`.
"""

from __future__ import annotations

import math
import re
from typing import Any

JUDGE_MODES = ("yes_no", "number")

PLACEHOLDERS = ("{question}", "{reference}", "{completion}")
"""What a judge template may name; each is replaced by its text (no other brace is special, so a
template may hold JSON or code). `{completion}` is required: a judge that does not read the
completion judges nothing."""

DEFAULT_TEMPLATES = {
    "yes_no": (
        "You are grading an answer to a question.\n"
        "Question: {question}\n"
        "Reference answer: {reference}\n"
        "Answer to grade: {completion}\n"
        "Does the answer to grade agree with the reference answer? Reply with Yes or No."
    ),
    "number": (
        "You are grading an answer to a question.\n"
        "Question: {question}\n"
        "Reference answer: {reference}\n"
        "Answer to grade: {completion}\n"
        "Rate how well the answer to grade agrees with the reference answer, from 0 (not at all) to 10 "
        "(fully). Reply with the number only."
    ),
}
"""judge.template when it is left empty, per judge.mode."""

YES_WORDS = ("yes",)
NO_WORDS = ("no",)
"""The verdict words of yes_no mode: every token of the judge's vocabulary that is one of them in any
case, after the marks of a leading space or line break ("Yes", "\u2581yes", "\u0120YES", ...), counts as
"yes" or "no" (`rollout.judge.verdict_token_ids`); a token that only starts with one ("Yesterday") does not."""

_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")


def question_text(prompt: Any) -> str:
    """A dataset prompt as the judge's question: a string as it is; chat messages as the text of the
    last user message (the question the completion answers)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1])
    return "" if prompt is None else str(prompt)


def judge_prompt(template: str, example: dict, completion: str, special_texts: tuple[str, ...] = ()) -> str:
    """`template` with {question} (the example's prompt, `question_text`), {reference} (its "answer",
    "" when it has none) and {completion} replaced by their text. Replaced in one pass, so text that
    itself holds "{completion}" is not replaced again. Each of `special_texts` (the judge tokenizer's
    special tokens, e.g. "<|im_start|>") is removed from the three texts first, so a completion cannot
    write chat markup that closes the judge's question and answers it in the judge's place."""
    values = {
        "{question}": _without(question_text(example.get("prompt")), special_texts),
        "{reference}": _without(str(example.get("answer", "") or ""), special_texts),
        "{completion}": _without(completion, special_texts),
    }
    return re.sub("|".join(re.escape(p) for p in PLACEHOLDERS), lambda match: values[match.group(0)], template)


def _without(text: str, special_texts: tuple[str, ...]) -> str:
    """`text` with every occurrence of each of `special_texts` removed, until none is left (removing one
    cannot join the text around it into another)."""
    if not special_texts:
        return text
    pattern = re.compile("|".join(re.escape(t) for t in sorted(special_texts, key=len, reverse=True) if t))
    while True:
        shorter = pattern.sub("", text)
        if shorter == text:
            return text
        text = shorter


def template_problem(template: str) -> str | None:
    """Why `template` cannot be a judge template (it lacks {completion}), or None when it can."""
    if "{completion}" not in template:
        return "must contain {completion} (the completion to judge); it may also use {question} and {reference}"
    return None


def yes_no_score(logprob_yes: float, logprob_no: float) -> float:
    """p(yes) / (p(yes) + p(no)) from the two log-probs (each the log of the summed probability of its
    spellings' tokens), computed as a logistic of their difference (no underflow when both are tiny)."""
    difference = logprob_no - logprob_yes
    if difference > 0:
        odds = math.exp(-difference)
        return odds / (1.0 + odds)
    return 1.0 / (1.0 + math.exp(difference))


def number_score(output: str, scale: float) -> tuple[float, str]:
    """The first number in the judge's output divided by `scale`, clipped to [0, 1], and the reason
    when it is not read as given ("" when it is): "no number in the judge's output" (score 0),
    "clipped from <value>" when the number falls outside [0, scale]."""
    match = _NUMBER_RE.search(output)
    if match is None:
        return 0.0, "no number in the judge's output"
    value = float(match.group(0)) / scale
    if 0.0 <= value <= 1.0:
        return value, ""
    return min(max(value, 0.0), 1.0), f"clipped from {match.group(0)}"

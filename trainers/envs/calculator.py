"""The calculator environment: the model may call a calculator tool before it answers.

A tool call is the Hermes/Qwen format, one JSON object between tags (spaces and newlines inside the
tags are fine):

    <tool_call>{"name": "calculator", "arguments": {"expression": "39 - 28"}}</tool_call>

An assistant turn ends at "</tool_call>" (the environment's stop string) or at the model's
end-of-turn token. `step` answers each call of the turn (at most settings.max_calls_per_turn) with
one message {"role": "tool", "content": result}; the chat template wraps it in <tool_response> tags.
The result is the exact value (`arithmetic.format_number`: "11", "2.5", "1/3") or "error: <why>" for
a call that is not valid JSON, names another tool, lacks a string "expression", or whose expression
is too long, cannot be parsed, divides by zero or would have too many digits. After an error the
episode goes on, so the model can try again. A turn without a tool call is the final answer: the
episode ends, and the run's reward functions (math_answer, numeric_match) score the whole episode
text, whose last number is that answer's; the calculator adds no reward parts of its own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainers.envs.arithmetic import ArithmeticRefused, evaluate, format_number
from trainers.envs.base import Environment, EpisodeState, StepResult

TOOL_NAME = "calculator"
EXAMPLE_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>'

SYSTEM_PROMPT = (
    "You can use a calculator. To call it, write exactly:\n"
    f"{EXAMPLE_CALL}\n"
    "The result comes back in <tool_response></tool_response>. "
    "When you know the answer, give it in one short sentence that ends with the number."
)
"""The system prompt of the calculator demo: the tool explained once, and the answer format that
math_answer / numeric_match read (the last number of the episode; the arithmetic_words_calc prompts
end with the same instruction, word_problems.ANSWER_FORMAT)."""

# A call: from <tool_call> to </tool_call>, or to the end of the message when the closing tag was cut
# off as the turn's stop string.
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


class CalculatorSettings(BaseModel):
    """The calculator's `env.settings`."""

    model_config = ConfigDict(extra="forbid")

    max_expression_chars: int = Field(200, ge=1, le=10_000, description="Longest expression the calculator "
                                      "reads, in characters; a longer one gets an error reply.")
    max_result_digits: int = Field(30, ge=1, le=1_000, description="Most digits a number (a literal, an "
                                   "intermediate value or the result) may have; a larger one gets an error reply.")
    max_calls_per_turn: int = Field(4, ge=1, le=64, description="Tool calls answered per assistant turn; "
                                    "the rest get one error reply.")


def find_tool_calls(message: str) -> list[str]:
    """The text inside each <tool_call> of an assistant message, stripped, in order."""
    return [body.strip() for body in _TOOL_CALL_RE.findall(message)]


def answer_tool_call(body: str, settings: CalculatorSettings) -> tuple[str, bool]:
    """(the tool's reply, whether it is an error) for one call's text."""
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return f"error: the tool call is not valid JSON; write {EXAMPLE_CALL}", True
    if not isinstance(call, dict):
        return f"error: a tool call is a JSON object; write {EXAMPLE_CALL}", True
    name = call.get("name")
    if name != TOOL_NAME:
        shown = json.dumps(name)[:40] if name is not None else "no name"
        return f'error: unknown tool {shown}; the only tool is "{TOOL_NAME}"', True
    arguments: Any = call.get("arguments")
    if isinstance(arguments, str):  # arguments sent as a JSON string, as some chat formats do
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            pass
    expression = arguments.get("expression") if isinstance(arguments, dict) else None
    if not isinstance(expression, str):
        return 'error: "arguments" needs "expression", a string such as "12 + 7"', True
    if len(expression) > settings.max_expression_chars:
        return (f"error: the expression is {len(expression)} characters; at most "
                f"{settings.max_expression_chars}"), True
    try:
        value = evaluate(expression, settings.max_result_digits, settings.max_expression_chars)
    except ArithmeticRefused as refused:
        return f"error: {refused}", True
    return format_number(value), False


class Calculator(Environment):
    """Answers <tool_call> calculator calls until a turn has none (the final answer)."""

    name = "calculator"
    multi_turn = True
    Settings = CalculatorSettings
    stop_strings = ("</tool_call>",)
    reward_parts = ()  # the run's reward functions score the final answer

    def step(self, state: EpisodeState, assistant_message: str) -> StepResult:
        calls = find_tool_calls(assistant_message)
        if not calls:
            return StepResult(done=True)
        limit = self.settings.max_calls_per_turn
        messages, errors = [], 0
        for body in calls[:limit]:
            reply, failed = answer_tool_call(body, self.settings)
            messages.append({"role": "tool", "content": reply})
            errors += failed
        skipped = len(calls) - limit
        if skipped > 0:
            messages.append({"role": "tool", "content": f"error: at most {limit} tool calls per turn; the other "
                                                        f"{skipped} were not run"})
            errors += skipped
        return StepResult(messages=messages, done=False, tool_calls=len(calls), tool_errors=errors)

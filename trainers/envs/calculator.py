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
episode ends, and the run's reward functions (math_answer, numeric_match) score that LAST ASSISTANT
TURN only (`Episode.final_text` in trainers/rollout/collect.py `score_sequences`), not the whole
episode text: a number in a tool call or a tool's reply earns nothing by itself. The calculator adds
no reward parts of its own.

settings.demonstration: `reset` puts one worked example before the question, as chat messages (a
user question in the arithmetic_words_calc style, the assistant's tool call, the tool's result, the
assistant's one-sentence answer): SmolLM2-135M-Instruct writes no tool call from SYSTEM_PROMPT alone
(0 in 256 samples at T=0.7) but does with one example, so GRPO has calls to reinforce. It needs a
chat model (data.chat_template). The tool message's content is the bare result, as `step` replies:
the tokenizer wraps both in <tool_response> tags the same way, so the example renders exactly like
a real episode.

settings.enabled=false is the no-tool twin of a run: the environment answers nothing, the first turn
is the final answer, and the demonstration (if on) answers directly ("Ana has 12 + 7 = 19 apples
now."), so the two runs see the same answer format and one example each and differ only in the tool.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainers.data.chat_template import validate_messages
from trainers.data.word_problems import ANSWER_FORMAT
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
math_answer / numeric_match read (the last number of the final answer turn; the arithmetic_words_calc prompts
end with the same instruction, word_problems.ANSWER_FORMAT)."""

DEMO_QUESTION = f"Ana has 12 apples. Ben gives Ana 7 more. How many apples does Ana have now? {ANSWER_FORMAT}"
"""The demonstration's question: an arithmetic_words_calc "add" story, but with a one-digit number (7),
which that task's additions never have (both numbers 10..999), so it is no real prompt."""

DEMONSTRATION = (
    {"role": "user", "content": DEMO_QUESTION},
    {"role": "assistant", "content": EXAMPLE_CALL},
    {"role": "tool", "content": "19"},
    {"role": "assistant", "content": "Ana has 19 apples now."},
)
"""The worked example `reset` puts before the question (settings.demonstration): the call of
SYSTEM_PROMPT, its result as `step` would reply it, and the answer in ANSWER_FORMAT."""

DEMONSTRATION_NO_TOOL = (
    {"role": "user", "content": DEMO_QUESTION},
    {"role": "assistant", "content": "Ana has 12 + 7 = 19 apples now."},
)
"""The same example for the no-tool twin (settings.enabled=false): answered directly."""

# A call: from <tool_call> to </tool_call>, or to the end of the message when the closing tag was cut
# off as the turn's stop string.
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


class CalculatorSettings(BaseModel):
    """The calculator's `env.settings`."""

    model_config = ConfigDict(extra="forbid")

    max_expression_chars: int = Field(
        200,
        ge=1,
        le=10_000,
        description="Longest expression the calculator reads, in characters; a longer one gets an error reply.",
    )
    max_result_digits: int = Field(
        30,
        ge=1,
        le=1_000,
        description="Most digits a number (a literal, an "
        "intermediate value or the result) may have; a larger one gets an error reply.",
    )
    max_calls_per_turn: int = Field(
        4, ge=1, le=64, description="Tool calls answered per assistant turn; the rest get one error reply."
    )
    demonstration: bool = Field(
        False,
        description="Put one worked example (a word problem, the calculator "
        "call, its result, a one-sentence answer) before each question as chat messages. "
        "Needs a chat model (data.chat_template).",
    )
    enabled: bool = Field(
        True,
        description="false: the no-tool twin of a run; the calculator answers nothing, "
        "the first turn is the final answer and the demonstration answers without the tool.",
    )
    call_bonus: float = Field(
        0.0,
        ge=0.0,
        le=10.0,
        description="Reward part tool_call (reward/env/tool_call): "
        "this much, once per episode, for its first call the calculator answers without "
        "an error (0 = off). Shaping for a model that rarely calls the tool by itself.",
    )


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
        return (f"error: the expression is {len(expression)} characters; at most {settings.max_expression_chars}"), True
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
    reward_parts = ()  # the run's reward functions score the final answer (tool_call with a call_bonus)

    def __init__(self, settings: CalculatorSettings | None = None) -> None:
        super().__init__(settings)
        if not self.settings.enabled:
            self.stop_strings = ()  # no tool: a turn ends only at the end-of-turn token, as single_turn's
        if self.settings.call_bonus > 0:
            self.reward_parts = ("tool_call",)

    def reset(self, example: dict[str, Any]) -> str | list[dict[str, str]]:
        """The example's prompt; with settings.demonstration, chat messages: the prompt's own system
        messages (they must stay first), the worked example, then the prompt's other messages (a
        string prompt is one user message)."""
        prompt = example["prompt"]
        if not self.settings.demonstration:
            return prompt
        messages = validate_messages(prompt)
        example_messages = DEMONSTRATION if self.settings.enabled else DEMONSTRATION_NO_TOOL
        system = [m for m in messages if m["role"] == "system"]
        rest = [m for m in messages if m["role"] != "system"]
        return system + [dict(m) for m in example_messages] + rest

    def step(self, state: EpisodeState, assistant_message: str) -> StepResult:
        if not self.settings.enabled:
            return StepResult(done=True)
        calls = find_tool_calls(assistant_message)
        if not calls:
            return StepResult(done=True)
        limit = self.settings.max_calls_per_turn
        messages, errors, parts = [], 0, {}
        for body in calls[:limit]:
            reply, failed = answer_tool_call(body, self.settings)
            messages.append({"role": "tool", "content": reply})
            errors += failed
            if not failed and self.settings.call_bonus > 0 and not state.data.get("call_bonus_paid"):
                state.data["call_bonus_paid"] = True
                parts["tool_call"] = self.settings.call_bonus
        skipped = len(calls) - limit
        if skipped > 0:
            messages.append(
                {
                    "role": "tool",
                    "content": f"error: at most {limit} tool calls per turn; the other {skipped} were not run",
                }
            )
            errors += skipped
        return StepResult(messages=messages, reward_parts=parts, done=False, tool_calls=len(calls), tool_errors=errors)

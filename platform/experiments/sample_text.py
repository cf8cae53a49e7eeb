"""Rollout samples as readable text: how a prompt is stored, and how the run page shows it.

Stored (`RolloutSample.prompt` / `.extra`, written by runner.db_hooks):
  * a plain string prompt: the string itself;
  * a chat run (a model whose chat template renders the prompts): the text the model was given,
    rendered by the template (special tokens such as `<|im_start|>` included), with
    extra["prompt_messages"] = the messages it was rendered from and extra["prompt_format"] = "chat_template";
  * a message list without a rendering: its JSON, extra["prompt_messages"] and
    extra["prompt_format"] = "messages".

Shown: a list of segments `{"kind": "text" | "special" | "role", "text": str}` that the page's
script turns into text nodes and spans (never HTML): special-token strings are their own
segments (shown muted), and a role name right after one (`<|im_start|>user`,
`<|start_header_id|>user<|end_header_id|>`) or heading a message is a "role" segment (a small label).
"""

from __future__ import annotations

import json
import re
from typing import Any

# Special-token strings of the chat formats in use: <|im_start|>, <|im_end|>, <|endoftext|> (ChatML:
# SmolLM2, Qwen), <|begin_of_text|>, <|start_header_id|>, <|eot_id|> (Llama 3), <s>, </s>, [INST],
# [/INST], <<SYS>>, <</SYS>> (Llama 2).
SPECIAL_TOKEN = re.compile(r"<\|[^<>|\s]{1,64}\|>|</?s>|\[/?INST\]|<</?SYS>>")
ROLE_NAMES = ("system", "user", "assistant", "tool", "ipython", "developer")
_ROLE_AFTER_SPECIAL = re.compile(rf"({'|'.join(ROLE_NAMES)})(?=\n|<\||$)")

FORMAT_CHAT_TEMPLATE = "chat_template"
FORMAT_MESSAGES = "messages"


def stored_prompt(prompt: Any, rendered: tuple[str, list[dict]] | None = None) -> tuple[str, dict[str, Any]]:
    """(text for RolloutSample.prompt, keys for RolloutSample.extra) of one sample's prompt.
    `rendered`: (the chat template's text, the messages it rendered) when the run renders prompts."""
    if rendered is not None:
        text, messages = rendered
        return text, {"prompt_messages": messages, "prompt_format": FORMAT_CHAT_TEMPLATE}
    if isinstance(prompt, list):
        return json.dumps(prompt, ensure_ascii=False), {"prompt_messages": prompt, "prompt_format": FORMAT_MESSAGES}
    return ("" if prompt is None else str(prompt)), {}


def segments(text: str) -> list[dict[str, str]]:
    """`text` cut into text, special-token and role segments (see the module docstring)."""
    out: list[dict[str, str]] = []
    position = 0
    for match in SPECIAL_TOKEN.finditer(text):
        if match.start() > position:
            _add_text(out, text[position : match.start()])
        out.append({"kind": "special", "text": match.group()})
        position = match.end()
        role = _ROLE_AFTER_SPECIAL.match(text, position)
        if role:
            out.append({"kind": "role", "text": role.group()})
            position = role.end()
    if position < len(text):
        _add_text(out, text[position:])
    return out


def _add_text(out: list[dict[str, str]], text: str) -> None:
    if out and out[-1]["kind"] == "text":
        out[-1]["text"] += text
    else:
        out.append({"kind": "text", "text": text})


def message_segments(messages: list[Any]) -> list[dict[str, str]]:
    """A message list as segments: each message's role as a label, then its content, one per line."""
    out: list[dict[str, str]] = []
    for index, message in enumerate(messages):
        if index:
            _add_text(out, "\n")
        if isinstance(message, dict):
            out.append({"kind": "role", "text": str(message.get("role", "?"))})
            out.extend(segments(" " + str(message.get("content", ""))))
        else:
            out.extend(segments(json.dumps(message, ensure_ascii=False)))
    return out


def prompt_segments(prompt: str, extra: dict[str, Any] | None) -> list[dict[str, str]]:
    """A stored prompt's segments: a message list without a rendering shows its roles; any other
    prompt (plain, or rendered by a chat template) is cut at its special tokens."""
    extra = extra if isinstance(extra, dict) else {}
    messages = extra.get("prompt_messages")
    if extra.get("prompt_format") == FORMAT_MESSAGES and isinstance(messages, list):
        return message_segments(messages)
    return segments(prompt)

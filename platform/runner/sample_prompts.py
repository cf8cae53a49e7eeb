"""The prompts of a chat run as its model sees them, for the rollout samples the run page shows.

A run on a Hugging Face model whose prompts go through the chat template (`data.chat_template`, or
null with a tokenizer that has one) trains on the template's rendering of each prompt (a string is
one user message; `data.system_prompt` comes first where no message is a system one). The trainer
reports the dataset's prompt; `chat_prompts_for(config)` gives DatabaseHooks the function that
renders it the same way (trainers' own tokenizer and template code), so the page can show the roles
and the special tokens the model was given. Runs inside the trainer child process, which has the
tokenizer files at hand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainers.config import ExperimentConfig

log = logging.getLogger(__name__)


class ChatPrompts:
    """prompt -> (the chat template's text, the messages rendered), as the trainer encodes it
    (HFTokenizer.encode_prompt with chat=True)."""

    def __init__(self, tokenizer: Any, system_prompt: str | None):
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt

    def __call__(self, prompt: Any) -> tuple[str, list[dict]]:
        from trainers.data.chat_template import validate_messages

        messages = validate_messages(prompt)
        if self.system_prompt is not None and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": self.system_prompt}] + messages
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True), messages


def chat_prompts_for(config: ExperimentConfig) -> Callable[[Any], tuple[str, list[dict]]] | None:
    """The renderer for a chat run under `config`, else None (a toy preset, the character
    tokenizer, or the template turned off). A tokenizer that cannot be loaded gives None too: the
    trainer then fails with its own message."""
    if config.model.path is None:
        return None
    from trainers.loop.policy import tokenizer_for

    try:
        tokenizer = tokenizer_for(config)
    except Exception:  # noqa: BLE001 - the trainer reports it
        log.warning("cannot load the tokenizer of %s to show chat prompts", config.model.path, exc_info=True)
        return None
    has_template = bool(getattr(tokenizer, "has_chat_template", False))
    chat = has_template if config.data.chat_template is None else config.data.chat_template
    if not (chat and has_template):
        return None
    return ChatPrompts(tokenizer, config.data.system_prompt)

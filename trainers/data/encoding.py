"""Prompts -> token arrays the model takes: each prompt's ids (BOS + text, or the rendered chat
template), left-padded to the longest prompt, optionally rounded up to a bucket of lengths."""

from __future__ import annotations

import numpy as np

from trainers.data.examples import DataError


def encode_prompts(
    tokenizer,
    prompts: list,
    max_prompt_tokens: int,
    *,
    chat: bool = False,
    system_prompt: str | None = None,
    bucket_tokens: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Encodes prompts with `tokenizer.encode_prompt` and left-pads them to one width.

    Args:
      tokenizer: has encode_prompt(prompt, chat=, system_prompt=) and pad_id (CharTokenizer, HFTokenizer).
      prompts: B prompts (B >= 1), each a string or a list of {"role", "content"} chat messages.
      max_prompt_tokens: limit on one prompt's token count, special and chat-template tokens included;
        also the largest width the padding may reach.
      chat: render each prompt with the tokenizer's chat template (a string = one user message).
      system_prompt: with chat, a system message put first in conversations that have none.
      bucket_tokens: the width Lp is the longest prompt rounded UP to a multiple of this (capped at
        max_prompt_tokens), so a jitted step sees few distinct prompt shapes; 1 = the longest exactly.

    Returns:
      tokens: [B, Lp] int32, padding (pad_id) on the left.
      valid: [B, Lp] bool, True on real tokens (BOS / template tokens included), False on padding.

    Raises DataError if prompts is empty, bucket_tokens < 1, a prompt cannot be encoded (e.g. a
    message list without chat), encodes to no tokens, or exceeds max_prompt_tokens.
    """
    if not prompts:
        raise DataError("encode_prompts needs at least one prompt")
    if bucket_tokens < 1:
        raise DataError(f"bucket_tokens must be >= 1, got {bucket_tokens}")
    encoded = []
    for index, prompt in enumerate(prompts):
        try:
            encoded.append(tokenizer.encode_prompt(prompt, chat=chat, system_prompt=system_prompt))
        except DataError:
            raise
        except ValueError as error:
            raise DataError(f"prompt {index}: {error} ({_preview(prompt)})") from error
    for index, ids in enumerate(encoded):
        if len(ids) > max_prompt_tokens:
            raise DataError(
                f"prompt {index} is {len(ids)} tokens ({'chat template' if chat else 'special tokens'} included), "
                f"over the limit max_prompt_tokens={max_prompt_tokens}: {_preview(prompts[index])}"
            )
        if not ids:
            raise DataError(
                f"prompt {index} encodes to no tokens (an empty prompt and no BOS): {_preview(prompts[index])}"
            )
    longest = max(len(ids) for ids in encoded)
    length_tokens = min(-(-longest // bucket_tokens) * bucket_tokens, max_prompt_tokens)
    tokens = np.full((len(encoded), length_tokens), tokenizer.pad_id, dtype=np.int32)
    valid = np.zeros((len(encoded), length_tokens), dtype=bool)
    for row, ids in enumerate(encoded):
        tokens[row, length_tokens - len(ids) :] = ids
        valid[row, length_tokens - len(ids) :] = True
    return tokens, valid


def _preview(prompt) -> str:
    """The first 60 characters of a prompt (a string, or a conversation's last message) for messages."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return f"{len(prompt)} messages, last {str(prompt[-1].get('content', ''))[:60]!r}"
    if isinstance(prompt, str):
        return repr(prompt[:60])
    return repr(prompt)[:60]

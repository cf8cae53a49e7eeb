"""Prompts -> token arrays the model takes: each prompt's ids (BOS + text, or the rendered chat
template), left-padded to the longest prompt, optionally rounded up to a bucket of lengths; and an
environment's reply in a multi-turn episode -> the ids that continue the sequence (`encode_reply`)."""

from __future__ import annotations

import hashlib
import json
import threading

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
    cache: PromptIdCache | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Encodes prompts with `tokenizer.encode_prompt` and left-pads them to one width.

    Args:
      tokenizer: has encode_prompt(prompt, chat=, system_prompt=) and pad_id (CharTokenizer, HFTokenizer).
      prompts: B prompts (B >= 1), each a string or a list of {"role", "content"} chat messages.
      max_prompt_tokens: limit on one prompt's token count, special and chat-template tokens included;
        also the largest width the padding may reach.
      chat: render each prompt with the tokenizer's chat template (a string = one user message).
      system_prompt: with chat, a system message put first in conversations that have none.
      bucket_tokens: the width Lp is the longest prompt rounded UP to the next bucket (`bucket_width`:
        bucket_tokens x 1, 2, 3, 4, 6, 8, 12, 16, ..., capped at max_prompt_tokens), so a jitted step
        sees few distinct prompt shapes (at most ~2 per doubling of the length); 1 = the longest exactly.
      cache: token ids of prompts already encoded (`PromptIdCache`), so a prompt seen before is not
        rendered and tokenized again; None = encode every prompt.

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
        key = None if cache is None else cache.key(tokenizer, prompt, chat, system_prompt)
        ids = None if key is None else cache.get(key)
        if ids is None:
            try:
                ids = tokenizer.encode_prompt(prompt, chat=chat, system_prompt=system_prompt)
            except DataError:
                raise
            except ValueError as error:
                raise DataError(f"prompt {index}: {error} ({_preview(prompt)})") from error
            if key is not None:
                cache.put(key, ids)
        encoded.append(ids)
    for index, ids in enumerate(encoded):
        if len(ids) > max_prompt_tokens:
            raise DataError(
                f"prompt {index} is {len(ids)} tokens ({'chat template' if chat else 'special tokens'} included), "
                f"over the limit max_prompt_tokens={max_prompt_tokens}: {_preview(prompts[index])}"
            )
        if len(ids) == 0:
            raise DataError(
                f"prompt {index} encodes to no tokens (an empty prompt and no BOS): {_preview(prompts[index])}"
            )
    longest = max(len(ids) for ids in encoded)
    length_tokens = min(bucket_width(longest, bucket_tokens), max_prompt_tokens)
    tokens = np.full((len(encoded), length_tokens), tokenizer.pad_id, dtype=np.int32)
    valid = np.zeros((len(encoded), length_tokens), dtype=bool)
    for row, ids in enumerate(encoded):
        tokens[row, length_tokens - len(ids) :] = ids
        valid[row, length_tokens - len(ids) :] = True
    return tokens, valid


PROMPT_BUCKET_TOKENS = 16
"""A pretrained model's prompts are left-padded to the next of 16 x (1, 2, 3, 4, 6, 8, 12, ...) tokens
(`bucket_width`), so steps whose longest prompts differ share one compiled generation and update:
about two widths per doubling of the prompt length (the toy tasks' prompts keep their exact length,
`prompt_bucket_tokens`)."""


def prompt_bucket_tokens(pretrained: bool) -> int:
    """The bucket a run's prompt widths round up to: PROMPT_BUCKET_TOKENS for a pretrained model
    (model.path), 1 (the exact length) for a preset's toy tokenizer."""
    return PROMPT_BUCKET_TOKENS if pretrained else 1


def bucket_width(tokens: int, bucket_tokens: int) -> int:
    """The smallest width >= tokens among bucket_tokens x (1, 2, 3, 4, 6, 8, 12, 16, 24, ...) (each
    step x 1.5 or x 4/3: powers of two and 1.5 x powers of two), so lengths up to L meet about
    2 log2(L / bucket_tokens) widths, each padded by less than half its length; bucket_tokens = 1
    gives `tokens` itself (no buckets).
    bucket_width(40, 16) = 48, bucket_width(49, 16) = 64, bucket_width(70, 16) = 96, bucket_width(97, 16) = 128."""
    if bucket_tokens == 1:
        return tokens
    multiple = 1
    while multiple * bucket_tokens < tokens:
        multiple = 2 if multiple == 1 else (multiple * 3 // 2 if multiple & (multiple - 1) == 0 else multiple * 4 // 3)
    return multiple * bucket_tokens


class PromptIdCache:
    """Token ids of prompts already encoded (`encode_prompts(cache=...)`), keyed by the tokenizer, a
    digest of the prompt (text, or its messages) and how it is rendered (chat, system prompt): a run
    encodes each of its prompts once, not once per step. Holds at most `max_prompts` prompts (the
    oldest is dropped), as int32 arrays: ~4 bytes a token plus ~150 bytes a prompt. Safe to share
    between threads (the asynchronous collector and the trainer's evaluation)."""

    def __init__(self, max_prompts: int = 32768):
        self.max_prompts = max_prompts
        self._ids: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(tokenizer, prompt, chat: bool, system_prompt: str | None) -> tuple:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return (id(tokenizer), isinstance(prompt, str), digest, chat, system_prompt)

    def get(self, key: tuple) -> np.ndarray | None:
        with self._lock:
            return self._ids.get(key)

    def put(self, key: tuple, ids) -> None:
        array = np.asarray(ids, dtype=np.int32)
        array.flags.writeable = False
        with self._lock:
            if key not in self._ids and len(self._ids) >= self.max_prompts:
                del self._ids[next(iter(self._ids))]
            self._ids[key] = array

    def __len__(self) -> int:
        return len(self._ids)


def _preview(prompt) -> str:
    """The first 60 characters of a prompt (a string, or a conversation's last message) for messages."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return f"{len(prompt)} messages, last {str(prompt[-1].get('content', ''))[:60]!r}"
    if isinstance(prompt, str):
        return repr(prompt[:60])
    return repr(prompt)[:60]


_MARK = "\u2063turn-end\u2063"  # stands for the assistant's text, to find what the template writes after it


def encode_reply(tokenizer, history: list[dict], reply: list[dict], *, chat: bool, ended_by: str = "") -> list[int]:
    """The token ids that continue a multi-turn episode after an assistant turn: the rest of that
    turn's closing (what the chat template writes after the assistant's text, less `ended_by`, the
    end-of-turn text the model itself wrote), the reply messages and the next assistant header.

    history: the conversation so far, ending with the assistant turn ({"role": "assistant",
    "content": its text}). reply: the environment's messages (role "tool" or "user"; the tokenizer
    wraps a tool message in <tool_response> tags where its template does not: `apply_chat_template`).
    chat=False (no template: the character tokenizer): each message's content on its own line.
    Raises ValueError when the template does not render the reply as a continuation of the history.
    """
    if not chat:
        return tokenizer.encode("".join("\n" + message["content"] for message in reply) + "\n", add_bos=False)
    before = tokenizer.apply_chat_template(history, add_generation_prompt=False)
    after = tokenizer.apply_chat_template(history + reply, add_generation_prompt=True)
    if not after.startswith(before):
        raise ValueError(
            "the chat template renders the conversation differently once the reply is added, so the "
            "reply cannot continue the sequence"
        )
    marked = tokenizer.apply_chat_template(
        history[:-1] + [dict(history[-1], content=_MARK)], add_generation_prompt=False
    )
    closing = marked[marked.index(_MARK) + len(_MARK) :] if _MARK in marked else ""
    if ended_by and closing.startswith(ended_by):
        closing = closing[len(ended_by) :]
    return tokenizer.encode(closing + after[len(before) :], add_bos=False)

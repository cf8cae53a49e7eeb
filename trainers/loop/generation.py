"""Completions of a loaded policy for a list of prompts (the `generate` command): encode with the
policy's tokenizer (and chat template), generate in batches, decode up to the first EOS."""

from __future__ import annotations

from typing import Any

import jax

from trainers.data.encoding import PROMPT_BUCKET_TOKENS, encode_prompts
from trainers.loop.policy import LoadedPolicy
from trainers.models.generate import SamplingParams, eos_settings, generate

BATCH_PROMPTS = 16
MAX_PROMPT_TOKENS = 32_768


def complete(policy: LoadedPolicy, prompts: list[Any], *, chat: bool, system_prompt: str | None = None,
             max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0) -> list[str]:
    """One completion per prompt (text or a list of {role, content} messages), in order."""
    tokenizer = policy.tokenizer
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, **eos_settings(tokenizer))
    key = jax.random.key(seed)
    out: list[str] = []
    for first in range(0, len(prompts), BATCH_PROMPTS):
        batch = prompts[first:first + BATCH_PROMPTS]
        tokens, valid = encode_prompts(tokenizer, batch, MAX_PROMPT_TOKENS, chat=chat, system_prompt=system_prompt,
                                       bucket_tokens=PROMPT_BUCKET_TOKENS)
        result = generate(policy.graphdef, policy.params, tokens, valid, jax.random.fold_in(key, first), sampling)
        out.extend(tokenizer.decode_completion(row[mask]) for row, mask in zip(result.tokens, result.mask))
    return out

"""Completions of a loaded policy for a list of prompts (the `generate` command): encode with the
policy's tokenizer (and chat template), generate with the engine (continuous batching over
BATCH_PROMPTS slots; every prompt its own draws, from fold_in(seed key, its batch's first index)),
decode up to the first EOS."""

from __future__ import annotations

from typing import Any

import jax

from trainers.data.encoding import PROMPT_BUCKET_TOKENS, encode_prompts
from trainers.engine.batching import EngineSettings, generate_paged, micro_batch_uniforms
from trainers.loop.policy import LoadedPolicy
from trainers.models.generate import SamplingParams, eos_settings

BATCH_PROMPTS = 16
MAX_PROMPT_TOKENS = 32_768


def complete(
    policy: LoadedPolicy,
    prompts: list[Any],
    *,
    chat: bool,
    system_prompt: str | None = None,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[str]:
    """One completion per prompt (text or a list of {role, content} messages), in order."""
    tokenizer = policy.tokenizer
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, **eos_settings(tokenizer))
    key = jax.random.key(seed)
    if not prompts:
        return []
    tokens, valid = encode_prompts(
        tokenizer,
        prompts,
        MAX_PROMPT_TOKENS,
        chat=chat,
        system_prompt=system_prompt,
        bucket_tokens=PROMPT_BUCKET_TOKENS,
    )
    # batch k of BATCH_PROMPTS prompts draws from fold_in(key, k x BATCH_PROMPTS), as before the engine
    uniforms = micro_batch_uniforms(key, 0, len(prompts), BATCH_PROMPTS, max_new_tokens, call_stride=BATCH_PROMPTS)
    result, _ = generate_paged(
        policy.graphdef,
        policy.params,
        tokens,
        valid,
        key,
        sampling,
        EngineSettings(num_slots=min(BATCH_PROMPTS, len(prompts))),
        uniforms=uniforms,
    )
    return [tokenizer.decode_completion(row[mask]) for row, mask in zip(result.tokens, result.mask)]

"""Prompts -> token arrays the model takes: BOS + tokens, left-padded to the longest prompt."""

from __future__ import annotations

import numpy as np

from trainers.data.examples import DataError


def encode_prompts(tokenizer, prompts: list[str], max_prompt_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Encodes prompts as BOS + characters, left-padded to the longest prompt here.

    Args:
      tokenizer: has encode(text, add_bos=True) and pad_id.
      prompts: B prompt strings (B >= 1).
      max_prompt_tokens: limit on one prompt's token count, BOS included.

    Returns:
      tokens: [B, Lp] int32, Lp = longest encoded prompt; padding (pad_id) on the left.
      valid: [B, Lp] bool, True on real tokens (BOS included), False on padding.

    Raises DataError if prompts is empty or a prompt exceeds max_prompt_tokens.
    """
    if not prompts:
        raise DataError("encode_prompts needs at least one prompt")
    encoded = [tokenizer.encode(prompt, add_bos=True) for prompt in prompts]
    for index, ids in enumerate(encoded):
        if len(ids) > max_prompt_tokens:
            raise DataError(
                f"prompt {index} is {len(ids)} tokens (BOS included), over the limit "
                f"max_prompt_tokens={max_prompt_tokens}: {prompts[index][:60]!r}"
            )
    length_tokens = max(len(ids) for ids in encoded)
    tokens = np.full((len(encoded), length_tokens), tokenizer.pad_id, dtype=np.int32)
    valid = np.zeros((len(encoded), length_tokens), dtype=bool)
    for row, ids in enumerate(encoded):
        tokens[row, length_tokens - len(ids) :] = ids
        valid[row, length_tokens - len(ids) :] = True
    return tokens, valid

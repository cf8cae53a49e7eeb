"""Few prompt widths (geometric buckets) and prompts encoded once per run (PromptIdCache)."""

from __future__ import annotations

import numpy as np
import pytest

from trainers.data.encoding import PromptIdCache, bucket_width, encode_prompts
from trainers.data.examples import DataError
from trainers.data.tokenizer import CharTokenizer


def test_bucket_width():
    assert [bucket_width(n, 16) for n in (1, 16, 17, 32, 33, 48, 49, 64, 65, 96, 97, 128, 129, 192, 193)] == [
        16,
        16,
        32,
        32,
        48,
        48,
        64,
        64,
        96,
        96,
        128,
        128,
        192,
        192,
        256,
    ]
    assert [bucket_width(n, 1) for n in (1, 5, 37)] == [1, 5, 37]  # no buckets
    assert [bucket_width(n, 4) for n in (3, 5, 9, 13, 17, 25)] == [4, 8, 12, 16, 24, 32]
    # every width below 4096 tokens falls in one of few buckets, each padded by less than half
    widths = {bucket_width(n, 16) for n in range(1, 4097)}
    assert len(widths) == 16  # 16, 32, 48, 64, 96, ..., 3072, 4096
    assert all(bucket_width(n, 16) < 1.5 * n + 16 for n in range(1, 4097))


class CountingTokenizer(CharTokenizer):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def encode_prompt(self, prompt, chat=False, system_prompt=None):
        self.calls += 1
        return super().encode_prompt(prompt, chat=chat, system_prompt=system_prompt)


def test_cache_encodes_each_prompt_once_with_the_same_arrays():
    tokenizer, cache = CountingTokenizer(), PromptIdCache()
    prompts = ["ab", "abcde", "x"]
    plain = encode_prompts(CharTokenizer(), prompts, max_prompt_tokens=16, bucket_tokens=4)
    first = encode_prompts(tokenizer, prompts, max_prompt_tokens=16, bucket_tokens=4, cache=cache)
    again = encode_prompts(tokenizer, prompts[::-1] + ["new"], max_prompt_tokens=16, bucket_tokens=4, cache=cache)
    assert tokenizer.calls == 4 and len(cache) == 4
    for a, b in zip(plain, first):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(again[0][:3], first[0][::-1])
    # a cached prompt over the limit is still refused
    with pytest.raises(DataError, match="over the limit max_prompt_tokens=4"):
        encode_prompts(tokenizer, ["abcde"], max_prompt_tokens=4, cache=cache)
    # the rendering is part of the key: another system prompt is another entry
    key = PromptIdCache.key(tokenizer, "ab", False, None)
    assert key != PromptIdCache.key(tokenizer, "ab", True, None) != PromptIdCache.key(tokenizer, "ab", True, "s")
    assert key != PromptIdCache.key(tokenizer, [{"role": "user", "content": "ab"}], False, None)


def test_cache_is_bounded():
    tokenizer, cache = CountingTokenizer(), PromptIdCache(max_prompts=3)
    for text in ["a", "b", "c", "d"]:
        encode_prompts(tokenizer, [text], max_prompt_tokens=8, cache=cache)
    assert len(cache) == 3
    encode_prompts(tokenizer, ["d", "b"], max_prompt_tokens=8, cache=cache)
    assert tokenizer.calls == 4  # "b" and "d" were kept
    encode_prompts(tokenizer, ["a"], max_prompt_tokens=8, cache=cache)
    assert tokenizer.calls == 5  # "a", the oldest, was dropped when "d" came


def test_rollouts_encode_each_prompt_once(tmp_path):
    from trainers.config import parse_config
    from trainers.loop.trainer import GRPOTrainer

    config = parse_config(
        {
            "model": {"preset": "tiny"},
            "rollout": {"max_new_tokens": 4},
            "data": {"train_prompts": 8},
            "batch": {"prompts_per_step": 4},
            "grpo": {"num_generations": 2},
            "train": {"max_steps": 3},
            "checkpoint": {"every_steps": 0},
        }
    )
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    calls = []
    encode = trainer.tokenizer.encode_prompt
    trainer.tokenizer.encode_prompt = lambda prompt, **kw: calls.append(prompt) or encode(prompt, **kw)
    trainer.source.start(trainer.state.params, 0)
    for step in range(3):
        trainer.source.publish(trainer.state.params, step)
        trainer.source.next(step)
    assert calls == []  # every training prompt was encoded once, when the trainer checked they fit

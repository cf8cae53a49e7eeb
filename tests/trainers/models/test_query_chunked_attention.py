"""Attention over long query spans runs in chunks of `QUERY_CHUNK_TOKENS` queries, each recomputed
in the backward pass: the log-probs, entropies and gradients equal those of the whole-span einsum
path (chunks made small here so that a tiny model's short sequences span several, the last one
padded), and the program holds one chunk's scores instead of every query's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from trainers.models import transformer as model_lib
from trainers.models.presets import PRESETS

TINY = PRESETS["tiny"]


def batch(rng: np.random.Generator):
    """4 sequences: prompts of 5 and 3 tokens left-padded to 5, completions of 0 to 15 tokens
    right-padded to 15 (20 positions: 3 chunks of 8, the last one padded)."""
    prompt_valid = np.arange(5)[None, :] >= np.array([0, 0, 2, 2])[:, None]
    prompt_tokens = np.where(prompt_valid, rng.integers(3, TINY.vocab_size, size=(4, 5)), 0).astype(np.int32)
    completion_mask = np.arange(15)[None, :] < np.array([15, 4, 0, 9])[:, None]
    completion_tokens = np.where(completion_mask, rng.integers(3, TINY.vocab_size, size=(4, 15)), 0)
    return prompt_tokens, prompt_valid, completion_tokens.astype(np.int32), completion_mask


def loss_and_grads(monkeypatch, chunk_tokens: int, b, weights):
    monkeypatch.setattr(model_lib, "QUERY_CHUNK_TOKENS", chunk_tokens)
    graphdef, params = model_lib.init_params(TINY, seed=0)

    def loss(p):
        lp, entropy = model_lib.completion_logprobs(graphdef, p, *b, 0.9)
        return jnp.sum(weights * lp), (lp, entropy)

    (value, (lp, entropy)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return value, lp, entropy, grads


def test_chunked_queries_give_the_whole_span_values_and_gradients(monkeypatch):
    rng = np.random.default_rng(5)
    b = batch(rng)
    weights = rng.normal(size=b[2].shape).astype(np.float32)
    whole = loss_and_grads(monkeypatch, 1 << 20, b, weights)
    chunked = loss_and_grads(monkeypatch, 8, b, weights)
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-5)
    np.testing.assert_allclose(chunked[1], whole[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(chunked[2], whole[2], rtol=1e-5, atol=1e-5)
    for a, c in zip(jax.tree.leaves(chunked[3]), jax.tree.leaves(whole[3])):
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-6)
    assert np.abs(chunked[1]).sum() > 0  # (the comparison is of real values)


def test_the_backward_pass_keeps_one_chunks_scores(monkeypatch):
    """The compiled gradient of 1 sequence of 512 positions: with chunks of 64 queries its temporary
    memory is a fraction of the whole span's, whose [heads, 512, 512] float32 scores and
    probabilities are kept for every layer."""
    graphdef, params = model_lib.init_params(TINY, seed=0)
    tokens = jnp.ones((1, 512), jnp.int32)

    def temp_bytes(chunk_tokens: int) -> int:
        monkeypatch.setattr(model_lib, "QUERY_CHUNK_TOKENS", chunk_tokens)

        def loss(p):
            valid = jnp.ones((1, 8), bool)
            mask = jnp.ones((1, 504), bool)
            lp, _ = model_lib.completion_logprobs(graphdef, p, tokens[:, :8], valid, tokens[:, 8:], mask, 1.0)
            return lp.sum()

        compiled = jax.jit(jax.grad(loss)).lower(params).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    whole, chunked = temp_bytes(1 << 20), temp_bytes(64)
    scores_per_layer = TINY.num_heads * 504 * 512 * 4
    assert whole - chunked > TINY.num_layers * scores_per_layer, (whole, chunked)

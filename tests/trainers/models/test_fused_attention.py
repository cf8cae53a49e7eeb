"""Attention through jax.nn.dot_product_attention (the accelerators' path, forced here on CPU)
gives the einsum path's values: forward, log-probs and their gradients, and generation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.models import transformer
from trainers.models.generate import SamplingParams, generate
from trainers.models.presets import PRESETS
from trainers.models.transformer import completion_logprobs, init_params


def _batch(rng, rows, prompt_len, completion_len, vocab):
    prompts = rng.integers(3, vocab, size=(rows, prompt_len)).astype(np.int32)
    valid = np.ones((rows, prompt_len), bool)
    valid[0, :3] = False  # left padding
    completions = rng.integers(3, vocab, size=(rows, completion_len)).astype(np.int32)
    mask = np.arange(completion_len)[None, :] < rng.integers(1, completion_len + 1, size=(rows, 1))
    return prompts, valid, completions, mask


@pytest.mark.parametrize("group", [1, 2])
def test_fused_attention_matches_einsum(monkeypatch, group):
    cfg = PRESETS["tiny"]
    graphdef, params = init_params(cfg, 0)
    prompts, valid, completions, mask = _batch(np.random.default_rng(0), 4, 9, 7, cfg.vocab_size)
    if group > 1:
        prompts, valid = np.repeat(prompts[::group], group, axis=0), np.repeat(valid[::group], group, axis=0)

    def loss(p):
        lp, entropy = completion_logprobs(graphdef, p, prompts, valid, completions, mask, 1.0, group)
        return jnp.sum(lp) + jnp.sum(entropy), (lp, entropy)

    calls = []
    fused_attention = jax.nn.dot_product_attention
    monkeypatch.setattr(jax.nn, "dot_product_attention", lambda *a, **k: calls.append(1) or fused_attention(*a, **k))
    results = {}
    for fused in (False, True):
        monkeypatch.setattr(transformer, "FUSED_ATTENTION", fused)
        jax.clear_caches()  # the flag is read at trace time
        (_, (lp, entropy)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        results[fused] = (np.asarray(lp), np.asarray(entropy), [np.asarray(g) for g in jax.tree.leaves(grads)])
        assert bool(calls) == fused  # the path asked for was taken
    for a, b in zip(results[False][:2], results[True][:2]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    for a, b in zip(results[False][2], results[True][2]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_generation_with_fused_prefill_matches(monkeypatch):
    cfg = PRESETS["tiny"]
    graphdef, params = init_params(cfg, 0)
    prompts, valid, _, _ = _batch(np.random.default_rng(1), 4, 9, 1, cfg.vocab_size)
    sampling = SamplingParams(max_new_tokens=10, temperature=0.0, stop_at_eos=False)
    out = {}
    for fused in (False, True):
        monkeypatch.setattr(transformer, "FUSED_ATTENTION", fused)
        jax.clear_caches()  # the flag is read at trace time
        out[fused] = generate(graphdef, params, prompts, valid, jax.random.key(0), sampling)
    np.testing.assert_array_equal(out[False].tokens, out[True].tokens)
    np.testing.assert_allclose(out[False].logprobs, out[True].logprobs, rtol=0, atol=1e-5)

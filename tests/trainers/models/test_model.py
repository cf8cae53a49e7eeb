"""Tests for trainers/models/transformer.py (CPU, float32 unless stated)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from trainers.models import transformer as model_lib
from trainers.models.presets import PRESETS, ModelConfig

TINY = PRESETS["tiny"]


def random_tokens(rng: np.random.Generator, shape, vocab_size: int) -> np.ndarray:
    return rng.integers(3, vocab_size, size=shape).astype(np.int32)


@pytest.fixture(scope="module")
def tiny():
    return model_lib.init_params(TINY, seed=0)


@pytest.fixture(scope="module")
def forward_jit():
    return jax.jit(model_lib.forward, static_argnums=0)


def test_presets_shapes():
    assert set(["tiny", "small", "w1", "base", "qwen3-0.6b"]) <= set(PRESETS)
    w1 = PRESETS["w1"]
    assert (w1.num_layers, w1.hidden_size, w1.mlp_size, w1.num_heads, w1.head_dim, w1.num_kv_heads, w1.vocab_size) == (
        4,
        256,
        1024,
        4,
        64,
        2,
        512,
    )
    qwen = PRESETS["qwen3-0.6b"]
    assert qwen.tie_embeddings and qwen.rope_theta == 1e6 and qwen.vocab_size == 151936
    # Qwen3-0.6B: ~0.44B non-embedding parameters + 0.156B tied embedding.
    assert 0.59e9 < model_lib.matmul_param_count(qwen) < 0.60e9


def test_params_are_nnx_params_only(tiny):
    graphdef, params = tiny
    leaves = jax.tree.leaves(params)
    assert all(isinstance(leaf, jax.Array) and leaf.dtype == jnp.float32 for leaf in leaves)
    h, m, v, nh, d, kvh = (
        TINY.hidden_size,
        TINY.mlp_size,
        TINY.vocab_size,
        TINY.num_heads,
        TINY.head_dim,
        TINY.num_kv_heads,
    )
    per_layer = h * nh * d + 2 * h * kvh * d + nh * d * h + 3 * h * m + 2 * h + 2 * d
    expected = TINY.num_layers * per_layer + v * h + h + h * v
    assert model_lib.param_count(params) == expected


def test_forward_shapes_and_dtype(tiny, forward_jit):
    graphdef, params = tiny
    rng = np.random.default_rng(0)
    tokens = random_tokens(rng, (3, 7), TINY.vocab_size)
    logits = forward_jit(graphdef, params, tokens, np.ones((3, 7), bool))
    assert logits.shape == (3, 7, TINY.vocab_size)
    assert logits.dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(logits)))


def test_causal(tiny, forward_jit):
    graphdef, params = tiny
    rng = np.random.default_rng(1)
    tokens = random_tokens(rng, (2, 10), TINY.vocab_size)
    changed = tokens.copy()
    changed[:, 6:] = random_tokens(rng, (2, 4), TINY.vocab_size)
    valid = np.ones((2, 10), bool)
    before = np.asarray(forward_jit(graphdef, params, tokens, valid))
    after = np.asarray(forward_jit(graphdef, params, changed, valid))
    np.testing.assert_allclose(before[:, :6], after[:, :6], atol=1e-6)
    assert np.max(np.abs(before[:, 6:] - after[:, 6:])) > 1e-3


def test_left_padding_invariance(tiny, forward_jit):
    graphdef, params = tiny
    rng = np.random.default_rng(2)
    sequence = random_tokens(rng, (6,), TINY.vocab_size)
    # Row 0: no padding (plus right padding to the batch length); row 1: 3 tokens of left padding.
    tokens = np.zeros((2, 9), np.int32)
    valid = np.zeros((2, 9), bool)
    tokens[0, :6], valid[0, :6] = sequence, True
    tokens[1, 3:], valid[1, 3:] = sequence, True
    tokens[1, :3] = random_tokens(rng, (3,), TINY.vocab_size)  # garbage under the padding must not matter
    logits = np.asarray(forward_jit(graphdef, params, tokens, valid))
    np.testing.assert_allclose(logits[0, :6], logits[1, 3:], atol=1e-5)
    # Same sequence alone, unpadded, in a batch of one.
    alone = np.asarray(forward_jit(graphdef, params, sequence[None], np.ones((1, 6), bool)))
    np.testing.assert_allclose(alone[0], logits[1, 3:], atol=1e-5)


def test_gqa_matches_mha_with_repeated_kv_heads(forward_jit):
    """A GQA model equals the MHA model whose k/v heads are the GQA heads repeated per group."""
    gqa_cfg = dataclasses.replace(TINY, num_heads=4, num_kv_heads=2)
    mha_cfg = dataclasses.replace(TINY, num_heads=4, num_kv_heads=4)
    gqa_graphdef, gqa_params = model_lib.init_params(gqa_cfg, seed=3)
    mha_graphdef, mha_params = model_lib.init_params(mha_cfg, seed=4)
    groups = gqa_cfg.num_heads // gqa_cfg.num_kv_heads

    def repeat_heads(kernel):  # [H, KVH*D] -> [H, NH*D], query head h reads kv head h // groups
        h = kernel.shape[0]
        per_head = kernel.reshape(h, gqa_cfg.num_kv_heads, gqa_cfg.head_dim)
        return jnp.repeat(per_head, groups, axis=1).reshape(h, -1)

    weights = nnx.to_pure_dict(gqa_params)  # nested dict of arrays
    for i in range(gqa_cfg.num_layers):
        attn = weights["blocks"][i]["attn"]
        attn["k_proj"]["kernel"] = repeat_heads(attn["k_proj"]["kernel"])
        attn["v_proj"]["kernel"] = repeat_heads(attn["v_proj"]["kernel"])
    mha_equivalent = jax.tree.map(lambda x: x, mha_params)  # copy, then overwrite every leaf
    nnx.replace_by_pure_dict(mha_equivalent, weights)
    assert [x.shape for x in jax.tree.leaves(mha_equivalent)] == [x.shape for x in jax.tree.leaves(mha_params)]

    rng = np.random.default_rng(5)
    tokens = random_tokens(rng, (2, 8), TINY.vocab_size)
    valid = np.ones((2, 8), bool)
    valid[1, :2] = False
    gqa_logits = forward_jit(gqa_graphdef, gqa_params, tokens, valid)
    mha_logits = forward_jit(mha_graphdef, mha_equivalent, tokens, valid)
    np.testing.assert_allclose(np.asarray(gqa_logits), np.asarray(mha_logits), atol=1e-5)


def test_single_kv_head_and_options(forward_jit):
    cfg = dataclasses.replace(TINY, num_kv_heads=1, qk_norm=False, tie_embeddings=True)
    graphdef, params = model_lib.init_params(cfg, seed=0)
    assert "lm_head" not in params
    logits = forward_jit(graphdef, params, np.ones((2, 5), np.int32), np.ones((2, 5), bool))
    assert logits.shape == (2, 5, cfg.vocab_size) and np.all(np.isfinite(np.asarray(logits)))


def test_rope_matches_reference_formula():
    """Hugging Face form: q * cos(emb) + rotate_half(q) * sin(emb), emb = concat(freqs, freqs)."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
    positions = np.array([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]], np.int32)
    sin, cos = model_lib.rope_sin_cos(jnp.asarray(positions), model_lib.rope_inv_freq(8, 10000.0))
    ours = np.asarray(model_lib.apply_rope(jnp.asarray(x), sin, cos))
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, 8, 2) / 8))
    emb = np.concatenate([positions[..., None] * inv_freq] * 2, axis=-1)[:, :, None, :]
    rotate_half = np.concatenate([-x[..., 4:], x[..., :4]], axis=-1)
    reference = x * np.cos(emb) + rotate_half * np.sin(emb)
    np.testing.assert_allclose(ours, reference, atol=1e-5)


def test_bfloat16_runs_and_logits_are_float32(forward_jit):
    """bfloat16 computes in bfloat16 from float32 master weights; logits stay float32."""
    cfg = dataclasses.replace(TINY, dtype="bfloat16")
    graphdef, params = model_lib.init_params(cfg, seed=0)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(params))
    _, hidden = model_lib.forward_hidden(graphdef, params, jnp.ones((1, 3), jnp.int32), jnp.ones((1, 3), bool))
    assert hidden.dtype == jnp.bfloat16
    rng = np.random.default_rng(7)
    tokens = random_tokens(rng, (2, 6), cfg.vocab_size)
    valid = np.ones((2, 6), bool)
    valid[0, :2] = False
    logits = forward_jit(graphdef, params, tokens, valid)
    assert logits.dtype == jnp.float32 and logits.shape == (2, 6, cfg.vocab_size)
    assert np.all(np.isfinite(np.asarray(logits)))

    # Same weights in float32 give nearly the same logits.
    f32_graphdef, _ = model_lib.init_params(TINY, seed=0)
    f32_params = jax.tree.map(lambda x: x.astype(jnp.float32), params)
    f32_logits = forward_jit(f32_graphdef, f32_params, tokens, valid)
    scale = float(jnp.max(jnp.abs(f32_logits)))
    assert float(jnp.max(jnp.abs(logits - f32_logits))) < 0.05 * scale

    logprobs, entropy = jax.jit(model_lib.completion_logprobs, static_argnums=0)(
        graphdef, params, tokens[:, :3], valid[:, :3], tokens[:, 3:], valid[:, 3:], 1.0
    )
    assert logprobs.dtype == jnp.float32 and entropy.dtype == jnp.float32


@pytest.mark.parametrize("chunk_positions", [None, 3])
def test_completion_logprobs_matches_forward(tiny, forward_jit, monkeypatch, chunk_positions):
    """Against log_softmax of the whole forward's logits in float64; with chunk_positions=3 the 8
    completion positions go through the LM head in 3 chunks, the last one padded."""
    if chunk_positions is not None:
        monkeypatch.setattr(model_lib, "LOGITS_CHUNK_ELEMENTS", chunk_positions * TINY.vocab_size)
    graphdef, params = tiny
    rng = np.random.default_rng(8)
    prompt = random_tokens(rng, (2, 5), TINY.vocab_size)
    prompt_valid = np.array([[True] * 5, [False, False, True, True, True]])
    completion = random_tokens(rng, (2, 4), TINY.vocab_size)
    completion_mask = np.array([[True, True, True, True], [True, True, False, False]])
    temperature = 0.7
    logprobs, entropy = jax.jit(model_lib.completion_logprobs, static_argnums=0)(
        graphdef, params, prompt, prompt_valid, completion, completion_mask, temperature
    )
    assert logprobs.shape == (2, 4) and entropy.shape == (2, 4)

    logits = np.asarray(
        forward_jit(
            graphdef,
            params,
            np.concatenate([prompt, completion], 1),
            np.concatenate([prompt_valid, completion_mask], 1),
        ),
        np.float64,
    )
    scaled = logits[:, 4:8] / temperature  # positions predicting the 4 completion tokens
    log_probs = (
        scaled
        - np.log(np.sum(np.exp(scaled - scaled.max(-1, keepdims=True)), -1, keepdims=True))
        - scaled.max(-1, keepdims=True)
    )
    expected = np.take_along_axis(log_probs, completion[..., None], -1)[..., 0]
    expected_entropy = -np.sum(np.exp(log_probs) * log_probs, -1)
    np.testing.assert_allclose(np.asarray(logprobs), np.where(completion_mask, expected, 0), atol=1e-5)
    np.testing.assert_allclose(np.asarray(entropy), np.where(completion_mask, expected_entropy, 0), atol=1e-5)
    assert np.all(np.asarray(logprobs)[~completion_mask] == 0)


def test_grouped_prompts_give_the_whole_sequence_logprobs_and_gradients(tiny):
    """prompt_group=G runs each prompt once for its G completions: the log-probs, entropies and the
    gradient of a loss over them match the whole-sequence forward (prompt_group=1) up to float32
    rounding, with left-padded prompts and completions of different lengths."""
    graphdef, params = tiny
    rng = np.random.default_rng(10)
    group = 3
    prompt = random_tokens(rng, (2, 6), TINY.vocab_size)
    prompt_valid = np.array([[True] * 6, [False, False, True, True, True, True]])
    prompt, prompt_valid = np.repeat(prompt, group, axis=0), np.repeat(prompt_valid, group, axis=0)
    completion = random_tokens(rng, (2 * group, 5), TINY.vocab_size)
    completion_mask = np.arange(5)[None, :] < np.array([5, 1, 3, 5, 2, 4])[:, None]
    weights = rng.normal(size=(2 * group, 5)).astype(np.float32)

    def loss(p, prompt_group):
        logprobs, entropy = model_lib.completion_logprobs(
            graphdef, p, prompt, prompt_valid, completion, completion_mask, 0.8, prompt_group
        )
        return jnp.sum(weights * logprobs), (logprobs, entropy)

    grad_fn = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)
    (_, (whole_lp, whole_entropy)), whole_grads = grad_fn(params, 1)
    (_, (grouped_lp, grouped_entropy)), grouped_grads = grad_fn(params, group)
    np.testing.assert_allclose(np.asarray(grouped_lp), np.asarray(whole_lp), atol=1e-5)
    np.testing.assert_allclose(np.asarray(grouped_entropy), np.asarray(whole_entropy), atol=1e-5)
    assert np.all(np.asarray(grouped_lp)[~completion_mask] == 0)
    for whole, grouped in zip(jax.tree.leaves(whole_grads), jax.tree.leaves(grouped_grads)):
        scale = float(jnp.max(jnp.abs(whole))) + 1e-6
        np.testing.assert_allclose(np.asarray(grouped), np.asarray(whole), atol=1e-5 * scale)


def test_completion_logprobs_is_differentiable(tiny):
    graphdef, params = tiny
    rng = np.random.default_rng(9)
    prompt = random_tokens(rng, (2, 4), TINY.vocab_size)
    prompt_valid = np.array([[True] * 4, [False, True, True, True]])
    completion = random_tokens(rng, (2, 3), TINY.vocab_size)
    completion_mask = np.array([[True, True, True], [True, False, False]])

    def loss(p):
        logprobs, entropy = model_lib.completion_logprobs(
            graphdef, p, prompt, prompt_valid, completion, completion_mask, 1.0
        )
        return -jnp.mean(logprobs) - 0.01 * jnp.mean(entropy)

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    grad_leaves = jax.tree.leaves(grads)
    assert np.isfinite(float(value))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grad_leaves)
    assert sum(float(jnp.sum(jnp.abs(g))) for g in grad_leaves) > 0
    assert jax.tree.structure(grads) == jax.tree.structure(params)


def test_forward_flops_per_token():
    cfg = ModelConfig(vocab_size=10, num_layers=2, hidden_size=8, mlp_size=16, num_heads=2, head_dim=4, num_kv_heads=1)
    attention_params = 8 * 2 * 4 + 2 * 8 * 1 * 4 + 2 * 4 * 8  # q, k+v, o
    mlp_params = 3 * 8 * 16
    matmul_params = 2 * (attention_params + mlp_params) + 8 * 10
    attention_flops = 2 * 4 * 2 * 4 * 32  # layers x (qk + pv) x heads x head_dim x context, x2 per MAC
    assert model_lib.forward_flops_per_token(cfg, 32) == 2 * matmul_params + attention_flops

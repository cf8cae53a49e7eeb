"""The packed rows' segment-id attention kernels (`segment_attention`: Triton flash attention for a
GPU, splash attention for a TPU), run in Pallas's interpreter on this CPU, against a dense masked
softmax written out here: values and gradients in float32, rows of several segments with and
without a padding tail, grouped-query heads, one device and a data x fsdp x tensor mesh; and the
packed log-prob pass through them against the unpacked pass."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.models import segment_attention
from trainers.models import transformer as model_lib
from trainers.models.backend import lowering_for
from trainers.models.presets import PRESETS
from trainers.parallel.mesh import make_mesh
from trainers.step.packing import pack_micro_batches

KERNELS = ("pallas_gpu", "pallas_tpu")


def reference_attention(q, k, v, segment_ids):
    """Causal attention within each segment (> 0), as a dense mask and a softmax; padding queries
    (segment 0) see nothing here, so only real positions are compared."""
    num_tokens, head_dim = q.shape[1], q.shape[-1]
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scores = jnp.einsum("bthd,bshd->bhts", q, k, precision="highest") / np.sqrt(head_dim)
    causal = np.arange(num_tokens)[:, None] >= np.arange(num_tokens)[None, :]
    same = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, None, :] > 0)
    mask = (causal[None] & same)[:, None]  # [B,1,T,S]
    scores = jnp.where(mask, scores, -1e30)
    probs = jnp.exp(scores - scores.max(axis=-1, keepdims=True)) * mask
    probs = probs / jnp.maximum(probs.sum(axis=-1, keepdims=True), 1e-30)
    return jnp.einsum("bhts,bshd->bthd", probs, v, precision="highest")


def segments_of(lengths_per_row: list[list[int]], num_tokens: int) -> np.ndarray:
    """[B,T] segment ids: row b holds segments 1, 2, ... of the given lengths, then padding (0)."""
    ids = np.zeros((len(lengths_per_row), num_tokens), np.int32)
    for row, lengths in enumerate(lengths_per_row):
        at = 0
        for number, n in enumerate(lengths, start=1):
            ids[row, at : at + n] = number
            at += n
    return ids


def inputs(rng, batch, num_tokens, heads, kv_heads, head_dim):
    q = rng.standard_normal((batch, num_tokens, heads, head_dim)).astype(np.float32)
    k = rng.standard_normal((batch, num_tokens, kv_heads, head_dim)).astype(np.float32)
    v = rng.standard_normal((batch, num_tokens, kv_heads, head_dim)).astype(np.float32)
    return q, k, v


def check_against_reference(attend, q, k, v, ids, rng):
    """attend(q, k, v) against `reference_attention`: outputs at real positions, and the gradients
    of a weighted sum over them (padding positions weigh nothing, as in the model)."""
    real = (ids > 0)[:, :, None, None]
    weights = rng.standard_normal(q.shape).astype(np.float32) * real

    def loss(fn):
        return lambda q, k, v: jnp.sum(fn(q, k, v) * weights)

    expected = reference_attention(q, k, v, ids)
    got = attend(q, k, v)
    assert got.shape == q.shape and got.dtype == jnp.float32
    np.testing.assert_allclose(np.where(real, got, 0), np.where(real, expected, 0), atol=2e-5, rtol=0)
    grads = jax.grad(loss(attend), argnums=(0, 1, 2))(q, k, v)
    expected_grads = jax.grad(loss(lambda *a: reference_attention(*a, ids)), argnums=(0, 1, 2))(q, k, v)
    for got_grad, want in zip(grads, expected_grads):
        assert got_grad.shape == want.shape
        np.testing.assert_allclose(np.asarray(got_grad), np.asarray(want), atol=5e-5, rtol=0)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_is_causal_attention_within_segments(kernel):
    """Rows of 40 tokens (padded to the kernel's blocks inside): one of three segments and a
    padding tail, one of two segments filling it; 4 query heads on 2 kv heads."""
    rng = np.random.default_rng(0)
    ids = segments_of([[10, 15, 8], [17, 23]], 40)
    q, k, v = inputs(rng, 2, 40, 4, 2, 16)
    attend = jax.jit(lambda q, k, v: segment_attention.segment_attention(q, k, v, ids, kernel, interpret=True))
    check_against_reference(attend, q, k, v, ids, rng)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kv_heads", [2, 1], ids=["kv-split", "kv-whole"])
def test_kernel_on_a_mesh(kernel, kv_heads):
    """On a data 2 x fsdp 2 x tensor 2 mesh the kernel runs per shard (rows over data x fsdp,
    heads over tensor); with a single kv head (not split over tensor) the kv heads are repeated."""
    rng = np.random.default_rng(1)
    ids = segments_of([[5, 9], [16], [3, 3, 4], [7, 6, 2]], 16)
    q, k, v = inputs(rng, 4, 16, 4, kv_heads, 16)
    mesh = make_mesh(jax.devices()[:8], {"data": 2, "fsdp": 2, "tensor": 2})  # as the trainer's: Auto axes
    attend = jax.jit(lambda q, k, v: segment_attention.segment_attention(q, k, v, ids, kernel, interpret=True))
    with jax.set_mesh(mesh):
        assert "sdy.manual_computation" in attend.lower(q, k, v).as_text()  # the kernel runs per shard
        check_against_reference(attend, q, k, v, ids, rng)


def test_the_platform_picks_its_kernel():
    """CPU keeps the dense mask (shared prompt copies); a GPU and a TPU take their kernel, and the
    trainer packs one sequence per segment for them."""
    assert segment_attention.implementation() == "dense" and segment_attention.shares_prompts()
    with lowering_for("cuda"):
        assert segment_attention.implementation() == "pallas_gpu" and not segment_attention.shares_prompts()
    with lowering_for("tpu"):
        assert segment_attention.implementation() == "pallas_tpu" and not segment_attention.shares_prompts()


def mixed_batch(rng, vocab):
    """4 prompts of 6, 4, 2 and 5 tokens (left-padded to 6), 2 completions each of 0 to 7 tokens."""
    prompt_lengths = [6, 6, 4, 4, 2, 2, 5, 5]
    completion_lengths = [7, 1, 5, 0, 2, 6, 3, 4]
    prompt_tokens = np.zeros((8, 6), np.int32)
    prompt_valid = np.zeros((8, 6), bool)
    for s in range(0, 8, 2):
        n = prompt_lengths[s]
        prompt_tokens[s : s + 2, 6 - n :] = rng.integers(3, vocab, size=n)
        prompt_valid[s : s + 2, 6 - n :] = True
    completion_mask = np.arange(7)[None, :] < np.array(completion_lengths)[:, None]
    completion_tokens = np.where(completion_mask, rng.integers(3, vocab, size=(8, 7)), 0).astype(np.int32)
    return prompt_tokens, prompt_valid, completion_tokens, completion_mask


@pytest.mark.parametrize(("kernel", "remat"), [("pallas_gpu", False), ("pallas_tpu", True)])
def test_packed_logprobs_through_the_kernel_are_the_unpacked_ones(monkeypatch, kernel, remat):
    """The packed pass as a GPU or a TPU runs it (one sequence per segment, the kernel) gives the
    unpacked pass's log-probs, entropies and gradients (with remat: the blocks recomputed)."""
    monkeypatch.setattr(segment_attention, "IMPLEMENTATION", kernel)
    monkeypatch.setattr(segment_attention, "INTERPRET", True)
    cfg = dataclasses.replace(PRESETS["tiny"], num_layers=1, remat=remat)
    graphdef, params = model_lib.init_params(cfg, seed=0)
    rng = np.random.default_rng(2)
    b = mixed_batch(rng, cfg.vocab_size)
    names = ("prompt_tokens", "prompt_valid", "completion_tokens", "completion_mask")
    run = pack_micro_batches(
        {k: v[None] for k, v in zip(names, b)}, prompt_group=1, share_prompts=segment_attention.shares_prompts()
    )
    assert run.packed
    packed = {k: jnp.asarray(v[0]) for k, v in run.arrays.items() if k.startswith("packed_")}
    assert int(packed["packed_members"].max()) == 1  # one completion per segment
    weights = rng.normal(size=b[2].shape).astype(np.float32)

    def unpacked_loss(p):
        lp, entropy = model_lib.completion_logprobs(graphdef, p, *b, 0.8)
        return jnp.sum(weights * lp), (lp, entropy)

    def packed_loss(p):
        lp, entropy = model_lib.packed_logprobs(graphdef, p, packed, b[2].shape, 0.8)
        return jnp.sum(weights * lp), (lp, entropy)

    (_, (lp, entropy)), grads = jax.jit(jax.value_and_grad(unpacked_loss, has_aux=True))(params)
    calls = []
    real = segment_attention.segment_attention
    monkeypatch.setattr(segment_attention, "segment_attention", lambda *a, **k: calls.append(a[4]) or real(*a, **k))
    (_, (packed_lp, packed_entropy)), packed_grads = jax.jit(jax.value_and_grad(packed_loss, has_aux=True))(params)
    assert calls == [kernel] * cfg.num_layers  # the kernel, not the dense mask
    np.testing.assert_allclose(np.asarray(packed_lp), np.asarray(lp), atol=2e-5)
    np.testing.assert_allclose(np.asarray(packed_entropy), np.asarray(entropy), atol=2e-5)
    for whole, packed_grad in zip(jax.tree.leaves(grads), jax.tree.leaves(packed_grads)):
        scale = float(jnp.max(jnp.abs(whole))) + 1e-6
        np.testing.assert_allclose(np.asarray(packed_grad), np.asarray(whole), atol=2e-5 * scale)

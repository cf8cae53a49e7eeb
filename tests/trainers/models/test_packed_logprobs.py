"""Packed log-probs (`transformer.packed_logprobs` over `trainers.step.packing` rows) against the
unpacked whole-sequence pass: the same log-probs, entropies and gradients up to float32 rounding,
with shared prompts, a group split over two rows, left-padded prompts of other lengths, an empty
completion, and with remat."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.models import transformer as model_lib
from trainers.models.presets import PRESETS
from trainers.step.packing import PackedShape, pack, packed_shape

TINY = PRESETS["tiny"]


def mixed_batch(rng: np.random.Generator):
    """3 prompts (the first two of 3 completions, the third of 2), prompts of 6, 4 and 2 tokens
    left-padded to 6, completions of 0 to 7 tokens right-padded to 7."""
    prompt_lengths = [6, 6, 6, 4, 4, 4, 2, 2]
    completion_lengths = [7, 1, 3, 5, 0, 7, 2, 6]
    prompt_tokens = np.zeros((8, 6), np.int32)
    prompt_valid = np.zeros((8, 6), bool)
    prompts = {n: rng.integers(3, TINY.vocab_size, size=n) for n in (6, 4, 2)}
    for s, n in enumerate(prompt_lengths):
        prompt_tokens[s, 6 - n :] = prompts[n]
        prompt_valid[s, 6 - n :] = True
    completion_tokens = rng.integers(3, TINY.vocab_size, size=(8, 7)).astype(np.int32)
    completion_mask = np.arange(7)[None, :] < np.array(completion_lengths)[:, None]
    completion_tokens = np.where(completion_mask, completion_tokens, 0)
    return prompt_tokens, prompt_valid, completion_tokens, completion_mask


@pytest.mark.parametrize("remat", [False, True], ids=["plain", "remat"])
def test_packed_logprobs_and_gradients_are_the_unpacked_ones(remat):
    cfg = dataclasses.replace(TINY, remat=remat)
    graphdef, params = model_lib.init_params(cfg, seed=0)
    rng = np.random.default_rng(3)
    b = mixed_batch(rng)
    shape = packed_shape(*b)
    # rows of the longest sequence, 6 + 7 = 13, rounded up to a quarter of 6 + 7 (16): 16 tokens;
    # first prompt group 6 + 7 + 1 + 3 = 17 > 16 is split: [p | 7 | 1] (14) and [p | 3] (9)
    assert shape.row_tokens == 16
    packed = pack(*b, shape)
    assert packed.real_tokens == (6 + 7 + 1) + (6 + 3) + (4 + 5 + 7) + (2 + 2 + 6)
    weights = rng.normal(size=b[2].shape).astype(np.float32)
    arrays = {k: jnp.asarray(v) for k, v in packed.arrays().items()}

    def unpacked_loss(p):
        lp, entropy = model_lib.completion_logprobs(graphdef, p, *b, 0.8)
        return jnp.sum(weights * lp), (lp, entropy)

    def packed_loss(p):
        lp, entropy = model_lib.packed_logprobs(graphdef, p, arrays, b[2].shape, 0.8)
        return jnp.sum(weights * lp), (lp, entropy)

    (_, (lp, entropy)), grads = jax.jit(jax.value_and_grad(unpacked_loss, has_aux=True))(params)
    (_, (packed_lp, packed_entropy)), packed_grads = jax.jit(jax.value_and_grad(packed_loss, has_aux=True))(params)
    mask = b[3]
    assert np.all(np.asarray(packed_lp)[~mask] == 0) and np.all(np.asarray(packed_entropy)[~mask] == 0)
    assert np.all(np.asarray(packed_lp)[mask] < 0)  # every token got its log-prob
    np.testing.assert_allclose(np.asarray(packed_lp), np.asarray(lp), atol=2e-5)
    np.testing.assert_allclose(np.asarray(packed_entropy), np.asarray(entropy), atol=2e-5)
    for whole, packed_grad in zip(jax.tree.leaves(grads), jax.tree.leaves(packed_grads)):
        scale = float(jnp.max(jnp.abs(whole))) + 1e-6
        np.testing.assert_allclose(np.asarray(packed_grad), np.asarray(whole), atol=2e-5 * scale)


def test_a_shape_with_room_to_spare_gives_the_same_values():
    """Extra rows, longer rows and more target slots (a shape shared with a larger micro-batch)
    change nothing: padding attends to nothing and nothing attends to it."""
    graphdef, params = model_lib.init_params(TINY, seed=1)
    b = mixed_batch(np.random.default_rng(4))
    tight = pack(*b, packed_shape(*b))
    roomy = pack(*b, PackedShape(rows=tight.shape.rows + 2, row_tokens=32, row_targets=24))
    run = jax.jit(lambda a: model_lib.packed_logprobs(graphdef, params, a, b[2].shape, 1.0)[0])
    np.testing.assert_allclose(
        np.asarray(run({k: jnp.asarray(v) for k, v in roomy.arrays().items()})),
        np.asarray(run({k: jnp.asarray(v) for k, v in tight.arrays().items()})),
        atol=2e-5,
    )

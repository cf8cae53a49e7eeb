"""The layers as one scan over their stacked parameters (`transformer.SCAN_LAYERS`, the default on a
mesh) give the values of the Python loop (the default on one device): log-probs and entropies of the
whole-sequence forward and of the grouped one (a prefill returning every layer's keys/values, then a
cached completion chunk), gradients with respect to the per-layer parameters (with and without
`remat`), and generation (prefill, then single-token decode steps over the kv cache)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.models import transformer
from trainers.models.generate import SamplingParams, generate
from trainers.models.presets import PRESETS


def _batch(group: int = 3):
    """2 prompts x G=group, left-padded prompts, one completion shorter than the others."""
    rng = np.random.default_rng(0)
    rows = 2 * group
    prompt_tokens = jnp.asarray(np.repeat(rng.integers(1, 128, (2, 6)), group, axis=0), jnp.int32)
    prompt_valid = jnp.ones((rows, 6), bool).at[:, :2].set(False)
    completion_tokens = jnp.asarray(rng.integers(1, 128, (rows, 5)), jnp.int32)
    completion_mask = jnp.ones((rows, 5), bool).at[0, 3:].set(False)
    return prompt_tokens, prompt_valid, completion_tokens, completion_mask


@pytest.mark.parametrize("remat", [False, True])
def test_scanned_layers_give_the_loops_logprobs_and_gradients(monkeypatch, remat):
    cfg = dataclasses.replace(PRESETS["small"], remat=remat)  # 4 layers
    graphdef, params = transformer.init_params(cfg, 0)
    prompt_tokens, prompt_valid, completion_tokens, completion_mask = _batch()

    def loss(params, group):
        logprobs, entropy = transformer.completion_logprobs(
            graphdef, params, prompt_tokens, prompt_valid, completion_tokens, completion_mask, 1.0, group
        )
        return jnp.sum(logprobs) + 0.1 * jnp.sum(entropy), (logprobs, entropy)

    results = {}
    for scan in (False, True):
        monkeypatch.setattr(transformer, "SCAN_LAYERS", scan)
        results[scan] = [
            jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)(params, group) for group in (1, 3)
        ]
    for group_index in range(2):
        (_, (loop_logprobs, loop_entropy)), loop_grads = results[False][group_index]
        (_, (scan_logprobs, scan_entropy)), scan_grads = results[True][group_index]
        np.testing.assert_allclose(scan_logprobs, loop_logprobs, rtol=0, atol=1e-5)
        np.testing.assert_allclose(scan_entropy, loop_entropy, rtol=0, atol=1e-5)
        # the gradients keep the per-layer structure (blocks/0 .. blocks/3) and their values
        assert jax.tree.structure(scan_grads) == jax.tree.structure(loop_grads)
        for scan_leaf, loop_leaf in zip(jax.tree.leaves(scan_grads), jax.tree.leaves(loop_grads)):
            np.testing.assert_allclose(scan_leaf, loop_leaf, rtol=0, atol=1e-4)
        assert max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree.leaves(loop_grads)) > 1e-2  # not all ~0


def test_scanned_layers_generate_the_loops_tokens(monkeypatch):
    cfg = PRESETS["tiny"]
    graphdef, params = transformer.init_params(cfg, 1)
    prompt_tokens, prompt_valid, _, _ = _batch()
    sampling = SamplingParams(max_new_tokens=6, temperature=0.0, stop_at_eos=False, prompt_group=3)
    results = {}
    for scan in (False, True):
        monkeypatch.setattr(transformer, "SCAN_LAYERS", scan)
        jax.clear_caches()  # generate's jit is keyed by shapes and static args, not by SCAN_LAYERS
        results[scan] = generate(graphdef, params, prompt_tokens, prompt_valid, jax.random.key(0), sampling)
    np.testing.assert_array_equal(results[True].tokens, results[False].tokens)
    np.testing.assert_allclose(results[True].logprobs, results[False].logprobs, rtol=0, atol=1e-5)


def _compiled_gradient(cfg, rows: int, completion_tokens: int):
    """The compiled gradient of the completion log-probs over `rows` rows of 8 + completion_tokens
    positions, from abstract inputs (nothing runs): its `memory_analysis()` and its jaxpr."""
    graphdef, params = jax.eval_shape(lambda: transformer.init_params(cfg, 0))
    prompt = jax.ShapeDtypeStruct((rows, 8), jnp.int32), jax.ShapeDtypeStruct((rows, 8), jnp.bool_)
    completion = (
        jax.ShapeDtypeStruct((rows, completion_tokens), jnp.int32),
        jax.ShapeDtypeStruct((rows, completion_tokens), jnp.bool_),
    )

    def loss(params, *arrays):
        logprobs, _ = transformer.completion_logprobs(graphdef, params, *arrays, 1.0)
        return jnp.sum(logprobs)

    grad = jax.jit(jax.grad(loss))
    jaxpr = jax.make_jaxpr(jax.grad(loss))(params, *prompt, *completion)
    return grad.lower(params, *prompt, *completion).compile().memory_analysis(), jaxpr


def test_remat_scans_the_layers_and_keeps_a_fraction_of_the_activations():
    """On one device, with no mesh, remat runs the blocks as a scan (a checkpoint per block of the
    loop kept almost every activation once compiled): at 4 x 1,032 positions of the 8-layer "base"
    shape its compiled gradient holds under half the temporaries of the same gradient without remat
    (what stays: the layers' inputs, one layer's values, the stacked weights and their gradients)."""
    assert transformer.SCAN_LAYERS is None  # the default: the loop without a mesh or remat
    plain, plain_jaxpr = _compiled_gradient(PRESETS["base"], 4, 1024)
    remat, remat_jaxpr = _compiled_gradient(dataclasses.replace(PRESETS["base"], remat=True), 4, 1024)
    layers_scan = f"length={PRESETS['base'].num_layers}\n"  # a scan over the 8 layers (the others: chunks)
    assert layers_scan in str(remat_jaxpr) and layers_scan not in str(plain_jaxpr)
    assert remat.temp_size_in_bytes < 0.5 * plain.temp_size_in_bytes, (
        remat.temp_size_in_bytes,
        plain.temp_size_in_bytes,
    )

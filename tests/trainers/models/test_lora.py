"""LoRA adapters (`trainers.models.lora`, Qwix) on the tiny transformer: the initial adapted model is
the base model; one optax step over the adapters changes only the adapters (the base bitwise equal)
and the optimizer state holds adapter-shaped leaves only; folding the adapters into the kernels
gives the adapted model's logits; adapters off give the base model's; a pattern that matches nothing
and a rank larger than a layer are refused with the field named; the scanned layers on an
fsdp x tensor mesh give the loop's values. Also the remat fix of the grouped shared-prompt path:
with `remat` every block of the cached completion pass is rematerialised too."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tests.trainers.models.test_scan_layers import _batch
from trainers.models import lora, transformer
from trainers.models.presets import PRESETS
from trainers.parallel.mesh import make_mesh, mesh_context
from trainers.parallel.rules import state_shardings

pytestmark = pytest.mark.filterwarnings("ignore:.*'.value' access is now deprecated:DeprecationWarning")  # Qwix 0.1.8

CFG = PRESETS["tiny"]  # 2 layers, hidden 64, mlp 256, 4 heads x 16, 2 kv heads
SETTINGS = lora.LoraSettings(rank=4, alpha=8.0)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _tokens(batch=2, length=7, seed=0):
    tokens = jnp.asarray(np.random.default_rng(seed).integers(1, CFG.vocab_size, (batch, length)), jnp.int32)
    return tokens, jnp.ones((batch, length), jnp.bool_).at[0, :2].set(False)


def _logits(graphdef, params, tokens, valid):
    return jax.jit(lambda p: transformer.forward(graphdef, p, tokens, valid))(params)


def _perturbed_adapters(params, seed=3):
    """Nonzero B (and shifted A), so the adapters change the function."""
    adapters, base = lora.split_adapters(params)
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(adapters))))
    adapters = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape), adapters)
    return lora.merge_params(adapters, base)


@pytest.fixture(scope="module")
def models():
    graphdef, params = transformer.init_params(CFG, 0)
    lora_graphdef, lora_params = lora.add_lora(graphdef, params, SETTINGS, seed=1)
    return graphdef, params, lora_graphdef, lora_params


def test_adapters_on_every_projection_sharing_the_base_arrays(models):
    graphdef, params, _, lora_params = models
    adapters, base = lora.split_adapters(lora_params)
    flat = dict(nnx.to_flat_state(adapters))
    # 2 layers x 7 projections x (A, B); A [in, r] random, B [r, out] zero
    assert len(flat) == 2 * 7 * 2
    q_a = flat[("blocks", 0, "attn", "q_proj", "kernel_lora_a")][...]
    q_b = flat[("blocks", 0, "attn", "q_proj", "kernel_lora_b")][...]
    down_a = flat[("blocks", 1, "mlp", "down_proj", "kernel_lora_a")][...]
    assert q_a.shape == (64, 4) and q_b.shape == (4, 64) and down_a.shape == (256, 4)
    assert float(jnp.std(q_a)) > 0.01 and not np.any(np.asarray(q_b))
    # the base arrays are the very arrays of the base model, not copies
    for (path, variable), (base_path, base_variable) in zip(nnx.to_flat_state(params), nnx.to_flat_state(base)):
        assert path == base_path and variable[...] is base_variable[...]


def test_initial_lora_model_and_adapters_off_give_the_base_logits(models):
    graphdef, params, lora_graphdef, lora_params = models
    tokens, valid = _tokens()
    base_logits = _logits(graphdef, params, tokens, valid)
    np.testing.assert_array_equal(_logits(lora_graphdef, lora_params, tokens, valid), base_logits)
    trained = _perturbed_adapters(lora_params)
    trained_logits = _logits(lora_graphdef, trained, tokens, valid)
    assert float(jnp.max(jnp.abs(trained_logits - base_logits))) > 1e-2  # the adapters are applied
    off = lora.adapters_off(trained)
    np.testing.assert_allclose(_logits(lora_graphdef, off, tokens, valid), base_logits, rtol=0, atol=1e-6)
    _, off_base = lora.split_adapters(off)
    assert all(
        a[...] is b[...]
        for (_, a), (_, b) in zip(nnx.to_flat_state(off_base), nnx.to_flat_state(lora.split_adapters(trained)[1]))
    )


def test_one_adam_step_changes_only_the_adapters(models):
    _, _, lora_graphdef, lora_params = models
    tokens, valid = _tokens()
    adapters, base = lora.split_adapters(lora_params)
    base_before = jax.tree.map(lambda x: np.array(x), base)
    tx = optax.adam(1e-2)
    opt_state = tx.init(adapters)

    def loss(adapters):
        logits = transformer.forward(lora_graphdef, lora.merge_params(adapters, base), tokens, valid)
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[..., 0])

    @jax.jit
    def step(adapters, opt_state):
        grads = jax.grad(loss)(adapters)
        updates, opt_state = tx.update(grads, opt_state, adapters)
        return optax.apply_updates(adapters, updates), opt_state, grads

    new_adapters, opt_state, grads = step(adapters, opt_state)
    # gradients and the optimizer's moments: one leaf per adapter, of its shape, nothing for the base
    adapter_shapes = sorted(x.shape for x in jax.tree.leaves(adapters))
    assert sorted(x.shape for x in jax.tree.leaves(grads)) == adapter_shapes
    moment_shapes = sorted(x.shape for x in jax.tree.leaves(opt_state) if x.ndim > 0)
    assert moment_shapes == sorted(adapter_shapes * 2)  # Adam's mu and nu
    # r (in + out) per projection, r = 4: q, o 4*(64+64); k, v 4*(64+32); gate, up, down 4*(64+256); 2 layers
    adapter_elements = 2 * 4 * (2 * 128 + 2 * 96 + 3 * 320)
    assert sum(x.size for x in jax.tree.leaves(adapters)) == adapter_elements == 11264
    assert sum(x.size for x in jax.tree.leaves(opt_state)) == 2 * adapter_elements + 1  # mu, nu, the step count
    # B starts at zero but dL/dB = (x A)^T dL/dy is not zero: every B moves
    for (path, old), (_, new) in zip(nnx.to_flat_state(adapters), nnx.to_flat_state(new_adapters)):
        if path[-1] == "kernel_lora_b":
            assert float(jnp.max(jnp.abs(new[...] - old[...]))) > 1e-4, path
    # the base is bitwise unchanged
    for old, new in zip(jax.tree.leaves(base_before), jax.tree.leaves(base)):
        np.testing.assert_array_equal(old, new)


def test_merged_into_base_gives_the_lora_logits(models):
    graphdef, _, lora_graphdef, lora_params = models
    trained = _perturbed_adapters(lora_params)
    tokens, valid = _tokens()
    base_graphdef, merged = lora.merge_into_base(lora_graphdef, trained)
    assert base_graphdef == graphdef  # the plain transformer, no adapters, no interception
    assert not any(lora.is_adapter(v) for _, v in nnx.to_flat_state(merged))
    np.testing.assert_allclose(
        _logits(base_graphdef, merged, tokens, valid), _logits(lora_graphdef, trained, tokens, valid), rtol=0, atol=1e-5
    )
    # the formula, by hand for one layer: W + (alpha / r) A @ B
    flat, merged_flat = dict(nnx.to_flat_state(trained)), dict(nnx.to_flat_state(merged))
    prefix = ("blocks", 1, "attn", "o_proj")
    a = np.asarray(flat[prefix + ("kernel_lora_a",)][...], np.float64)
    b = np.asarray(flat[prefix + ("kernel_lora_b",)][...], np.float64)
    expected = np.asarray(flat[prefix + ("kernel",)][...], np.float64) + (8.0 / 4) * a @ b
    np.testing.assert_allclose(merged_flat[prefix + ("kernel",)][...], expected, rtol=0, atol=1e-6)


def test_generation_with_adapters_matches_the_merged_model(models):
    """Prefill and decode steps run through the adapters (Qwix intercepts every model call)."""
    from trainers.models.generate import SamplingParams, generate

    graphdef, params, lora_graphdef, lora_params = models
    trained = _perturbed_adapters(lora_params)
    base_graphdef, merged = lora.merge_into_base(lora_graphdef, trained)
    tokens, valid = _tokens(batch=2, length=6, seed=5)
    sampling = SamplingParams(max_new_tokens=6, temperature=0.0, stop_at_eos=False)
    with_adapters = generate(lora_graphdef, trained, tokens, valid, jax.random.key(0), sampling)
    folded = generate(base_graphdef, merged, tokens, valid, jax.random.key(0), sampling)
    base = generate(graphdef, params, tokens, valid, jax.random.key(0), sampling)
    np.testing.assert_array_equal(with_adapters.tokens, folded.tokens)
    np.testing.assert_allclose(with_adapters.logprobs, folded.logprobs, rtol=0, atol=1e-5)
    assert not np.array_equal(with_adapters.tokens, base.tokens)


def test_bfloat16_model_keeps_bfloat16_activations():
    cfg = dataclasses.replace(CFG, dtype="bfloat16")
    graphdef, params = transformer.init_params(cfg, 0)
    lora_graphdef, lora_params = lora.add_lora(graphdef, params, SETTINGS, seed=1)
    tokens, valid = _tokens()
    _, hidden = jax.jit(lambda p: transformer.forward_hidden(lora_graphdef, p, tokens, valid))(
        _perturbed_adapters(lora_params)
    )
    assert hidden.dtype == jnp.bfloat16


def test_bad_pattern_and_too_large_rank_are_refused_with_the_field_named():
    graphdef, params = transformer.init_params(CFG, 0)
    with pytest.raises(ValueError, match=r"model\.lora\.target_modules"):
        lora.add_lora(graphdef, params, lora.LoraSettings(rank=4, alpha=8.0, target_modules=r".*/qproj"), 1)
    # k_proj is 64 x 32 (2 kv heads x 16): rank 33 is too large for it, 32 is not
    with pytest.raises(ValueError, match=r"model\.lora\.rank.*blocks/0/attn/k_proj"):
        lora.add_lora(graphdef, params, lora.LoraSettings(rank=33, alpha=8.0), 1)
    lora.add_lora(graphdef, params, lora.LoraSettings(rank=32, alpha=8.0, target_modules=r".*/k_proj"), 1)
    with pytest.raises(ValueError, match=r"model\.lora\.dropout"):
        lora.add_lora(graphdef, params, lora.LoraSettings(rank=4, alpha=8.0, dropout=0.1), 1)


def test_only_matching_modules_get_adapters():
    graphdef, params = transformer.init_params(CFG, 0)
    _, lora_params = lora.add_lora(graphdef, params, lora.LoraSettings(4, 8.0, target_modules=r"blocks/1/mlp/.*"), 1)
    adapters, _ = lora.split_adapters(lora_params)
    assert sorted({path[:4] for path, _ in nnx.to_flat_state(adapters)}) == [
        ("blocks", 1, "mlp", "down_proj"),
        ("blocks", 1, "mlp", "gate_proj"),
        ("blocks", 1, "mlp", "up_proj"),
    ]


def test_scanned_layers_on_a_mesh_give_the_loops_values_and_gradients(models, monkeypatch):
    _, _, lora_graphdef, lora_params = models
    trained = _perturbed_adapters(lora_params)
    tokens, valid = _tokens(batch=4)
    adapters, base = lora.split_adapters(trained)

    def loss(adapters, base):
        logits = transformer.forward(lora_graphdef, lora.merge_params(adapters, base), tokens, valid)
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[..., 0])

    monkeypatch.setattr(transformer, "SCAN_LAYERS", False)
    loop_loss, loop_grads = jax.jit(jax.value_and_grad(loss))(adapters, base)
    monkeypatch.setattr(transformer, "SCAN_LAYERS", None)  # the default: scanned on a mesh
    mesh = make_mesh(jax.devices()[:4], {"fsdp": 2, "tensor": 2})
    with mesh_context(mesh):
        placed = jax.device_put(trained, state_shardings(trained, mesh))
        placed_adapters, placed_base = lora.split_adapters(placed)
        # the adapters are split like their kernel's outer axis: q_proj's B [r, heads] over tensor
        q_b = dict(nnx.to_flat_state(placed_adapters))[("blocks", 0, "attn", "q_proj", "kernel_lora_b")][...]
        assert q_b.sharding.spec == jax.sharding.PartitionSpec(None, "tensor")
        lowered = jax.jit(jax.value_and_grad(loss)).lower(placed_adapters, placed_base)
        assert "while" in lowered.as_text()  # the layers ran as one scan
        mesh_loss, mesh_grads = lowered.compile()(placed_adapters, placed_base)
    np.testing.assert_allclose(mesh_loss, loop_loss, rtol=0, atol=1e-5)
    for mesh_leaf, loop_leaf in zip(jax.tree.leaves(mesh_grads), jax.tree.leaves(loop_grads)):
        np.testing.assert_allclose(mesh_leaf, loop_leaf, rtol=0, atol=1e-5)


@pytest.mark.parametrize("scan", [False, True])
def test_lora_under_remat_gives_the_same_gradients(monkeypatch, scan):
    """remat (the loop's per-block jax.checkpoint, the scan's checkpointed body) with the adapters
    intercepted inside: the grouped update's adapter gradients equal those without remat."""
    monkeypatch.setattr(transformer, "SCAN_LAYERS", scan)
    batch = _grouped_batch()
    grads = {}
    for remat in (False, True):
        graphdef, params = transformer.init_params(dataclasses.replace(CFG, remat=remat), 0)
        lora_graphdef, lora_params = lora.add_lora(graphdef, params, SETTINGS, seed=1)
        adapters, base = lora.split_adapters(_perturbed_adapters(lora_params))

        def loss(adapters):
            logprobs, _ = transformer.completion_logprobs(
                lora_graphdef, lora.merge_params(adapters, base), *batch, 1.0, 2
            )
            return jnp.sum(logprobs)

        grads[remat] = jax.jit(jax.grad(loss))(adapters)
    assert max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree.leaves(grads[False])) > 1e-2
    for with_remat, without in zip(jax.tree.leaves(grads[True]), jax.tree.leaves(grads[False])):
        np.testing.assert_allclose(with_remat, without, rtol=0, atol=1e-5)


def test_adapters_created_on_placed_params_under_a_mesh():
    """Under a mesh the model runs its layers as a scan over per-iteration block copies; add_lora
    still creates every adapter (it runs the creating call as the loop), placed like its kernel."""
    graphdef, params = transformer.init_params(CFG, 0)
    mesh = make_mesh(jax.devices()[:4], {"fsdp": 2, "tensor": 2})
    with mesh_context(mesh):
        _, lora_params = lora.add_lora(graphdef, jax.device_put(params, state_shardings(params, mesh)), SETTINGS, 1)
    adapters = dict(nnx.to_flat_state(lora.split_adapters(lora_params)[0]))
    assert len(adapters) == 2 * 7 * 2
    assert transformer.SCAN_LAYERS is None  # restored
    up_a = adapters[("blocks", 0, "mlp", "up_proj", "kernel_lora_a")][...]
    assert up_a.sharding.spec == jax.sharding.PartitionSpec("fsdp", None)


# ----------------------------------------------------------------------------------------------
# remat on the grouped shared-prompt path
# ----------------------------------------------------------------------------------------------


def _remat_primitive_name() -> str:
    """The primitive `jax.checkpoint` leaves in a differentiated jaxpr (named here, not assumed)."""
    jaxpr = jax.make_jaxpr(jax.grad(jax.checkpoint(jnp.sin)))(1.0).jaxpr
    return next(
        eqn.primitive.name for eqn in jaxpr.eqns if "remat" in eqn.primitive.name or "checkpoint" in eqn.primitive.name
    )


def _count(jaxpr, name: str) -> int:
    return sum(
        (eqn.primitive.name == name) + sum(_count(sub, name) for sub in jax.extend.core.jaxprs_in_params(eqn.params))
        for eqn in jaxpr.eqns
    )


def _grouped_batch():
    return _batch(group=2)  # 2 prompts x G=2


@pytest.mark.parametrize("scan", [False, True])
def test_remat_covers_the_grouped_completion_pass(monkeypatch, scan):
    monkeypatch.setattr(transformer, "SCAN_LAYERS", scan)
    batch = _grouped_batch()
    name = _remat_primitive_name()
    counts, results = {}, {}
    for remat in (False, True):
        graphdef, params = transformer.init_params(dataclasses.replace(CFG, remat=remat), 0)

        def loss(params, group):
            logprobs, _ = transformer.completion_logprobs(graphdef, params, *batch, 1.0, group)
            return jnp.sum(logprobs), logprobs

        for group in (1, 2):
            grad_fn = jax.grad(loss, has_aux=True)
            counts[remat, group] = _count(jax.make_jaxpr(grad_fn, static_argnums=1)(params, group).jaxpr, name)
            results[remat, group] = jax.jit(grad_fn, static_argnums=1)(params, group)
    # The chunked log-softmax is always checkpointed (one); remat adds one per block per model pass:
    # the loop has 2 blocks per pass, the scan one body per pass. Group 1 runs one pass; group 2 a
    # prompt prefill and the cached completion chunk (before the fix only the prefill was covered).
    per_pass = 1 if scan else CFG.num_layers
    logits_chunks = counts[False, 1]
    assert counts[False, 2] == logits_chunks
    assert counts[True, 1] == logits_chunks + per_pass
    assert counts[True, 2] == logits_chunks + 2 * per_pass
    # and the values: grouped == whole-sequence, remat == no remat
    reference_grads, reference_logprobs = results[False, 1]
    for key, (grads, logprobs) in results.items():
        np.testing.assert_allclose(logprobs, reference_logprobs, rtol=0, atol=1e-5, err_msg=str(key))
        for leaf, reference in zip(jax.tree.leaves(grads), jax.tree.leaves(reference_grads)):
            np.testing.assert_allclose(leaf, reference, rtol=0, atol=1e-4, err_msg=str(key))

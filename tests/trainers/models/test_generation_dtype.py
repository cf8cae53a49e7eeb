"""With model.dtype bfloat16 the generator reads matrices cast once to bfloat16 (not at every decode
step), and samples exactly what the float32 weights sample."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from trainers.config import parse_config
from trainers.loop.trainer import GRPOTrainer
from trainers.models.generate import SamplingParams, cast_for_generation, generate
from trainers.models.presets import PRESETS
from trainers.models.transformer import init_params
from trainers.step.placement import Placement


def _bf16_model():
    cfg = dataclasses.replace(PRESETS["tiny"], dtype="bfloat16")
    return init_params(cfg, 0)


def test_cast_matrices_only_and_same_samples():
    graphdef, params = _bf16_model()
    cast = cast_for_generation(params, "bfloat16")
    for leaf, original in zip(jax.tree.leaves(cast), jax.tree.leaves(params)):
        assert leaf.dtype == (jnp.bfloat16 if original.ndim >= 2 else jnp.float32)
    assert cast_for_generation(params, "float32") is params and cast_for_generation(params, None) is params
    prompts = np.random.default_rng(0).integers(3, 30, size=(4, 7)).astype(np.int32)
    valid = np.ones_like(prompts, dtype=bool)
    valid[0, :3] = False
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, stop_at_eos=False)
    a = generate(graphdef, params, prompts, valid, jax.random.key(1), sampling)
    b = generate(graphdef, cast, prompts, valid, jax.random.key(1), sampling)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.logprobs, b.logprobs)
    np.testing.assert_array_equal(a.mask, b.mask)


def test_rollout_copy_is_cast_and_never_the_trainers_buffers():
    _, params = _bf16_model()
    copy = Placement(generation_dtype="bfloat16").rollout_copy(params)
    for leaf, original in zip(jax.tree.leaves(copy), jax.tree.leaves(params)):
        assert leaf is not original
        assert leaf.dtype == (jnp.bfloat16 if original.ndim >= 2 else jnp.float32)
        np.testing.assert_array_equal(
            np.asarray(leaf.astype(jnp.float32)), np.asarray(original.astype(leaf.dtype).astype(jnp.float32))
        )
    plain = Placement().rollout_copy(params)
    assert all(a is not b and a.dtype == b.dtype for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(params)))


def test_bfloat16_run_generates_from_the_cast_weights(tmp_path):
    config = parse_config(
        {
            "model": {"preset": "tiny", "dtype": "bfloat16"},
            "rollout": {"max_new_tokens": 8},
            "batch": {"prompts_per_step": 2},
            "grpo": {"num_generations": 2},
            "train": {"max_steps": 1},
            "checkpoint": {"every_steps": 0},
        }
    )
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    assert trainer.placement.generation_dtype == "bfloat16"
    seen = []
    generation_weights = trainer.placement.generation_weights
    object.__setattr__(
        trainer.placement, "generation_weights", lambda params: seen.append(generation_weights(params)) or seen[-1]
    )
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    assert len(seen) == 1  # once for the step, not per generation call or decode step
    assert {leaf.dtype for leaf in jax.tree.leaves(seen[0]) if leaf.ndim >= 2} == {jnp.dtype(jnp.bfloat16)}
    assert rollout.completion_mask.any() and np.isfinite(rollout.sample_logprobs).all()
    metrics = trainer.train_on(rollout)
    assert np.isfinite(metrics["loss/policy"]) and np.isfinite(metrics["grad_norm"])

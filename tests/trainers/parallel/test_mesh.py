"""One run on several meshes: the logical-axis rules, and three training steps that agree across
mesh (1), data 2 x fsdp 4 and fsdp 4 x tensor 2 (8 CPU devices, set up by tests/conftest.py)."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from trainers.config import parse_config
from trainers.loop.trainer import GRPOTrainer
from trainers.models.generate import SamplingParams, generate
from trainers.models.presets import PRESETS
from trainers.models.transformer import init_params
from trainers.parallel.mesh import MeshError, make_mesh, meshes_for, resolve_axis_sizes
from trainers.parallel.rules import mesh_spec, state_shardings


def test_mesh_spec_maps_logical_axes_by_the_rules_table():
    sizes = {"data": 2, "fsdp": 4, "tensor": 2}
    # q projection [embed, heads]: FSDP over the hidden dimension, tensor over the heads
    assert mesh_spec(("embed", "heads"), (64, 64), sizes) == P("fsdp", "tensor")
    # o projection [heads, embed]: row-wise
    assert mesh_spec(("heads", "embed"), (64, 64), sizes) == P("tensor", "fsdp")
    # a batch is split over data x fsdp together
    assert mesh_spec(("batch", None, None), (16, 5, 64), sizes) == P(("data", "fsdp"))
    # an axis that does not divide the dimension is left out (6 rows: data 2 divides, 2 x 4 does not)
    assert mesh_spec(("batch",), (6,), sizes) == P("data")
    # a mesh axis is used once per array; norm scales are replicated; size-1 axes are never named
    assert mesh_spec(("vocab", "heads"), (128, 64), sizes) == P("tensor")
    assert mesh_spec(("norm",), (64,), sizes) == P()
    assert mesh_spec(("embed", "heads"), (64, 64), {"data": 1, "fsdp": 1, "tensor": 1}) == P()


def test_resolve_axis_sizes():
    assert resolve_axis_sizes({"data": 2, "fsdp": -1, "tensor": 1}, 8) == {"data": 2, "fsdp": 4, "tensor": 1}
    with pytest.raises(MeshError) as error:
        resolve_axis_sizes({"data": 2, "fsdp": 2, "tensor": 1}, 8)
    assert "mesh" in str(error.value) and "8 devices" in str(error.value)
    with pytest.raises(MeshError) as error:
        resolve_axis_sizes({"data": 3, "fsdp": -1, "tensor": 1}, 8)
    assert error.value.field == "mesh.fsdp"


def test_default_config_has_no_mesh_and_too_many_devices_name_the_field():
    assert meshes_for(parse_config({}).mesh) == (None, None)
    with pytest.raises(MeshError) as error:
        meshes_for(parse_config({"mesh": {"fsdp": 16}}).mesh)
    assert "16 devices" in str(error.value)
    with pytest.raises(MeshError) as error:
        meshes_for(parse_config({"mesh": {"fsdp": 2, "train_devices": [0, 9]}}).mesh)
    assert error.value.field == "mesh.train_devices"


def test_parameters_split_by_fsdp_and_tensor():
    """Each device's shard of a q projection [hidden 64, heads 4 x 16] on fsdp 4 x tensor 2 is
    [64/4, 64/2]; the embedding [vocab 128, hidden 64] is [128/2, 64/4]; norms are whole."""
    mesh = make_mesh(jax.devices()[:8], {"fsdp": 4, "tensor": 2})
    _, params = init_params(PRESETS["tiny"], seed=0)
    placed = jax.device_put(params, state_shardings(params, mesh))
    q = placed["blocks"][0]["attn"]["q_proj"]["kernel"][...]
    assert {s.data.shape for s in q.addressable_shards} == {(16, 32)}
    embed = placed["embed"][...]
    assert {s.data.shape for s in embed.addressable_shards} == {(64, 16)}
    norm = placed["final_norm"]["scale"][...]
    assert {s.data.shape for s in norm.addressable_shards} == {(64,)}
    np.testing.assert_array_equal(np.asarray(q), np.asarray(params["blocks"][0]["attn"]["q_proj"]["kernel"][...]))


CONFIG = {
    "model": {"preset": "tiny"},
    "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2, "train_micro_batch_sequences": 8},
    "grpo": {"num_generations": 4, "num_iterations": 2, "beta": 0.04},
    # SGD: an update is linear in the gradient, so float rounding stays rounding (Adam's first
    # updates are ~lr x sign(g), which turns rounding on near-zero gradients into lr-sized steps).
    "optimizer": {"name": "sgd", "b1": 0.0, "learning_rate": 0.5},
    "train": {"max_steps": 3},
    "checkpoint": {"every_steps": 0},
}


def _three_steps(mesh: dict, tmp_path) -> tuple[list[tuple[float, float]], list[np.ndarray], GRPOTrainer]:
    config = parse_config({**CONFIG, "mesh": mesh})
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    trainer.source.start(trainer.state.params, 0)
    metrics = [trainer.step() for _ in range(3)]
    trainer.source.stop()
    params = [np.asarray(leaf) for leaf in jax.tree.leaves(trainer.state.params)]
    return [(m["loss/policy"], m["grad_norm"], m["loss/kl"]) for m in metrics], params, trainer


def test_three_steps_agree_across_meshes(tmp_path):
    base_metrics, base_params, _ = _three_steps({}, tmp_path / "one")
    for name, mesh in {"data2_fsdp4": {"data": 2, "fsdp": 4}, "fsdp4_tensor2": {"fsdp": 4, "tensor": 2}}.items():
        metrics, params, trainer = _three_steps(mesh, tmp_path / name)
        assert len(trainer.placement.train_mesh.devices.flat) == 8
        np.testing.assert_allclose(metrics, base_metrics, rtol=0, atol=1e-5, err_msg=name)
        for leaf, base in zip(params, base_params):
            np.testing.assert_allclose(leaf, base, rtol=0, atol=1e-5, err_msg=name)
        # the trained weights are still split as the rules say
        kernel = trainer.state.params["blocks"][0]["mlp"]["up_proj"]["kernel"][...]
        expected = (64 // mesh["fsdp"], 256 // mesh.get("tensor", 1))
        assert {s.data.shape for s in kernel.addressable_shards} == {expected}, name


def test_sharded_generation_matches_one_device():
    """Greedy decoding with the weights and rows split over fsdp 2 x tensor 2 picks the same tokens."""
    cfg = PRESETS["tiny"]
    graphdef, params = init_params(cfg, seed=1)
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, cfg.vocab_size, (4, 6)).astype(np.int32)
    valid = np.ones_like(tokens, bool)
    valid[1, :2] = False
    sampling = SamplingParams(max_new_tokens=8, temperature=0.0, stop_at_eos=False)
    key = jax.random.key(0)
    single = generate(graphdef, params, tokens, valid, key, sampling)
    mesh = make_mesh(jax.devices()[:4], {"fsdp": 2, "tensor": 2})
    from trainers.parallel.host import put
    from trainers.parallel.mesh import mesh_context
    from trainers.parallel.rules import batch_sharding

    with mesh_context(mesh):
        sharded = generate(
            graphdef,
            jax.device_put(params, state_shardings(params, mesh)),
            put(tokens, batch_sharding(mesh, tokens.shape)),
            put(valid, batch_sharding(mesh, tokens.shape)),
            key,
            sampling,
        )
    np.testing.assert_array_equal(sharded.tokens, single.tokens)
    np.testing.assert_allclose(sharded.logprobs, single.logprobs, atol=1e-5)


def test_async_run_trains_on_one_mesh_and_generates_on_another(tmp_path):
    """Training on fsdp 4 over devices 0-3, generation on devices 4-7 (tensor 2 x data 2) with
    in-flight weight updates: the run completes and the collector's weights live on the rollout mesh."""
    config = parse_config(
        {
            **CONFIG,
            "train": {"max_steps": 2},
            "async": {"enabled": True, "in_flight_weight_updates": True, "in_flight_chunk_tokens": 2},
            "mesh": {"fsdp": 4, "train_devices": [0, 1, 2, 3], "rollout_devices": [4, 5, 6, 7], "rollout_tensor": 2},
        }
    )
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    result = trainer.run()
    assert result.status == "succeeded" and result.final_step == 2
    params, _ = trainer.source.collector.newest_weights()
    kernel = params["blocks"][0]["attn"]["q_proj"]["kernel"][...]
    assert {d.id for d in kernel.sharding.device_set} == {4, 5, 6, 7}
    assert {s.data.shape for s in kernel.addressable_shards} == {(64, 32)}  # heads split over rollout tensor 2


def test_evaluation_of_an_odd_prompt_count_on_a_mesh_matches_one_device(tmp_path):
    """5 eval prompts do not split over fsdp 4: the rows go where they divide, and the greedy
    evaluation scores the same as on one device."""
    scores = []
    for mesh in ({}, {"fsdp": 4}):
        config = parse_config(
            {
                **CONFIG,
                "train": {"max_steps": 1},
                "mesh": mesh,
                "eval": {"every_steps": 1, "prompts": 5, "samples_per_prompt": 2},
            }
        )
        trainer = GRPOTrainer(config, str(tmp_path / str(len(mesh))))
        scores.append(trainer.evaluate())
    assert scores[1]["eval/reward_mean"] == pytest.approx(scores[0]["eval/reward_mean"], abs=1e-6)
    assert scores[1]["eval/accuracy"] == scores[0]["eval/accuracy"]
    assert scores[1]["eval/pass@1"] == scores[0]["eval/pass@1"] and scores[1]["eval/pass@2"] == scores[0]["eval/pass@2"]

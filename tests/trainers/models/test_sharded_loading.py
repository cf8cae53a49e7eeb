"""Sharded loading: a Hugging Face folder read block by block straight into each device's shard
(`load_pretrained(..., shardings=)`), and a random init drawn sharded (`initial_params(...,
shardings=)`), on fsdp 4 x tensor 2 and fsdp 8 (8 CPU devices, set up by tests/conftest.py).

The folder is a tiny Qwen2-shaped model (q/k/v biases, untied LM head) written here with numpy in
two safetensors files with an index, in float32 or bfloat16."""

from __future__ import annotations

import json

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors.numpy import save_file

from trainers.config import parse_config
from trainers.loop.policy import initial_params
from trainers.models.hf_config import ModelFolderError, read_model_config
from trainers.models.hf_weights import abstract_params, load_pretrained
from trainers.models.transformer import init_params
from trainers.parallel.mesh import make_mesh
from trainers.parallel.rules import state_shardings

VOCAB, HIDDEN, MLP, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 96, 64, 128, 2, 4, 2, 16

MESHES = {"fsdp4_tensor2": {"fsdp": 4, "tensor": 2}, "fsdp8": {"fsdp": 8}}

# Each device's shard of some parameters (ours: [in, out]) by hand, per mesh. The rules split
# `embed` (hidden, 64) over fsdp and heads / kv_heads / mlp / vocab over tensor; norms whole.
SHARD_SHAPES = {
    "fsdp4_tensor2": {
        ("embed",): (96 // 2, 64 // 4),  # [vocab, embed]
        ("lm_head",): (64 // 4, 96 // 2),  # [embed, vocab]
        ("blocks", 0, "attn", "q_proj", "kernel"): (64 // 4, 64 // 2),  # [embed, heads 4 x 16]
        ("blocks", 0, "attn", "k_proj", "kernel"): (64 // 4, 32 // 2),  # [embed, kv heads 2 x 16]
        ("blocks", 1, "attn", "o_proj", "kernel"): (64 // 2, 64 // 4),  # [heads, embed]
        ("blocks", 1, "mlp", "down_proj", "kernel"): (128 // 2, 64 // 4),  # [mlp, embed]
        ("blocks", 0, "attn", "q_proj", "bias"): (64 // 2,),  # [heads]
        ("blocks", 0, "attn_norm", "scale"): (64,),
        ("final_norm", "scale"): (64,),
    },
    "fsdp8": {
        ("embed",): (96, 64 // 8),
        ("lm_head",): (64 // 8, 96),
        ("blocks", 0, "attn", "q_proj", "kernel"): (64 // 8, 64),
        ("blocks", 0, "attn", "k_proj", "kernel"): (64 // 8, 32),
        ("blocks", 1, "attn", "o_proj", "kernel"): (64, 64 // 8),
        ("blocks", 1, "mlp", "down_proj", "kernel"): (128, 64 // 8),
        ("blocks", 0, "attn", "q_proj", "bias"): (64,),
        ("blocks", 0, "attn_norm", "scale"): (64,),
        ("final_norm", "scale"): (64,),
    },
}


def _hf_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 tensors with Hugging Face Qwen2 names and PyTorch layouts ([out, in])."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (0.3 * rng.standard_normal(shape)).astype(np.float32)

    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    tensors = {
        "model.embed_tokens.weight": normal(VOCAB, HIDDEN),
        "lm_head.weight": normal(VOCAB, HIDDEN),
        "model.norm.weight": 1 + normal(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": 1 + normal(HIDDEN),
                p + "post_attention_layernorm.weight": 1 + normal(HIDDEN),
                p + "self_attn.q_proj.weight": normal(q_out, HIDDEN),
                p + "self_attn.q_proj.bias": normal(q_out),
                p + "self_attn.k_proj.weight": normal(kv_out, HIDDEN),
                p + "self_attn.k_proj.bias": normal(kv_out),
                p + "self_attn.v_proj.weight": normal(kv_out, HIDDEN),
                p + "self_attn.v_proj.bias": normal(kv_out),
                p + "self_attn.o_proj.weight": normal(HIDDEN, q_out),
                p + "mlp.gate_proj.weight": normal(MLP, HIDDEN),
                p + "mlp.up_proj.weight": normal(MLP, HIDDEN),
                p + "mlp.down_proj.weight": normal(HIDDEN, MLP),
            }
        )
    return tensors


def write_folder(folder, tensors: dict[str, np.ndarray], dtype=np.float32):
    """config.json and the tensors (cast to `dtype`) in two safetensors files with an index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "vocab_size": VOCAB,
                "hidden_size": HIDDEN,
                "intermediate_size": MLP,
                "num_hidden_layers": LAYERS,
                "num_attention_heads": HEADS,
                "num_key_value_heads": KV_HEADS,
                "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0,
                "max_position_embeddings": 256,
                "tie_word_embeddings": False,
                "hidden_act": "silu",
            }
        )
    )
    names = sorted(tensors)
    files = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for file_name, file_names in files.items():
        save_file({n: tensors[n].astype(dtype) for n in file_names}, str(folder / file_name), metadata={"format": "pt"})
    weight_map = {n: file_name for file_name, file_names in files.items() for n in file_names}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("qwen2"), _hf_tensors())


def _mesh(sizes: dict):
    return make_mesh(jax.devices()[:8], sizes)


def _shardings(cfg, mesh):
    return state_shardings(abstract_params(cfg)[1], mesh)


def _leaves(params) -> dict[tuple, jax.Array]:
    """{(path keys...): array} of a params tree."""
    return {
        tuple(
            getattr(k, "key", getattr(k, "name", None)) for k in path if not (getattr(k, "name", None) == "value")
        ): leaf
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
    }


class ReadSpy:
    """Wraps safetensors.safe_open: records every block read through get_slice (name, elements)
    and every whole-tensor read (get_tensor)."""

    def __init__(self, monkeypatch):
        self.blocks: list[tuple[str, int]] = []
        self.whole: list[str] = []
        real_open = safetensors.safe_open
        spy = self

        class Slice:
            def __init__(self, name, inner):
                self.name, self.inner = name, inner

            def get_shape(self):
                return self.inner.get_shape()

            def get_dtype(self):
                return self.inner.get_dtype()

            def __getitem__(self, index):
                block = self.inner[index]
                spy.blocks.append((self.name, block.size))
                return block

        class Handle:
            def __init__(self, *args, **kwargs):
                self.inner = real_open(*args, **kwargs)

            def __enter__(self):
                self.entered = self.inner.__enter__()
                return self

            def __exit__(self, *exc):
                return self.inner.__exit__(*exc)

            def keys(self):
                return self.entered.keys()

            def get_slice(self, name):
                return Slice(name, self.entered.get_slice(name))

            def get_tensor(self, name):
                spy.whole.append(name)
                return self.entered.get_tensor(name)

        monkeypatch.setattr(safetensors, "safe_open", Handle)


@pytest.mark.parametrize("mesh_name", sorted(MESHES))
def test_sharded_load_equals_the_unsharded_load_split_by_the_rules(folder, mesh_name, monkeypatch):
    cfg = read_model_config(str(folder))
    graphdef, whole = load_pretrained(str(folder), cfg, progress=False)
    mesh = _mesh(MESHES[mesh_name])
    spy = ReadSpy(monkeypatch)
    sharded_graphdef, sharded = load_pretrained(str(folder), cfg, progress=False, shardings=_shardings(cfg, mesh))
    assert sharded_graphdef == graphdef
    whole_leaves, sharded_leaves = _leaves(whole), _leaves(sharded)
    assert whole_leaves.keys() == sharded_leaves.keys()
    for key, array in sharded_leaves.items():
        assert array.dtype == np.float32, key
        assert array.sharding.mesh == mesh, key
        np.testing.assert_array_equal(np.asarray(array), np.asarray(whole_leaves[key]), err_msg=str(key))
    for key, shard_shape in SHARD_SHAPES[mesh_name].items():
        shards = sharded_leaves[key].addressable_shards
        assert len(shards) == 8 and {s.data.shape for s in shards} == {shard_shape}, key

    # Only blocks were read, never a whole tensor: every matrix in 8 blocks of 1/8 of it (both meshes
    # split every matrix 8 ways), and each element of the files exactly once (blocks that devices
    # share, such as the replicated norms, are read once).
    sizes = {name: array.size for name, array in _hf_tensors().items()}
    assert spy.whole == []
    for name, elements in spy.blocks:
        if name.endswith("proj.weight") or name in ("model.embed_tokens.weight", "lm_head.weight"):
            assert elements == sizes[name] // 8, name
    assert sum(elements for _, elements in spy.blocks) == sum(sizes.values())
    assert {name for name, _ in spy.blocks} == set(sizes)


def test_bfloat16_files_load_sharded_as_float32(tmp_path):
    tensors = _hf_tensors(seed=1)
    bf16_folder = write_folder(tmp_path / "bf16", tensors, dtype=ml_dtypes.bfloat16)
    cfg = read_model_config(str(bf16_folder))
    _, sharded = load_pretrained(
        str(bf16_folder), cfg, progress=False, shardings=_shardings(cfg, _mesh(MESHES["fsdp4_tensor2"]))
    )
    _, whole = load_pretrained(str(bf16_folder), cfg, progress=False)
    leaves = _leaves(sharded)
    # the bfloat16 values exactly, as float32, in our [in, out] layout
    expected_q = tensors["model.layers.1.self_attn.q_proj.weight"].astype(ml_dtypes.bfloat16).astype(np.float32).T
    q = leaves[("blocks", 1, "attn", "q_proj", "kernel")]
    assert q.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(q), expected_q)
    assert not np.array_equal(expected_q, tensors["model.layers.1.self_attn.q_proj.weight"].T)  # really rounded
    expected_embed = tensors["model.embed_tokens.weight"].astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(leaves[("embed",)]), expected_embed)
    for key, array in _leaves(whole).items():
        assert leaves[key].dtype == np.float32
        np.testing.assert_array_equal(np.asarray(leaves[key]), np.asarray(array), err_msg=str(key))


@pytest.mark.parametrize("broken", ["missing", "unexpected", "wrong_shape"])
def test_bad_folders_give_the_same_errors_sharded(tmp_path, broken):
    """A missing, unexpected or wrong-shaped tensor: the sharded load names it as the unsharded one
    does, from the files' headers."""
    tensors = _hf_tensors()
    if broken == "missing":
        del tensors["model.layers.1.mlp.up_proj.weight"]
    elif broken == "unexpected":
        tensors["model.layers.0.self_attn.o_proj.bias"] = np.zeros(HIDDEN, np.float32)
    else:
        tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((KV_HEADS * HEAD_DIM, HIDDEN + 1), np.float32)
    bad = write_folder(tmp_path / broken, tensors)
    cfg = read_model_config(str(bad))
    with pytest.raises(ModelFolderError) as unsharded_error:
        load_pretrained(str(bad), cfg, progress=False)
    with pytest.raises(ModelFolderError) as sharded_error:
        load_pretrained(str(bad), cfg, progress=False, shardings=_shardings(cfg, _mesh(MESHES["fsdp8"])))
    assert str(sharded_error.value) == str(unsharded_error.value)
    expected = {
        "missing": "missing tensors model.layers.1.mlp.up_proj.weight",
        "unexpected": "unexpected tensor 'model.layers.0.self_attn.o_proj.bias'",
        "wrong_shape": "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (32, 65), expected (32, 64)",
    }
    assert expected[broken] in str(sharded_error.value)


@pytest.mark.parametrize("mesh_name", sorted(MESHES))
def test_random_init_sharded_equals_the_unsharded_init(mesh_name):
    config = parse_config({"model": {"preset": "tiny"}, "seed": 7})
    from trainers.loop.policy import model_config_for

    cfg = model_config_for(config)
    mesh = _mesh(MESHES[mesh_name])
    graphdef, sharded = initial_params(config, cfg, shardings=_shardings(cfg, mesh))
    expected_graphdef, expected = init_params(cfg, 7)
    assert graphdef == expected_graphdef
    expected_leaves = _leaves(expected)
    for key, array in _leaves(sharded).items():
        assert array.sharding.mesh == mesh, key
        np.testing.assert_array_equal(np.asarray(array), np.asarray(expected_leaves[key]), err_msg=str(key))
    # tiny: hidden 64, 4 heads x 16, MLP 256, vocab 128
    q = _leaves(sharded)[("blocks", 0, "attn", "q_proj", "kernel")]
    tensor = MESHES[mesh_name].get("tensor", 1)
    assert {s.data.shape for s in q.addressable_shards} == {(64 // MESHES[mesh_name]["fsdp"], 64 // tensor)}


def test_trainer_on_a_mesh_loads_the_folder_into_its_shards(tmp_path, monkeypatch):
    """GRPOTrainer with model.path on fsdp 8: the weights arrive split (read by blocks, never whole)."""
    from tests.tiny_models import write_tiny_model
    from trainers.loop.trainer import GRPOTrainer

    model_dir = write_tiny_model(tmp_path / "model")
    config = parse_config(
        {
            "model": {"path": str(model_dir)},
            "mesh": {"fsdp": 8},
            "data": {"task": "arithmetic_words", "train_prompts": 16, "eval_prompts": 0, "max_prompt_tokens": 256},
            "rollout": {"max_new_tokens": 8},
            "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 8},
            "grpo": {"num_generations": 2},
            "train": {"max_steps": 1},
            "checkpoint": {"every_steps": 0},
        }
    )
    spy = ReadSpy(monkeypatch)
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    assert spy.whole == [] and spy.blocks
    q = trainer.state.params["blocks"][0]["attn"]["q_proj"]["kernel"][...]  # tiny_models: hidden 32, 4 x 8 heads
    assert {s.data.shape for s in q.addressable_shards} == {(32 // 8, 32)}
    _, whole = load_pretrained(str(model_dir), trainer.model_config, progress=False)
    np.testing.assert_array_equal(np.asarray(q), np.asarray(whole["blocks"][0]["attn"]["q_proj"]["kernel"][...]))

"""Parity with the reference implementation: tiny random Llama, Qwen2 and Qwen3 checkpoints written
by Hugging Face transformers (PyTorch, CPU) into a temporary folder, loaded by this project, give the
same logits (max abs difference <= 1e-4 in float32) and the same 32 greedy tokens; and a trained
policy exported back to a folder loads in transformers with the same logits."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from trainers.models import generate as generate_lib
from trainers.models import transformer as model_lib
from trainers.models.hf_config import ModelFolderError, read_model_config
from trainers.models.hf_weights import load_pretrained, save_pretrained_weights

VOCAB = 96

SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    max_position_embeddings=512,
)

ARCHITECTURES = {
    # Llama with Llama 3 RoPE scaling (original context 64 so that positions < 64 hit all three
    # frequency bands), rope_theta 500000, and attention bias (q/k/v and o).
    "llama": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        dict(
            rope_theta=500000.0,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
    ),
    # Qwen2: bias on q/k/v only, untied.
    "qwen2": (
        transformers.Qwen2Config,
        transformers.Qwen2ForCausalLM,
        dict(rope_theta=1_000_000.0, tie_word_embeddings=False),
    ),
    # Qwen3: q/k RMSNorm, explicit head_dim, tied embeddings.
    "qwen3": (
        transformers.Qwen3Config,
        transformers.Qwen3ForCausalLM,
        dict(head_dim=32, rope_theta=1_000_000.0, tie_word_embeddings=True),
    ),
}


def write_random_checkpoint(folder, arch: str, seed: int = 0):
    """A transformers model of `arch` with every parameter drawn from N(0, 0.3^2) (norm weights
    around 1), saved with save_pretrained; returns the torch model (eval mode)."""
    config_cls, model_cls, extra = ARCHITECTURES[arch]
    config = config_cls(**SHAPE, **extra)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def checkpoint(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    torch_model = write_random_checkpoint(folder, request.param)
    cfg = read_model_config(str(folder))
    graphdef, params = load_pretrained(str(folder), cfg, progress=False)
    return request.param, folder, torch_model, cfg, graphdef, params


def _torch_logits(torch_model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return torch_model(torch.as_tensor(tokens, dtype=torch.long)).logits.float().numpy()


def test_config_maps_the_architecture(checkpoint):
    arch, _, _, cfg, _, _ = checkpoint
    assert cfg.qk_norm == (arch == "qwen3")
    assert cfg.qkv_bias == (arch in ("llama", "qwen2"))
    assert cfg.o_bias == (arch == "llama")
    assert cfg.tie_embeddings == (arch == "qwen3")
    assert (cfg.rope_scaling is not None) == (arch == "llama")


def test_logits_match_transformers(checkpoint):
    _, _, torch_model, _, graphdef, params = checkpoint
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, VOCAB, size=(3, 40)).astype(np.int32)
    ours = np.asarray(
        jax.jit(model_lib.forward, static_argnums=0)(
            graphdef, params, jnp.asarray(tokens), jnp.ones(tokens.shape, bool)
        )
    )
    reference = _torch_logits(torch_model, tokens)
    assert reference.std() > 0.5  # the logits are far from flat, so a wrong mapping shows
    assert np.max(np.abs(ours - reference)) <= 1e-4


def test_greedy_generation_matches_transformers_for_32_tokens(checkpoint):
    _, _, torch_model, _, graphdef, params = checkpoint
    prompt = np.array([[5, 17, 33, 60, 2, 71, 9]], np.int32)
    with torch.no_grad():
        reference = torch_model.generate(
            torch.as_tensor(prompt, dtype=torch.long),
            max_new_tokens=32,
            min_new_tokens=32,
            do_sample=False,
            pad_token_id=0,
        )
    reference_new = reference[0, prompt.shape[1] :].numpy()
    sampling = generate_lib.SamplingParams(max_new_tokens=32, temperature=0.0, stop_at_eos=False, eos_id=0, pad_id=0)
    ours = generate_lib.generate(graphdef, params, prompt, np.ones(prompt.shape, bool), jax.random.key(0), sampling)
    assert len(set(reference_new.tolist())) > 3  # not one token repeated
    np.testing.assert_array_equal(ours.tokens[0], reference_new)


def test_left_padded_prompt_gives_the_unpadded_logits(checkpoint):
    """Left padding is masked out and positions start at the first real token, as transformers with
    an attention mask and position ids does."""
    _, _, torch_model, _, graphdef, params = checkpoint
    tokens = np.array([[0, 0, 0, 11, 12, 13, 14, 15]], np.int32)
    valid = tokens != 0
    ours = np.asarray(model_lib.forward(graphdef, params, jnp.asarray(tokens), jnp.asarray(valid)))
    reference = _torch_logits(torch_model, tokens[:, 3:])
    assert np.max(np.abs(ours[:, 3:] - reference)) <= 1e-4


def test_saved_weights_load_in_transformers_with_the_same_logits(checkpoint, tmp_path):
    """The reverse mapping: perturb our params, write them, load the folder with transformers."""
    arch, folder, _, _, graphdef, params = checkpoint
    changed = jax.tree.map(lambda x: x + 0.01, params)
    out = tmp_path / "export"
    save_pretrained_weights(changed, str(out))
    (out / "config.json").write_text((folder / "config.json").read_text())
    reloaded = ARCHITECTURES[arch][1].from_pretrained(out).eval()
    tokens = np.arange(1, 25, dtype=np.int32)[None, :]
    ours = np.asarray(model_lib.forward(graphdef, changed, jnp.asarray(tokens), jnp.ones(tokens.shape, bool)))
    assert np.max(np.abs(ours - _torch_logits(reloaded, tokens))) <= 1e-4


def test_unsupported_architecture_is_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ModelFolderError) as info:
        read_model_config(str(tmp_path))
    message = str(info.value)
    assert "GPT2LMHeadModel" in message and "LlamaForCausalLM" in message and "Qwen3ForCausalLM" in message


def test_unsupported_rope_scaling_is_refused_naming_the_field(tmp_path):
    write_random_checkpoint(tmp_path, "qwen2")
    data = json.loads((tmp_path / "config.json").read_text())
    data["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelFolderError, match="rope_scaling type 'yarn'"):
        read_model_config(str(tmp_path))

"""A Hugging Face model folder's `config.json` -> `ModelConfig`. No JAX here: config validation reads
a folder's architecture and shape through this module without loading JAX.

Supported: `LlamaForCausalLM`, `Qwen2ForCausalLM` (bias on the q/k/v projections) and
`Qwen3ForCausalLM` (RMSNorm on each head's q and k), tied or untied embeddings, `rope_theta`,
`rms_norm_eps`, and RoPE scaling of type `llama3`. Both spellings of the RoPE settings are read:
transformers 4's `rope_theta` + `rope_scaling` and transformers 5's `rope_parameters`.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from trainers.models.presets import Llama3RopeScaling, ModelConfig

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
_ARCHITECTURE_OF_MODEL_TYPE = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


class ModelFolderError(ValueError):
    """A model folder cannot be used; the message names the file and field and says what would fix it."""


def read_config_json(folder: str) -> dict[str, Any]:
    """The folder's config.json as a dict; ModelFolderError when it is missing or not a JSON object."""
    path = os.path.join(folder, "config.json")
    if not os.path.isdir(folder):
        raise ModelFolderError(f"{folder} is not a directory (a Hugging Face model folder with config.json)")
    if not os.path.isfile(path):
        raise ModelFolderError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ModelFolderError(f"{path}: not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ModelFolderError(f"{path}: expected a JSON object")
    return data


def architecture_of(data: dict[str, Any]) -> str:
    """The causal-LM class a config.json names (`architectures[0]`, else from `model_type`)."""
    names = data.get("architectures") or []
    if names:
        return str(names[0])
    return _ARCHITECTURE_OF_MODEL_TYPE.get(str(data.get("model_type")), str(data.get("model_type")))


def _rope_settings(data: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, scaling dict or None) from either spelling. A scaling of type "default" (transformers 5's
    `rope_parameters`, or a legacy `rope_scaling: {"rope_type" or "type": "default"}`) is no scaling."""
    params = data.get("rope_parameters")
    if isinstance(params, dict):
        theta = params.get("rope_theta", data.get("rope_theta", 10000.0))
        scaling = None if params.get("rope_type", "default") == "default" else params
        return float(theta), scaling
    scaling = data.get("rope_scaling")
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = None
    return float(data.get("rope_theta", 10000.0)), scaling


def _llama3_scaling(scaling: dict[str, Any], path: str) -> Llama3RopeScaling:
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise ModelFolderError(
            f"{path}: rope_scaling type {kind!r} is not supported (supported: llama3, or none); "
            "use a checkpoint without that RoPE scaling"
        )
    try:
        return Llama3RopeScaling(
            factor=float(scaling["factor"]),
            low_freq_factor=float(scaling["low_freq_factor"]),
            high_freq_factor=float(scaling["high_freq_factor"]),
            original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFolderError(
            f"{path}: rope_scaling of type llama3 needs factor, low_freq_factor, "
            f"high_freq_factor and original_max_position_embeddings ({exc})"
        ) from exc


def model_config_from_json(
    data: dict[str, Any], path: str = "config.json", dtype: str = "float32", remat: bool = False
) -> ModelConfig:
    """config.json contents -> ModelConfig; ModelFolderError naming the field for anything unsupported."""
    architecture = architecture_of(data)
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ModelFolderError(
            f"{path}: architecture {architecture!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    if data.get("hidden_act", "silu") != "silu":
        raise ModelFolderError(f"{path}: hidden_act {data.get('hidden_act')!r} is not supported (only silu)")
    if data.get("mlp_bias"):
        raise ModelFolderError(f"{path}: mlp_bias=true is not supported")
    if data.get("use_sliding_window"):
        raise ModelFolderError(f"{path}: use_sliding_window=true is not supported (full attention only)")
    try:
        hidden_size = int(data["hidden_size"])
        num_heads = int(data["num_attention_heads"])
        shape = dict(
            vocab_size=int(data["vocab_size"]),
            num_layers=int(data["num_hidden_layers"]),
            hidden_size=hidden_size,
            mlp_size=int(data["intermediate_size"]),
            num_heads=num_heads,
            head_dim=int(data.get("head_dim") or hidden_size // num_heads),
            num_kv_heads=int(data.get("num_key_value_heads") or num_heads),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFolderError(f"{path}: missing or bad shape field {exc}") from exc
    theta, scaling = _rope_settings(data)
    attention_bias = bool(data.get("attention_bias", False))
    qwen2 = architecture == "Qwen2ForCausalLM"
    try:
        return ModelConfig(
            **shape,
            rope_theta=theta,
            rms_eps=float(data.get("rms_norm_eps", 1e-6)),
            qk_norm=architecture == "Qwen3ForCausalLM",
            qkv_bias=True if qwen2 else attention_bias,
            o_bias=False if qwen2 else attention_bias,
            tie_embeddings=bool(data.get("tie_word_embeddings", False)),
            rope_scaling=None if not scaling else _llama3_scaling(scaling, path),
            dtype=dtype,
            remat=remat,
        )
    except ValueError as exc:
        raise ModelFolderError(f"{path}: {exc}") from exc


def read_model_config(folder: str, dtype: str = "float32", remat: bool = False) -> ModelConfig:
    """ModelConfig of a Hugging Face folder; also checks that weights are there (ModelFolderError if not)."""
    config = model_config_from_json(read_config_json(folder), os.path.join(folder, "config.json"), dtype, remat)
    if not any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHT_FILES) and not any(
        name.endswith(".safetensors") for name in os.listdir(folder)
    ):
        raise ModelFolderError(
            f"{folder} has no *.safetensors weights (model.safetensors, or shards with model.safetensors.index.json)"
        )
    return config


def parameter_count(cfg: ModelConfig) -> int:
    """Parameters of the model `cfg` describes (what the folder's weights hold, tied head counted once)."""
    attention = (
        cfg.hidden_size * (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        + cfg.num_heads * cfg.head_dim * cfg.hidden_size
    )
    if cfg.qkv_bias:
        attention += (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    if cfg.o_bias:
        attention += cfg.hidden_size
    if cfg.qk_norm:
        attention += 2 * cfg.head_dim
    block = attention + 3 * cfg.hidden_size * cfg.mlp_size + 2 * cfg.hidden_size
    head = 0 if cfg.tie_embeddings else cfg.hidden_size * cfg.vocab_size
    return cfg.num_layers * block + cfg.vocab_size * cfg.hidden_size + cfg.hidden_size + head


def describe_folder(folder: str) -> dict[str, Any]:
    """Architecture, size and shape of a model folder, for listings (raises ModelFolderError)."""
    data = read_config_json(folder)
    cfg = model_config_from_json(data, os.path.join(folder, "config.json"))
    count = parameter_count(cfg)
    return {
        "architecture": architecture_of(data),
        "parameters": count,
        "size": _human_count(count),
        "layers": cfg.num_layers,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "has_chat_template": _has_chat_template(folder),
    }


def _has_chat_template(folder: str) -> bool:
    if os.path.isfile(os.path.join(folder, "chat_template.jinja")):
        return True
    try:
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            return bool(json.load(f).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return False


def _human_count(count: int) -> str:
    """135_000_000 -> '135M', 1_540_000_000 -> '1.5B'."""
    if count >= 10**9:
        return f"{count / 1e9:.1f}B"
    if count >= 10**6:
        return f"{math.floor(count / 1e6 + 0.5)}M"
    return f"{count / 1e3:.0f}K"

"""A llama.cpp GGUF file -> a Hugging Face model folder (config.json, model.safetensors in float32,
tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json).

Supported: GGUF architecture `llama` (Llama, SmolLM2, ...) with a byte-level BPE tokenizer
(`tokenizer.ggml.model == "gpt2"`), any tensor type `gguf.quants.dequantize` reads (F32, F16, Q8_0,
Q4_0, Q4_1, K-quants, ...). Quantized weights are dequantized to float32: the folder holds the
quantized model's values, not the original checkpoint's.

Layout facts this module relies on:
  * GGUF lists a tensor's dimensions innermost first (`ne`); the numpy array is the reverse, so a
    GGUF [in_features, out_features] matrix reads as numpy [out_features, in_features], which is
    already PyTorch's Linear layout.
  * llama.cpp's converter permutes the rows of attn_q / attn_k (per head, it interleaves the two
    rotary halves); `unpermute_rows` undoes it.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
import sys
from typing import Any

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from tqdm import tqdm

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# llama.cpp's `tokenizer.ggml.pre` names whose pre-tokenization we can rebuild with `tokenizers`,
# and whether digits are split one by one before the GPT-2 regex. In llama.cpp (llama-vocab.cpp)
# the first group runs the regexes ["\p{N}", GPT-2's], the second only GPT-2's; Hugging Face spells
# them Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)] and ByteLevel(use_regex=True).
SPLIT_DIGITS_PRE = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
GPT2_PRE = ("gpt2", "mpt", "olmo", "jais")

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

# GGUF tensor name inside a block -> Hugging Face name inside `model.layers.{i}.`
_BLOCK_TENSORS = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_TOP_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation: [n_head*head_dim, ...] -> the same shape, Hugging Face row order.

    llama.cpp's converter wrote `w.reshape(n_head, 2, head_dim // 2, *rest).swapaxes(1, 2).reshape(w.shape)`
    (n_head = attention heads for q, kv heads for k): within each head, row (half, i) moved to (i, half).
    This is its exact inverse: read the rows as (i, half) and swap back."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader, key: str, default: Any = None) -> Any:
    """A metadata value as a Python value (str, int, float, bool or list), or `default` when absent."""
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _plain_float(value: float) -> float:
    """A float32 metadata value as the short decimal it was written from (9.99999974e-06 -> 1e-05)."""
    return float(str(np.float32(value)))


def read_llama_config(reader) -> dict[str, Any]:
    """The config.json dict for a `llama` GGUF (ValueError for another architecture or unsupported RoPE)."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"GGUF architecture {arch!r} is not supported (only 'llama')")

    def need(key: str):
        value = _field(reader, f"llama.{key}")
        if value is None:
            raise ValueError(f"GGUF metadata llama.{key} is missing")
        return value

    hidden_size = int(need("embedding_length"))
    num_heads = int(need("attention.head_count"))
    num_kv_heads = int(_field(reader, "llama.attention.head_count_kv", num_heads))
    head_dim = int(_field(reader, "llama.attention.key_length", hidden_size // num_heads))
    rope_dim = int(_field(reader, "llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ValueError(
            f"GGUF llama.rope.dimension_count={rope_dim} differs from head_dim={head_dim}: "
            "partial rotary embeddings are not supported"
        )
    scaling = _field(reader, "llama.rope.scaling.type", "none")
    if scaling not in ("none", None) or any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ValueError(f"GGUF RoPE scaling ({scaling!r}, or a rope_freqs tensor) is not supported")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab_size = int(_field(reader, "llama.vocab_size", len(tokens) if tokens is not None else 0))
    tied = not any(t.name == "output.weight" for t in reader.tensors)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": _plain_float(need("attention.layer_norm_rms_epsilon")),
        "rope_theta": _plain_float(_field(reader, "llama.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_field(reader, "llama.context_length", 2048)),
        "vocab_size": vocab_size,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "float32",
    }
    for name in ("bos", "eos", "padding"):
        token_id = _field(reader, f"tokenizer.ggml.{name}_token_id")
        if token_id is not None:
            config["pad_token_id" if name == "padding" else f"{name}_token_id"] = int(token_id)
    return config


def _tensor_plan(reader, num_layers: int) -> list[tuple[str, Any, tuple[int, ...]]]:
    """[(Hugging Face name, GGUF tensor, numpy shape)] for every tensor; ValueError for an unknown one."""
    plan = []
    for tensor in reader.tensors:
        name = tensor.name
        if name in _TOP_TENSORS:
            hf_name = _TOP_TENSORS[name]
        elif name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest not in _BLOCK_TENSORS or not layer.isdigit() or int(layer) >= num_layers:
                raise ValueError(f"GGUF tensor {name!r} is not part of a llama model this importer knows")
            hf_name = f"model.layers.{int(layer)}.{_BLOCK_TENSORS[rest]}"
        else:
            raise ValueError(f"GGUF tensor {name!r} is not part of a llama model this importer knows")
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF ne order is innermost first
        plan.append((hf_name, tensor, shape))
    return plan


def _float32_tensor(tensor, shape: tuple[int, ...], config: dict[str, Any], unpermute_qk: bool) -> np.ndarray:
    """One GGUF tensor dequantized to a C-contiguous float32 array of numpy `shape`, q/k rows unpermuted."""
    # lazy: the optional `gguf` package, only to import a GGUF file
    import gguf

    values = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
    if values.shape != shape:
        raise ValueError(f"GGUF tensor {tensor.name}: dequantized shape {values.shape}, expected {shape}")
    if unpermute_qk and tensor.name.endswith(".attn_q.weight"):
        values = unpermute_rows(values, config["num_attention_heads"])
    elif unpermute_qk and tensor.name.endswith(".attn_k.weight"):
        values = unpermute_rows(values, config["num_key_value_heads"])
    return np.ascontiguousarray(values)


def write_weights(
    reader, config: dict[str, Any], path: pathlib.Path, *, progress: bool, unpermute_qk: bool = True
) -> None:
    """Write every tensor as float32 to a safetensors file, one tensor in memory at a time.

    The safetensors layout: 8-byte little-endian header size, a JSON header {name: {dtype, shape,
    data_offsets}} padded with spaces to a multiple of 8 bytes, then the tensors' bytes back to back.
    """

    plan = _tensor_plan(reader, config["num_hidden_layers"])
    names = {hf_name for hf_name, _, _ in plan}
    layers = range(config["num_hidden_layers"])
    expected = {"model.embed_tokens.weight", "model.norm.weight"} | {
        f"model.layers.{i}.{suffix}" for i in layers for suffix in _BLOCK_TENSORS.values()
    }
    if not config["tie_word_embeddings"]:
        expected.add("lm_head.weight")
    if names != expected:
        raise ValueError(f"GGUF tensors missing: {sorted(expected - names)[:5]}")

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for hf_name, _, shape in plan:
        size = 4 * int(np.prod(shape))
        header[hf_name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)

    bar = tqdm(plan, desc="convert", unit="tensor", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for _, tensor, shape in bar:
            f.write(_float32_tensor(tensor, shape, config, unpermute_qk).astype("<f4", copy=False).tobytes())
    bar.close()


def build_tokenizer(reader):
    """A `tokenizers.Tokenizer` rebuilt from the GGUF vocabulary (ValueError unless byte-level BPE)."""
    kind = _field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"GGUF tokenizer.ggml.model is {kind!r}; only 'gpt2' (byte-level BPE) is supported")
    pre = _field(reader, "tokenizer.ggml.pre", "gpt2")
    if pre in SPLIT_DIGITS_PRE:
        pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    elif pre in GPT2_PRE:
        pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        raise ValueError(
            f"GGUF tokenizer.ggml.pre {pre!r} is not supported (supported: {', '.join(SPLIT_DIGITS_PRE + GPT2_PRE)})"
        )

    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    token_types = list(_field(reader, "tokenizer.ggml.token_type", [TOKEN_TYPE_NORMAL] * len(tokens)))
    merges = []
    for merge in _field(reader, "tokenizer.ggml.merges", []):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ValueError(f"GGUF merge {merge!r} is not two tokens separated by one space")
        merges.append((parts[0], parts[1]))
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("GGUF vocabulary has duplicate tokens")

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    added = []
    for token, kind_id in zip(tokens, token_types):
        if kind_id == TOKEN_TYPE_CONTROL:
            added.append(AddedToken(token, special=True, normalized=False))
        elif kind_id == TOKEN_TYPE_USER_DEFINED:
            added.append(AddedToken(token, special=False, normalized=False))
    tokenizer.add_tokens(added)  # AddedToken.special decides whether decode(skip_special_tokens) drops it

    bos_id = _field(reader, "tokenizer.ggml.bos_token_id")
    eos_id = _field(reader, "tokenizer.ggml.eos_token_id")
    add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", False)) and bos_id is not None
    add_eos = bool(_field(reader, "tokenizer.ggml.add_eos_token", False)) and eos_id is not None
    if add_bos or add_eos:
        bos = [(tokens[bos_id], bos_id)] if add_bos else []
        eos = [(tokens[eos_id], eos_id)] if add_eos else []
        single = " ".join([b for b, _ in bos] + ["$A"] + [e for e, _ in eos])
        pair = " ".join(
            [b for b, _ in bos]
            + ["$A"]
            + [e for e, _ in eos]
            + [b for b, _ in bos]
            + ["$B:1"]
            + [f"{e}:1" for e, _ in eos]
        )
        tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=bos + eos)
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def write_tokenizer(reader, tokenizer, config: dict[str, Any], out: pathlib.Path) -> None:
    """tokenizer.json (from `build_tokenizer`), tokenizer_config.json, special_tokens_map.json in `out`."""
    tokenizer.save(str(out / "tokenizer.json"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    special = {}
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        token_id = _field(reader, f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            special[name] = tokens[int(token_id)]
    chat_template = _field(reader, "tokenizer.chat_template") or CHATML_TEMPLATE
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "chat_template": chat_template,
        "model_max_length": config["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(_field(reader, "tokenizer.ggml.add_eos_token", False)),
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps(special, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def import_gguf(
    gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *, progress: bool = True, _unpermute_qk: bool = True
) -> pathlib.Path:
    """Convert a llama-architecture GGUF file into a Hugging Face model folder at `out_dir` (created if
    needed; files there of the same names are overwritten). Returns `out_dir` as a Path.

    Writes config.json, model.safetensors (float32, [out_features, in_features] matrices, Hugging Face
    names, `lm_head.weight` only when the file has `output.weight`), tokenizer.json,
    tokenizer_config.json (with the chat template), special_tokens_map.json and generation_config.json.
    ValueError when the architecture, tokenizer or a tensor is not supported.
    `_unpermute_qk=False` keeps llama.cpp's q/k row order: a broken model, for tests only.
    """
    # lazy: the optional `gguf` package, only to import a GGUF file
    import gguf

    gguf_path = pathlib.Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"{gguf_path}: no such file")
    try:
        reader = gguf.GGUFReader(str(gguf_path))
    except ValueError as exc:
        raise ValueError(f"not a readable GGUF file ({exc})") from exc
    config = read_llama_config(reader)
    tokenizer = build_tokenizer(reader)  # refuses an unsupported tokenizer before anything is written
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_weights(reader, config, out / "model.safetensors", progress=progress, unpermute_qk=_unpermute_qk)
    write_tokenizer(reader, tokenizer, config, out)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    generation = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if key in config}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    return out

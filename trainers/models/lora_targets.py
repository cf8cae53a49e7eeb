"""Which projections LoRA can adapt, and their shapes, without JAX: the config checks use it to
refuse a `model.lora.target_modules` that matches nothing, or a rank larger than a layer, before a
run starts (`trainers.models.lora` adds the adapters themselves).

Module paths are those of `transformer.Transformer`: `blocks/<layer>/attn/{q,k,v,o}_proj` and
`blocks/<layer>/mlp/{gate,up,down}_proj`; a pattern must `re.fullmatch` one of them."""

from __future__ import annotations

import re

from trainers.models.presets import ModelConfig

DEFAULT_TARGET_MODULES = r".*/(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
"""Every attention (q, k, v, o) and MLP (gate, up, down) projection of every block."""


def projection_shapes(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """{module path: (in features, out features)} of every projection of every block."""
    heads, kv_heads = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_block = {
        "attn/q_proj": (cfg.hidden_size, heads),
        "attn/k_proj": (cfg.hidden_size, kv_heads),
        "attn/v_proj": (cfg.hidden_size, kv_heads),
        "attn/o_proj": (heads, cfg.hidden_size),
        "mlp/gate_proj": (cfg.hidden_size, cfg.mlp_size),
        "mlp/up_proj": (cfg.hidden_size, cfg.mlp_size),
        "mlp/down_proj": (cfg.mlp_size, cfg.hidden_size),
    }
    return {f"blocks/{layer}/{name}": shape for layer in range(cfg.num_layers) for name, shape in per_block.items()}


def targeted(cfg: ModelConfig, pattern: str) -> dict[str, tuple[int, int]]:
    """The projections whose path fullmatches `pattern` (re.error for a pattern that is no regex)."""
    compiled = re.compile(pattern)
    return {path: shape for path, shape in projection_shapes(cfg).items() if compiled.fullmatch(path)}

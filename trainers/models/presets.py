"""Model shapes: `ModelConfig` and the named presets (`model.preset`). No JAX here, so config
validation can check a preset name without loading JAX; `trainers.models.transformer` builds the network."""

from __future__ import annotations

import dataclasses

LOGITS_CHUNK_ELEMENTS = 1 << 22
"""Logits that `transformer.token_logprobs_and_entropy` computes at once on a CPU: 2^22 float32 values
(16 MiB, 85 positions of a 49152-id vocabulary), small enough to stay in cache while the log-softmax
passes over them (on workload R1's update, 2^22 took 8.6 s against 9.6 s for 2^24 and 13.1 s unchunked)."""
ACCELERATOR_LOGITS_CHUNK_ELEMENTS = 1 << 26
"""The same on a GPU or TPU (256 MiB of float32 logits): large enough to keep the matmul busy."""
QUERY_CHUNK_TOKENS = 512
"""Attention over more query tokens than this (long prompts, long completions, packed rows) runs in
chunks of at most this many queries, each recomputed in the backward pass (`transformer`): the
scores of one chunk [rows, heads, chunk, keys] are alive at a time instead of [rows, heads, queries,
keys] for every layer. Over long key spans the chunks are smaller (`query_chunk_tokens`)."""
ATTENTION_CHUNK_BYTES = 128 * 1024**2
"""The float32 scores of one query chunk are kept at or under this (`query_chunk_tokens`): at
16,448 keys over 4 rows of 9 heads a chunk holds 32 queries, not 512 (0.07 GiB of scores, not 1.2)."""
MIN_QUERY_CHUNK_TOKENS = 16


def query_chunk_tokens(rows: int, heads: int, key_tokens: int, limit: int = QUERY_CHUNK_TOKENS) -> int:
    """The queries of one attention chunk over `key_tokens` keys, `rows` rows of `heads` heads: the
    largest power of two up to `limit` whose float32 scores [rows, heads, chunk, keys] fit in
    ATTENTION_CHUNK_BYTES, and never under MIN_QUERY_CHUNK_TOKENS (nor over `limit`)."""
    per_query = max(rows * heads * key_tokens * 4, 1)
    fits = max(ATTENTION_CHUNK_BYTES // per_query, 1)
    chunk = 1 << (fits.bit_length() - 1)
    return max(min(chunk, limit), min(MIN_QUERY_CHUNK_TOKENS, limit))


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """RoPE frequency scaling of Llama 3.1+ (`rope_scaling` with rope_type "llama3")."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    num_layers: int
    hidden_size: int
    mlp_size: int
    num_heads: int
    head_dim: int
    num_kv_heads: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    qk_norm: bool = True  # RMSNorm on each head's q and k (Qwen3)
    tie_embeddings: bool = False
    qkv_bias: bool = False  # bias on the q/k/v projections (Qwen2; Llama/Qwen3 with attention_bias)
    o_bias: bool = False  # bias on the output projection (Llama/Qwen3 with attention_bias)
    rope_scaling: Llama3RopeScaling | None = None
    dtype: str = "float32"  # compute dtype, "float32" or "bfloat16"; parameters (master weights), logits,
    #                         log-probs, loss and optimizer state are always float32
    remat: bool = False  # recompute each block's activations in the backward pass instead of storing them

    def __post_init__(self):
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")


PRESETS: dict[str, ModelConfig] = {
    # CPU unit tests; must train fast.
    "tiny": ModelConfig(
        vocab_size=128, num_layers=2, hidden_size=64, mlp_size=256, num_heads=4, head_dim=16, num_kv_heads=2
    ),
    "small": ModelConfig(
        vocab_size=128, num_layers=4, hidden_size=128, mlp_size=512, num_heads=4, head_dim=32, num_kv_heads=2
    ),
    # Benchmark workload W1.
    "w1": ModelConfig(
        vocab_size=512, num_layers=4, hidden_size=256, mlp_size=1024, num_heads=4, head_dim=64, num_kv_heads=2
    ),
    "base": ModelConfig(
        vocab_size=512, num_layers=8, hidden_size=512, mlp_size=2048, num_heads=8, head_dim=64, num_kv_heads=4
    ),
    # The real Qwen3-0.6B shape (for GPU users).
    "qwen3-0.6b": ModelConfig(
        vocab_size=151936,
        num_layers=28,
        hidden_size=1024,
        mlp_size=3072,
        num_heads=16,
        head_dim=128,
        num_kv_heads=8,
        rope_theta=1_000_000.0,
        tie_embeddings=True,
    ),
    # SmolLM2-135M's shape (HuggingFaceTB/SmolLM2-135M config.json), randomly initialised: bench/scale.py.
    "smollm2-135m": ModelConfig(
        vocab_size=49152,
        num_layers=30,
        hidden_size=576,
        mlp_size=1536,
        num_heads=9,
        head_dim=64,
        num_kv_heads=3,
        rope_theta=100_000.0,
        rms_eps=1e-5,
        qk_norm=False,
        tie_embeddings=True,
    ),
    # Qwen2-0.5B's shape (Qwen/Qwen2-0.5B config.json: bias on q/k/v, no q/k norm), randomly initialised.
    "qwen2-0.5b": ModelConfig(
        vocab_size=151936,
        num_layers=24,
        hidden_size=896,
        mlp_size=4864,
        num_heads=14,
        head_dim=64,
        num_kv_heads=2,
        rope_theta=1_000_000.0,
        qk_norm=False,
        tie_embeddings=True,
        qkv_bias=True,
    ),
}

"""Decoder-only transformer of the Llama / Qwen2 / Qwen3 family, written with Flax NNX.

Architecture (per block): RMSNorm -> grouped-query attention (q/k/v/o projections, with bias where
`qkv_bias` / `o_bias` (Qwen2), per-head RMSNorm on q and k when `qk_norm` (Qwen3), rotary position
embedding, optionally with Llama 3 frequency scaling) -> residual, RMSNorm -> SwiGLU MLP (gate, up,
down) -> residual. Then a final RMSNorm and the LM head (tied to the token embedding when
`tie_embeddings`). `trainers.models.hf_weights` loads Hugging Face checkpoints into it.

Parallelism: every parameter names the logical axes of its dimensions (`out_sharding=` on its
`nnx.Param`: embed, heads, kv_heads, mlp, vocab, norm) and activations are constrained by logical
axes (`constrain`); `trainers.parallel.rules` maps both to mesh axes. Without a mesh the
constraints are no-ops and the program is the single-device one.

Mixed precision: parameters are always float32 (the master weights the optimizer updates); the
forward pass computes in `cfg.dtype` (each weight is cast where it is used), RMSNorm and softmax in
float32, and logits come out in float32. `cfg.remat` recomputes each block's activations in the
backward pass of training instead of keeping them: the training passes (`forward_hidden`,
`completion_logprobs` with either prompt_group, the cached completion chunk included) call the model
with `remat=cfg.remat`; generation calls it with the default remat=False.

The public functions work on the functional pair (graphdef, params) produced by `init_params`, so
they can be used directly inside `jax.jit` / `jax.grad`; none of them is jitted here (jit at the
outer function only).

Shape letters used in docstrings:
  B batch, T query tokens, S key tokens (KV-cache slots), H hidden_size, M mlp_size, V vocab_size,
  NH num_heads, KVH num_kv_heads, G = NH // KVH query heads per kv head, D head_dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers.models import segment_attention
from trainers.models.backend import compute_backend
from trainers.models.paged_attention import PagedKV, default_implementation, paged_decode_attention, write_token_kv
from trainers.models.presets import (  # the chunk sizes live with the shapes: the JAX-free memory estimate reads them
    ACCELERATOR_LOGITS_CHUNK_ELEMENTS,
    LOGITS_CHUNK_ELEMENTS,
    QUERY_CHUNK_TOKENS,
    Llama3RopeScaling,
    ModelConfig,
    query_chunk_tokens,
)
from trainers.parallel.rules import active_axis_size, constrain, is_variable, logical_axes

# A kv cache is one (keys, values) pair per layer in the model dtype: keys [B, KVH, D, S], values
# [B, KVH, S, D]. With these layouts both attention einsums are plain batched matmuls
# ([G,D] x [D,S] and [G,S] x [S,D] per batch row and kv head), so XLA never transposes the cache;
# a [B, S, KVH, D] cache costs a transpose of the whole cache per layer and decode step, and
# [B, KVH, S, D] keys make the single-query q.k matmul ~1.5x slower on CPU.
KVCache = list[tuple[jax.Array, jax.Array]]

_MASKED_SCORE = float(jnp.finfo(jnp.float32).min)  # finite: fully-masked rows give a uniform softmax, no NaN

_INIT_STD = 0.02  # normal(0, 0.02) for every matrix, as in the Hugging Face Qwen3 initialiser

_BATCH_HIDDEN = ("batch", None, None)  # [B,T,H] activations: split by rows, hidden whole

FUSED_ATTENTION: bool | None = None
"""Attention over several query tokens (prefill, log-prob passes, updates) through
`jax.nn.dot_product_attention` when True; the einsum path below when False. None (default): that
call on accelerators (`backend.compute_backend`), einsum on CPU, where the einsum path is as fast or
faster. The call takes its default implementation, which in JAX 0.10 is XLA's on every backend
([T,S] float32 scores in memory, as in the einsum path): cuDNN's fused kernel runs only when asked
for (implementation="cudnn"), which checks cuDNN's version when the program is traced, so such a
program cannot be lowered for a GPU on a machine without CUDA. Single-token decode steps always
take the einsum path: it reads the KV cache in its own layout, where the fused call would transpose
the whole cache at every step. Both paths give the same values up to float rounding."""


def _fused_attention() -> bool:
    return compute_backend() != "cpu" if FUSED_ATTENTION is None else FUSED_ATTENTION


SCAN_LAYERS: bool | None = None
"""Run the blocks as one `jax.lax.scan` over their stacked parameters (`Transformer._scan_blocks`:
one compiled block, each iteration gathering only its own layer's fsdp shards) when True; as a
Python loop (every block compiled on its own; on a mesh XLA gathers all layers' weights at once, so
the update's temporaries stay ~2-3x the whole model's weights whatever the fsdp size) when False.
None (default): scan on a mesh (`jax.set_mesh`) or with remat (`_scan_layers`), except in
single-token decode steps (they would stack and unstack the whole kv cache at every step); the loop
without a mesh or remat, where it is faster
(on one CPU device: W1's update 0.97 s scanned vs 0.77 s looped, with more temporaries; a 30-layer
SmolLM2-135M update compiles in 26 s scanned vs 15 s looped). Both give the same values up to float
rounding."""


def _scan_layers(decode_step: bool, remat: bool = False) -> bool:
    """SCAN_LAYERS when set; otherwise scan on a mesh, and whenever the blocks are rematerialised:
    a `jax.checkpoint` per block of the Python loop keeps almost as much as no remat once XLA has
    scheduled the program (the update of 1 prompt x G 4 with 1,024-token completions on SmolLM2-135M:
    6.68 GiB of temporaries plain, 6.00 looped with remat, 2.28 scanned with remat), while the
    scan's checkpointed body keeps only each layer's input."""
    if SCAN_LAYERS is not None:
        return SCAN_LAYERS
    return not decode_step and (remat or not jax.sharding.get_abstract_mesh().empty)


def _normal_init(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """float32 N(0, _INIT_STD^2) of `shape`: normal draws, then scaled. The barrier keeps XLA from
    folding the scale into the draw's own sqrt(2) under `jit` (1 ulp apart), so a jitted or sharded
    init (`trainers.loop.policy`) gives exactly the eager values."""
    return jax.lax.optimization_barrier(jax.random.normal(key, shape, jnp.float32)) * _INIT_STD


def _axes(*logical: str) -> dict:
    """nnx.Param metadata naming a parameter's logical axes (`trainers.parallel.rules` maps them to
    mesh axes); never sharded at creation: the trainer places parameters itself."""
    return {"out_sharding": logical, "eager_sharding": False}


# ----------------------------------------------------------------------------------------------
# Modules
# ----------------------------------------------------------------------------------------------


class RMSNorm(nnx.Module):
    """RMSNorm over the last axis, computed in float32, output in the input dtype. scale: [dim]."""

    def __init__(self, dim: int, eps: float):
        self.scale = nnx.Param(jnp.ones((dim,), dtype=jnp.float32), **_axes("norm"))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x_f32 = x.astype(jnp.float32)
        mean_square = jnp.mean(x_f32 * x_f32, axis=-1, keepdims=True)
        y = x_f32 * jax.lax.rsqrt(mean_square + self.eps) * self.scale[...].astype(jnp.float32)
        return y.astype(x.dtype)


def matmul_2d(x: jax.Array, kernel: jax.Array, out_dtype=None) -> jax.Array:
    """x [..., in] @ kernel [in, out] -> [..., out], computed as one 2-D matmul over the flattened
    leading axes. (With 3-D operands XLA CPU's backward pass transposes activations inside slow
    elementwise fusions; the 2-D form makes value_and_grad ~2x faster.) out_dtype: accumulate and
    return in this dtype (None = the promoted input dtype)."""
    leading_shape = x.shape[:-1]
    y = jnp.dot(x.reshape(-1, x.shape[-1]), kernel, preferred_element_type=out_dtype)
    return y.reshape(*leading_shape, kernel.shape[-1])


class Linear(nnx.Module):
    """Projection y = x @ kernel (+ bias), computed in x's dtype; kernel [in_features, out_features]
    float32, bias [out_features] float32 when use_bias; x [..., in] -> [..., out]. axes: the logical
    axes of (in_features, out_features)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rngs: nnx.Rngs,
        use_bias: bool = False,
        axes: tuple[str, str] = ("embed", "embed"),
    ):
        self.kernel = nnx.Param(_normal_init(rngs.params(), (in_features, out_features)), **_axes(*axes))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32), **_axes(axes[1])) if use_bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        # The cast is a no-op except under LoRA (`trainers.models.lora`), whose float32 adapter term
        # would otherwise turn a bfloat16 model's activations into float32.
        y = matmul_2d(x, self.kernel[...].astype(x.dtype)).astype(x.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(x.dtype)
        return y


def rope_inv_freq(head_dim: int, theta: float, scaling: Llama3RopeScaling | None = None) -> np.ndarray:
    """Radians per position of each rotary pair, [D/2] float32: theta^(-2i/D), then Llama 3's scaling
    when given (long wavelengths divided by `factor`, short ones kept, a smooth blend between), as
    transformers' `_compute_llama3_parameters` does."""
    inv_freq = (1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))).astype(np.float32)
    if scaling is None:
        return inv_freq
    old_context = scaling.original_max_position_embeddings
    low_freq_wavelen = old_context / scaling.low_freq_factor
    high_freq_wavelen = old_context / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_context / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_sin_cos(positions: jax.Array, inv_freq: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """positions [B,T] int32, inv_freq [D/2] -> (sin, cos), each [B,T,1,D/2] float32 (broadcast over heads)."""
    angles_rad = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B,T,D/2]
    return jnp.sin(angles_rad)[:, :, None, :], jnp.cos(angles_rad)[:, :, None, :]


def apply_rope(x: jax.Array, sin: jax.Array, cos: jax.Array) -> jax.Array:
    """Rotate-half RoPE (Hugging Face / Qwen layout). x [B,T,heads,D], sin/cos [B,T,1,D/2] -> [B,T,heads,D]."""
    x_f32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x_f32, 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


class Attention(nnx.Module):
    """Grouped-query self-attention with optional KV cache."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.q_proj = Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, rngs, cfg.qkv_bias, ("embed", "heads"))
        self.k_proj = Linear(
            cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, rngs, cfg.qkv_bias, ("embed", "kv_heads")
        )
        self.v_proj = Linear(
            cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, rngs, cfg.qkv_bias, ("embed", "kv_heads")
        )
        self.o_proj = Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, rngs, cfg.o_bias, ("heads", "embed"))
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
        else:
            self.q_norm = None
            self.k_norm = None

    def __call__(
        self,
        x: jax.Array,
        sin: jax.Array,
        cos: jax.Array,
        attn_mask: jax.Array,
        kv_cache: tuple[jax.Array, jax.Array] | None = None,
        cache_index: jax.Array | int | None = None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        """x [B,T,H]; sin/cos [B,T,1,D/2]; attn_mask [B,T,S] bool (True = query may attend to key), or
        for packed rows on a GPU or a TPU their `segment_attention.Segments` (no kv_cache; causal
        within each segment, in that platform's kernel).

        Without kv_cache the keys are this call's own tokens (S = T) and the returned pair is this
        call's (keys [B,KVH,D,T], values [B,KVH,T,D]). With kv_cache (keys [B,KVH,D,S], values
        [B,KVH,S,D]) this call's keys/values are written at slots cache_index .. cache_index+T-1
        (cache_index a scalar) and attention runs over all S slots; the updated cache is returned.
        With a `PagedKV` (a decode step of the engine, T = 1, attn_mask unused) each row's key and
        value go into its pages and it attends over its own tokens (`paged_attention`).
        Returns (output [B,T,H], kv pair or PagedKV).
        """
        batch, num_tokens, _ = x.shape
        groups = self.num_heads // self.num_kv_heads
        q = self.q_proj(x).reshape(batch, num_tokens, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(batch, num_tokens, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(batch, num_tokens, self.num_kv_heads, self.head_dim)
        q = constrain(q, ("batch", None, "act_heads", None))
        k = constrain(k, ("batch", None, "act_kv_heads", None))
        v = constrain(v, ("batch", None, "act_kv_heads", None))
        if self.q_norm is not None:
            q = self.q_norm(q)
            k = self.k_norm(k)
        q = apply_rope(q, sin, cos)
        k = apply_rope(k, sin, cos)

        if isinstance(kv_cache, PagedKV):
            paged = write_token_kv(kv_cache, k[:, 0], v[:, 0])
            out = paged_decode_attention(
                q[:, 0],
                paged.k_pages,
                paged.v_pages,
                paged.block_tables,
                paged.lengths + 1,
                implementation=default_implementation(self.head_dim, paged.k_pages.shape[2]),
            )
            return self.o_proj(out.reshape(batch, 1, self.num_heads * self.head_dim)), paged

        keys = k.transpose(0, 2, 3, 1)  # [B,KVH,D,T]
        values = v.transpose(0, 2, 1, 3)  # [B,KVH,T,D]
        if isinstance(attn_mask, segment_attention.Segments):  # packed rows on a GPU or a TPU
            if kv_cache is not None:
                raise ValueError("segment attention runs over a call's own tokens, without a kv cache")
            out = segment_attention.segment_attention(
                q, k, v, attn_mask.ids, segment_attention.implementation(), segment_attention.INTERPRET
            )
            out = constrain(
                out.reshape(batch, num_tokens, self.num_heads * self.head_dim), ("batch", None, "act_heads")
            )
            return constrain(self.o_proj(out), _BATCH_HIDDEN), (keys, values)
        if kv_cache is not None:
            cache_keys, cache_values = kv_cache
            keys = jax.lax.dynamic_update_slice(cache_keys, keys.astype(cache_keys.dtype), (0, 0, 0, cache_index))
            values = jax.lax.dynamic_update_slice(
                cache_values, values.astype(cache_values.dtype), (0, 0, cache_index, 0)
            )
        keys = constrain(keys, ("batch", "act_kv_heads", None, None))
        values = constrain(values, ("batch", "act_kv_heads", None, None))

        if num_tokens > 1 and _fused_attention():
            # [B,T,N,D] queries, [B,S,KVH,D] keys and values; query head h uses kv head h // G, as below.
            out = jax.nn.dot_product_attention(
                q,
                keys.transpose(0, 3, 1, 2).astype(q.dtype),
                values.transpose(0, 2, 1, 3).astype(q.dtype),
                mask=attn_mask[:, None, :, :],
                scale=1.0 / math.sqrt(self.head_dim),
            )
            out = out.reshape(batch, num_tokens, self.num_heads * self.head_dim)
        else:
            # Query head h uses kv head h // G (grouped-query attention; see KVCache for the layouts).
            q = q.reshape(batch, num_tokens, self.num_kv_heads, groups, self.head_dim).transpose(0, 2, 3, 1, 4)
            scale = 1.0 / math.sqrt(self.head_dim)
            if num_tokens > QUERY_CHUNK_TOKENS:
                out = _query_chunked_attention(q, keys, values, attn_mask, scale)
            else:
                out = _grouped_attention(q, keys, values, attn_mask, scale)  # [B,KVH,G,T,D]
            out = out.transpose(0, 3, 1, 2, 4).reshape(batch, num_tokens, self.num_heads * self.head_dim)
        out = constrain(out, ("batch", None, "act_heads"))
        return constrain(self.o_proj(out), _BATCH_HIDDEN), (keys, values)


def _grouped_attention(
    q: jax.Array, keys: jax.Array, values: jax.Array, attn_mask: jax.Array, scale: float
) -> jax.Array:
    """q [B,KVH,G,T,D], keys [B,KVH,D,S], values [B,KVH,S,D], attn_mask [B,T,S] -> [B,KVH,G,T,D]."""
    scores = jnp.einsum("bkgtd,bkds->bkgts", q, keys, preferred_element_type=jnp.float32)  # [B,KVH,G,T,S]
    scores = jnp.where(attn_mask[:, None, None, :, :], scores * scale, _MASKED_SCORE)
    probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
    return jnp.einsum("bkgts,bksd->bkgtd", probs, values)


def _query_chunked_attention(
    q: jax.Array, keys: jax.Array, values: jax.Array, attn_mask: jax.Array, scale: float
) -> jax.Array:
    """`_grouped_attention` over chunks of queries (`query_chunk_tokens`: QUERY_CHUNK_TOKENS, fewer
    over long key spans), one after the other, each recomputed in the backward pass
    (`jax.checkpoint`): every query still sees all its keys, so the values are the same, and only
    one chunk's scores are alive at a time. The queries are padded to whole chunks (padding rows
    attend to nothing and are cut off)."""
    batch, kv_heads, groups, num_tokens, head_dim = q.shape
    chunk_tokens = query_chunk_tokens(batch, kv_heads * groups, keys.shape[-1], QUERY_CHUNK_TOKENS)
    chunks = -(-num_tokens // chunk_tokens)
    padded = chunks * chunk_tokens
    if padded != num_tokens:
        q = jnp.pad(q, ((0, 0), (0, 0), (0, 0), (0, padded - num_tokens), (0, 0)))
        attn_mask = jnp.pad(attn_mask, ((0, 0), (0, padded - num_tokens), (0, 0)))
    q_chunks = q.reshape(batch, kv_heads, groups, chunks, chunk_tokens, head_dim).transpose(3, 0, 1, 2, 4, 5)
    mask_chunks = attn_mask.reshape(batch, chunks, chunk_tokens, -1).transpose(1, 0, 2, 3)

    @jax.checkpoint
    def chunk(q_and_mask):
        q_chunk, mask_chunk = q_and_mask
        return _grouped_attention(q_chunk, keys, values, mask_chunk, scale)

    out = jax.lax.map(chunk, (q_chunks, mask_chunks))  # [chunks,B,KVH,G,C,D]
    out = out.transpose(1, 2, 3, 0, 4, 5).reshape(batch, kv_heads, groups, padded, head_dim)
    return out[:, :, :, :num_tokens]


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)). x [B,T,H] -> [B,T,H]."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.gate_proj = Linear(cfg.hidden_size, cfg.mlp_size, rngs, axes=("embed", "mlp"))
        self.up_proj = Linear(cfg.hidden_size, cfg.mlp_size, rngs, axes=("embed", "mlp"))
        self.down_proj = Linear(cfg.mlp_size, cfg.hidden_size, rngs, axes=("mlp", "embed"))

    def __call__(self, x: jax.Array) -> jax.Array:
        inner = constrain(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x), ("batch", None, "act_mlp"))
        return constrain(self.down_proj(inner), _BATCH_HIDDEN)


class Block(nnx.Module):
    """Pre-norm transformer block."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.attn = Attention(cfg, rngs)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, sin, cos, attn_mask, kv_cache=None, cache_index=None):
        """x [B,T,H] -> ([B,T,H], kv pair); see Attention.__call__ for the other arguments."""
        attn_out, kv = self.attn(self.attn_norm(x), sin, cos, attn_mask, kv_cache, cache_index)
        x = x + attn_out
        x = x + self.mlp(self.mlp_norm(x))
        return x, kv


class Transformer(nnx.Module):
    """Llama / Qwen2 / Qwen3-style decoder-only language model."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = nnx.Param(
            _normal_init(rngs.params(), (cfg.vocab_size, cfg.hidden_size)), **_axes("vocab", "embed")
        )
        self.blocks = nnx.List([Block(cfg, rngs) for _ in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        if cfg.tie_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nnx.Param(
                _normal_init(rngs.params(), (cfg.hidden_size, cfg.vocab_size)), **_axes("embed", "vocab")
            )

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        attn_mask: jax.Array,
        kv_cache: KVCache | None = None,
        cache_index: jax.Array | int | None = None,
        remat: bool = False,
    ) -> tuple[jax.Array, KVCache]:
        """tokens [B,T] int32, positions [B,T] int32 (RoPE positions), attn_mask [B,T,S] bool.

        Returns (hidden [B,T,H] after the final norm, in the model dtype; kv cache), see
        Attention.__call__ for the cache semantics. Use `logits` to project hidden states.
        remat: recompute each block in the backward pass, keeping only its inputs (the training
        passes set it from `cfg.remat`, with or without a kv cache; generation leaves it False).
        """
        # The lookup gathers the table's fsdp shards first (as FSDP does for every weight it uses); a
        # vocabulary split over `tensor` stays split (each device looks up its own rows).
        table = constrain(self.embed[...], ("vocab", None))
        x = constrain(jnp.take(table, tokens, axis=0).astype(self.cfg.dtype), _BATCH_HIDDEN)  # [B,T,H]
        inv_freq = rope_inv_freq(self.cfg.head_dim, self.cfg.rope_theta, self.cfg.rope_scaling)
        sin, cos = rope_sin_cos(positions, inv_freq)
        paged = kv_cache is not None and isinstance(kv_cache[0], PagedKV)  # the engine's decode: layer by layer
        if not paged and _scan_layers(decode_step=kv_cache is not None and tokens.shape[1] == 1, remat=remat):
            x, new_cache = self._scan_blocks(x, sin, cos, attn_mask, kv_cache, cache_index, remat)
            return self.final_norm(x), new_cache
        new_cache: KVCache = []
        for layer_index, block in enumerate(self.blocks):
            layer_cache = None if kv_cache is None else kv_cache[layer_index]
            if remat:  # training: keep only each block's inputs
                # jax.checkpoint over the block's split state (what nnx.remat does), written out because
                # nnx.remat's merge fails under Qwix's LoRA interception (`trainers.models.lora`).
                block_graphdef, block_state = nnx.split(block)
                x, kv = jax.checkpoint(lambda state, *args: nnx.merge(block_graphdef, state)(*args))(  # noqa: B023 (called at once, in this iteration)
                    block_state, x, sin, cos, attn_mask, layer_cache, cache_index
                )
            else:
                x, kv = block(x, sin, cos, attn_mask, layer_cache, cache_index)
            new_cache.append(kv)
        return self.final_norm(x), new_cache

    def _scan_blocks(
        self, x, sin, cos, attn_mask, kv_cache: KVCache | None, cache_index, remat: bool = False
    ) -> tuple[jax.Array, KVCache]:
        """The blocks as one `jax.lax.scan` over layers: every parameter leaf of the L blocks is
        stacked into an [L, ...] array (sharded like the leaf, the layer axis whole), and the scan
        body rebuilds one Block from its layer's slice. On a mesh each iteration gathers only its
        own layer's fsdp shards, so the gathered weights live one layer at a time; gradients flow
        back to the per-layer parameters through the stack. The kv cache (per layer in and out, as
        `KVCache`) is scanned as stacked [L, ...] arrays. With `remat` (training, with or without a
        cache) the body is rematerialised: the backward pass keeps only each layer's inputs."""
        block_graphdef, _ = nnx.split(self.blocks[0])
        treedef = jax.tree.structure(nnx.state(self.blocks[0]))
        per_layer = [jax.tree.leaves(nnx.state(block), is_leaf=is_variable) for block in self.blocks]
        stacked = [
            constrain(jnp.stack([layer[i][...] for layer in per_layer]), ("layers", *logical_axes(variable)))
            for i, variable in enumerate(per_layer[0])
        ]

        def block_of(layer_leaves) -> Block:
            return nnx.merge(block_graphdef, jax.tree.unflatten(treedef, layer_leaves))

        if kv_cache is None:

            def body(h, layer_leaves):
                return block_of(layer_leaves)(constrain(h, _BATCH_HIDDEN), sin, cos, attn_mask)

            if remat:  # training: keep only each layer's input
                body = jax.checkpoint(body, prevent_cse=False)
            x, (keys, values) = jax.lax.scan(body, x, stacked)
        else:

            def body(h, layer):
                layer_leaves, layer_cache = layer
                return block_of(layer_leaves)(
                    constrain(h, _BATCH_HIDDEN), sin, cos, attn_mask, layer_cache, cache_index
                )

            if remat:  # training's cached completion chunk (`_grouped_hidden`): keep only each layer's inputs
                body = jax.checkpoint(body, prevent_cse=False)
            cache = (jnp.stack([k for k, _ in kv_cache]), jnp.stack([v for _, v in kv_cache]))
            x, (keys, values) = jax.lax.scan(body, x, (stacked, cache))
        return x, [(keys[i], values[i]) for i in range(len(self.blocks))]

    def logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [..., H] -> logits [..., V] float32 (matmul in hidden's dtype, accumulated in float32)."""
        kernel = self.embed[...].T if self.lm_head is None else self.lm_head[...]  # [H,V]
        return matmul_2d(hidden, kernel.astype(hidden.dtype), out_dtype=jnp.float32)


# ----------------------------------------------------------------------------------------------
# Functional API
# ----------------------------------------------------------------------------------------------


def init_params(cfg: ModelConfig, seed: int) -> tuple[nnx.GraphDef, nnx.State]:
    """Random init; returns (graphdef, params) where params is the nnx.State pytree of arrays (nnx.Param only)."""
    model = Transformer(cfg, nnx.Rngs(params=seed))
    graphdef, params = nnx.split(model, nnx.Param)
    return graphdef, params


def extend_kv_cache(kv_cache: KVCache, extra_slots: int) -> KVCache:
    """Append extra_slots empty (zero) slots to every layer's keys [B,KVH,D,S] and values [B,KVH,S,D]."""
    return [
        (
            jnp.pad(keys, ((0, 0), (0, 0), (0, 0), (0, extra_slots))),
            jnp.pad(values, ((0, 0), (0, 0), (0, extra_slots), (0, 0))),
        )
        for keys, values in kv_cache
    ]


def positions_from_valid(valid: jax.Array) -> jax.Array:
    """valid [B,T] bool -> RoPE positions [B,T] int32 = cumsum(valid) - 1, clamped at 0 (left padding)."""
    return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)


def causal_padding_mask(valid: jax.Array) -> jax.Array:
    """valid [B,T] bool -> attention mask [B,T,T] bool: query t may attend key s iff s <= t and key s is valid."""
    num_tokens = valid.shape[1]
    causal = jnp.tril(jnp.ones((num_tokens, num_tokens), dtype=jnp.bool_))
    return causal[None, :, :] & valid[:, None, :]


def forward_hidden(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, valid: jax.Array):
    """Like `forward` but returns (model, hidden [B,T,H] after the final norm, model dtype); use
    model.logits(hidden[...]) to project only the positions that are needed."""
    model = nnx.merge(graphdef, params)
    hidden, _ = model(tokens, positions_from_valid(valid), causal_padding_mask(valid), remat=model.cfg.remat)
    return model, hidden


def forward(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """tokens [B,T] int32, valid [B,T] bool (False = padding, prompts are LEFT-padded, completions right-padded).

    Positions are cumsum(valid)-1 (so a left-padded prompt starts at position 0). Attention is causal
    and ignores invalid keys. Returns logits [B,T,V] float32.
    """
    model, hidden = forward_hidden(graphdef, params, tokens, valid)
    return model.logits(hidden)


def completion_logprobs(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    completion_tokens: jax.Array,
    completion_mask: jax.Array,
    temperature: float | jax.Array,
    prompt_group: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """prompt_tokens/prompt_valid [B,Lp] (left-padded), completion_tokens/completion_mask [B,Lc] (right-padded).

    Runs the model over concat(prompt, completion) and returns (logprobs [B,Lc] float32,
    entropy [B,Lc] float32 in nats): log-prob of each completion token under
    log_softmax(logits / temperature) and the entropy of that distribution; zeros where
    completion_mask is False. temperature <= 0 (greedy) is treated as 1. Differentiable w.r.t.
    params and usable inside jax.jit / jax.grad.

    prompt_group = G > 1 promises that rows b*G .. b*G+G-1 share one prompt (GRPO's G completions
    per prompt; `shared_prompt_group` checks it on the host): the prompt then runs once per group
    and its keys/values serve the group's G completions (`_grouped_hidden`), the same values as the
    whole-sequence forward with G x less prompt work; gradients through the shared prompt add up
    over the group.
    """
    prompt_len = prompt_tokens.shape[1]
    completion_len = completion_tokens.shape[1]
    completion_tokens = completion_tokens.astype(prompt_tokens.dtype)
    if prompt_group > 1:
        model, hidden = _grouped_hidden(
            graphdef, params, prompt_tokens, prompt_valid, completion_tokens, completion_mask, prompt_group
        )
    else:
        tokens = jnp.concatenate([prompt_tokens, completion_tokens], axis=1)
        valid = jnp.concatenate([prompt_valid, completion_mask], axis=1)
        model, hidden = forward_hidden(graphdef, params, tokens, valid)
        # The hidden state at index i predicts token i+1: completion token j is predicted at prompt_len-1+j.
        hidden = hidden[:, prompt_len - 1 : prompt_len - 1 + completion_len]  # [B,Lc,H]
    temperature = jnp.asarray(temperature, dtype=jnp.float32)
    temperature = jnp.where(temperature > 0, temperature, 1.0)
    token_logprobs, entropy = token_logprobs_and_entropy(model, hidden, completion_tokens, temperature)
    zeros = jnp.zeros_like(token_logprobs)
    return jnp.where(completion_mask, token_logprobs, zeros), jnp.where(completion_mask, entropy, zeros)


def packed_logprobs(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    packed: dict[str, jax.Array],
    completion_shape: tuple[int, int],
    temperature: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """`completion_logprobs` of a packed micro-batch (`trainers.step.packing`): packed["tokens" ...]
    with the `packed_` names of `PackedRows.arrays` ([R, L] rows, [R, Tr] completion tokens).
    Returns (logprobs, entropy) [S, Lc] = completion_shape, float32, zeros where no token: the
    values of the unpacked pass, with the model run over the rows' R x L positions and the LM head
    over their R x Tr completion tokens only. Attention reads the dense segment mask on CPU; on a
    GPU or a TPU the segment ids, in a fused kernel (`segment_attention`), which needs rows of one
    sequence per segment: packed with `share_prompts=segment_attention.shares_prompts()`."""
    model = nnx.merge(graphdef, params)
    tokens, segments, members = packed["packed_tokens"], packed["packed_segments"], packed["packed_members"]
    if segment_attention.shares_prompts():  # CPU: the dense mask
        mask = segment_attention_mask(segments, members)
    else:  # a GPU or a TPU: the rows hold one sequence per segment (`segment_attention`)
        mask = segment_attention.Segments(segments)
    hidden, _ = model(tokens, packed["packed_positions"], mask, remat=model.cfg.remat)
    predicting = jnp.take_along_axis(hidden, packed["packed_predictor"][..., None], axis=1)  # [R,Tr,H]
    temperature = jnp.asarray(temperature, dtype=jnp.float32)
    temperature = jnp.where(temperature > 0, temperature, 1.0)
    token_logprobs, entropy = token_logprobs_and_entropy(model, predicting, packed["packed_target"], temperature)
    sequences, width = completion_shape
    slot = packed["packed_slot"].reshape(-1)

    def to_sequences(values: jax.Array) -> jax.Array:
        flat = jnp.zeros((sequences * width,), jnp.float32).at[slot].set(values.reshape(-1), mode="drop")
        return flat.reshape(sequences, width)

    return to_sequences(token_logprobs), to_sequences(entropy)


def segment_attention_mask(segments: jax.Array, members: jax.Array) -> jax.Array:
    """[R,L] segments and members of packed rows -> [R,L,L] bool (`trainers.step.packing.attention_mask`):
    causal within a unit, a completion seeing its prompt and itself, nothing across units."""
    length = segments.shape[-1]
    causal = jnp.tril(jnp.ones((length, length), dtype=jnp.bool_))
    same_unit = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] > 0)
    visible = (members[:, None, :] == 0) | (members[:, None, :] == members[:, :, None])
    return causal[None] & same_unit & visible


def _grouped_hidden(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    completion_tokens: jax.Array,
    completion_mask: jax.Array,
    group: int,
):
    """(model, hidden [B,Lc,H] whose row j predicts completion token j), with the prompt of each group of
    `group` rows run once (`shared_prefix_hidden` with rows b*G .. b*G+G-1 on prompt b): the last
    prompt hidden state predicts completion token 0, completion slot j-1's predicts token j."""
    model = nnx.merge(graphdef, params)

    def to_rows(per_prompt: jax.Array) -> jax.Array:
        return jnp.repeat(per_prompt, group, axis=0)

    prompt_hidden, completion_hidden = shared_prefix_hidden(
        model, prompt_tokens[::group], prompt_valid[::group], to_rows, completion_tokens, completion_mask
    )
    first = to_rows(prompt_hidden[:, -1:])  # the last prompt slot is always valid
    return model, jnp.concatenate([first, completion_hidden[:, :-1]], axis=1)


def shared_prefix_hidden(
    model: Transformer,
    prefix_tokens: jax.Array,
    prefix_valid: jax.Array,
    to_rows: Callable[[jax.Array], jax.Array],
    suffix_tokens: jax.Array,
    suffix_mask: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Rows that share prefixes, each prefix run once: prefix_tokens/prefix_valid [P,Lp] (left-padded)
    are P distinct prefixes; to_rows maps a per-prefix array [P,...] to the rows' [B,...] (each row's
    prefix: a repeat for GRPO's groups, a gather in general); suffix_tokens/suffix_mask [B,Ls]
    (right-padded) are what follows each row's prefix. The prefixes' keys/values go to their rows and
    the suffixes run as one cached chunk after them (slots Lp .. Lp+Ls-1), attending causally to
    themselves and to their prefix's valid slots, at positions (valid prefix tokens) + j: the same
    attention pattern and positions as the whole-sequence forward over valid tokens. Returns (the
    prefixes' hidden states [P,Lp,H], the suffixes' [B,Ls,H] row j after suffix token j)."""
    prefix_len, suffix_len = prefix_tokens.shape[1], suffix_tokens.shape[1]
    prefix_valid = prefix_valid.astype(jnp.bool_)
    prefix_hidden, prefix_kv = model(
        prefix_tokens, positions_from_valid(prefix_valid), causal_padding_mask(prefix_valid), remat=model.cfg.remat
    )
    cache = extend_kv_cache([(to_rows(keys), to_rows(values)) for keys, values in prefix_kv], suffix_len)
    row_prefix_valid = to_rows(prefix_valid)
    slot_valid = jnp.concatenate([row_prefix_valid, suffix_mask.astype(jnp.bool_)], axis=1)
    query_slots = prefix_len + jnp.arange(suffix_len)
    causal = jnp.arange(prefix_len + suffix_len)[None, :] <= query_slots[:, None]  # [Ls, Lp+Ls]
    positions = jnp.sum(row_prefix_valid, axis=1, dtype=jnp.int32)[:, None] + jnp.arange(suffix_len)[None, :]
    suffix_hidden, _ = model(
        suffix_tokens, positions, causal[None] & slot_valid[:, None, :], cache, prefix_len, remat=model.cfg.remat
    )
    return prefix_hidden, suffix_hidden


def token_logprobs_and_entropy(
    model: Transformer, hidden: jax.Array, tokens: jax.Array, temperature: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """hidden [B,L,H], tokens [B,L] -> (log-prob of each token under log_softmax(logits / temperature)
    [B,L] float32, entropy of that distribution [B,L] float32).

    The [B,L,V] logits are never whole: the B*L positions go through in chunks of about
    LOGITS_CHUNK_ELEMENTS / V positions (a `lax.map`), each chunk under `jax.checkpoint`, so the
    forward keeps one chunk's logits at a time and the backward recomputes them chunk by chunk
    (one extra LM-head matmul) instead of holding several [B,L,V] float32 buffers.

    On a mesh (`_sharded_token_logprobs`) the chunks keep every row (split over the batch axes) and
    take a span of positions, and the logits stay split over the vocabulary.
    """
    if not jax.sharding.get_abstract_mesh().empty:
        return _sharded_token_logprobs(model, hidden, tokens, temperature)
    batch, length, width = hidden.shape
    positions = batch * length
    elements = LOGITS_CHUNK_ELEMENTS if compute_backend() == "cpu" else ACCELERATOR_LOGITS_CHUNK_ELEMENTS
    chunk = max(1, min(positions, elements // model.cfg.vocab_size))
    num_chunks = -(-positions // chunk)
    pad = num_chunks * chunk - positions
    flat_hidden = jnp.pad(hidden.reshape(positions, width), ((0, pad), (0, 0))).reshape(num_chunks, chunk, width)
    flat_tokens = jnp.pad(tokens.reshape(positions).astype(jnp.int32), (0, pad)).reshape(num_chunks, chunk)

    @jax.checkpoint
    def one_chunk(chunk_hidden, chunk_tokens):
        logits = model.logits(chunk_hidden) / temperature  # [chunk,V] float32
        log_norm = jax.nn.logsumexp(logits, axis=-1)  # [chunk]
        picked = jnp.take_along_axis(logits, chunk_tokens[:, None], axis=-1)[:, 0]
        probs = jnp.exp(logits - log_norm[:, None])
        entropy = log_norm - jnp.sum(probs * logits, axis=-1)
        return picked - log_norm, entropy

    token_logprobs, entropy = jax.lax.map(lambda args: one_chunk(*args), (flat_hidden, flat_tokens))
    unpad = lambda x: x.reshape(num_chunks * chunk)[:positions].reshape(batch, length)  # noqa: E731
    return unpad(token_logprobs), unpad(entropy)


def _sharded_token_logprobs(
    model: Transformer, hidden: jax.Array, tokens: jax.Array, temperature: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """`token_logprobs_and_entropy` on a mesh: chunks of [B, span] positions (rows split over the
    batch axes, logits [B, span, V] split over the vocabulary axis), so no device ever holds a whole
    row of logits and no chunk lives on only part of the mesh. The picked token's logit is a masked
    sum over the vocabulary (a gather along a split axis would gather the logits)."""
    batch, length, width = hidden.shape
    vocab = model.cfg.vocab_size
    devices = active_axis_size("data") * active_axis_size("fsdp") * active_axis_size("tensor")
    elements = LOGITS_CHUNK_ELEMENTS if compute_backend() == "cpu" else ACCELERATOR_LOGITS_CHUNK_ELEMENTS
    span = max(1, min(length, elements * devices // (vocab * batch)))
    num_chunks = -(-length // span)
    pad = num_chunks * span - length
    chunked_hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(batch, num_chunks, span, width)
    chunked_tokens = jnp.pad(tokens.astype(jnp.int32), ((0, 0), (0, pad))).reshape(batch, num_chunks, span)

    @jax.checkpoint
    def one_chunk(chunk_hidden, chunk_tokens):  # [B,span,H], [B,span]
        chunk_hidden = constrain(chunk_hidden, _BATCH_HIDDEN)
        logits = constrain(model.logits(chunk_hidden) / temperature, ("batch", None, "act_vocab"))  # [B,span,V]
        log_norm = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.sum(jnp.where(chunk_tokens[..., None] == jnp.arange(vocab), logits, 0.0), axis=-1)
        probs = jnp.exp(logits - log_norm[..., None])
        entropy = log_norm - jnp.sum(probs * logits, axis=-1)
        return picked - log_norm, entropy

    token_logprobs, entropy = jax.lax.map(
        lambda args: one_chunk(*args), (chunked_hidden.transpose(1, 0, 2, 3), chunked_tokens.transpose(1, 0, 2))
    )
    unchunk = lambda x: x.transpose(1, 0, 2).reshape(batch, num_chunks * span)[:, :length]  # noqa: E731
    return unchunk(token_logprobs), unchunk(entropy)


def param_count(params: nnx.State) -> int:
    """Total number of scalar parameters."""
    return int(sum(leaf.size for leaf in jax.tree.leaves(params)))


def matmul_param_count(cfg: ModelConfig) -> int:
    """Parameters used in a matmul per token: attention + MLP projections + LM head (not the embedding lookup)."""
    attention = (
        cfg.hidden_size * (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        + cfg.num_heads * cfg.head_dim * cfg.hidden_size
    )
    mlp = 3 * cfg.hidden_size * cfg.mlp_size
    lm_head = cfg.hidden_size * cfg.vocab_size
    return cfg.num_layers * (attention + mlp) + lm_head


def forward_flops_per_token(cfg: ModelConfig, context_tokens: int) -> float:
    """Model FLOPs of one token's forward pass: 2 x matmul params (incl. LM head) + attention score/value FLOPs for
    a context of context_tokens (2 x NH x D x context for q.k plus the same for probs.v, per layer).
    Used for model-FLOPs utilisation (training = 3x forward)."""
    attention_flops = cfg.num_layers * 4 * cfg.num_heads * cfg.head_dim * context_tokens
    return float(2 * matmul_param_count(cfg) + attention_flops)

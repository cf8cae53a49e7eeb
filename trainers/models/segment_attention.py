"""Attention over packed rows by segment ids, in a fused kernel: the accelerators' path for the
packed log-prob passes and updates (`transformer.packed_logprobs`, `trainers.step.packing`).

A packed row holds several sequences end to end. On CPU the attention reads a dense [R, L, L]
mask (`transformer.segment_attention_mask`), which lets a unit of G completions share one copy of
their prompt. On a GPU or a TPU that mask would cost L^2 memory per row and keep attention off the
fused kernels, so there each sequence is its own segment (its own prompt copy, then its
completion: `packing.pack_micro_batches(share_prompts=False)`, see `shares_prompts`) and attention
runs in a Pallas flash-attention kernel that takes the row's segment ids:

  - "pallas_gpu": `jax.experimental.pallas.ops.gpu.attention.mha` (Triton), causal, with segment
    ids; it takes as many key/value heads as query heads, so grouped-query keys and values are
    repeated to the query heads (their gradients add up over each group);
  - "pallas_tpu": splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`), a causal
    mask with segment ids, grouped-query heads natively, one row at a time (vmapped);
  - "dense": none of them (the CPU: `packed_logprobs` builds the dense mask instead).

A query attends to the keys at or before it with its own segment id: causal within a sequence,
nothing across sequences. Padding positions (segment 0, the row's tail) attend among themselves:
their outputs are read by nothing. Each kernel takes rows of a multiple of its block, so the rows
are padded to one (with segment 0) and cut back. `interpret` runs the kernels in Pallas's
interpreter, on any backend (the tests, on CPU).

On a mesh the kernel runs per shard (`jax.shard_map`): rows split over the batch axes, heads over
`tensor`, as the attention's activations are (`trainers.parallel.rules`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from trainers.models.backend import compute_backend
from trainers.parallel.rules import mesh_spec

IMPLEMENTATIONS = ("dense", "pallas_gpu", "pallas_tpu")

IMPLEMENTATION: str | None = None
"""The packed rows' attention, one of IMPLEMENTATIONS. None (default): the kernel of the backend
programs are traced for (`backend.compute_backend`): "pallas_gpu" on a GPU, "pallas_tpu" on a TPU,
"dense" (the segment mask, shared prompt copies) on CPU. Read at trace time."""

INTERPRET = False
"""Run the kernels in Pallas's interpreter (a kernel forced on CPU: the tests). Read at trace time."""

GPU_BLOCK_TOKENS = 128  # the Triton kernel's forward blocks of queries and keys (its default)
GPU_BACKWARD_BLOCK_TOKENS = 32  # its backward blocks (its default)
GPU_MIN_TOKENS = 16  # Triton's matmuls take blocks of at least 16
TPU_BLOCK_TOKENS = (512, 256, 128)  # splash attention's blocks: multiples of 128 lanes, the largest that divides


class Segments(NamedTuple):
    """What the attention of packed rows reads in place of a dense mask on a GPU or a TPU: each
    position's segment id, ids [B, T] int32 (> 0 a sequence, 0 padding)."""

    ids: jax.Array


def implementation() -> str:
    """The packed rows' attention for the backend programs are traced for (see IMPLEMENTATION)."""
    if IMPLEMENTATION is not None:
        if IMPLEMENTATION not in IMPLEMENTATIONS:
            raise ValueError(f"segment attention {IMPLEMENTATION!r}: expected one of {', '.join(IMPLEMENTATIONS)}")
        return IMPLEMENTATION
    return {"gpu": "pallas_gpu", "tpu": "pallas_tpu"}.get(compute_backend(), "dense")


def shares_prompts() -> bool:
    """Whether packed rows may hold a prompt once for several completions (a unit of members):
    only the dense mask expresses that; segment ids need one sequence per segment."""
    return implementation() == "dense"


def segment_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    implementation: str,
    interpret: bool = False,
) -> jax.Array:
    """q [B,T,NH,D], k and v [B,T,KVH,D] (query head h uses kv head h // (NH / KVH)), segment_ids
    [B,T] int32 -> [B,T,NH,D] in q's dtype: causal attention within each segment, scaled by
    1 / sqrt(D), in the kernel of `implementation` ("pallas_gpu" or "pallas_tpu")."""
    if implementation == "pallas_gpu":
        attend = functools.partial(_gpu_attention, interpret=interpret)
    elif implementation == "pallas_tpu":
        attend = functools.partial(_tpu_attention, interpret=interpret)
    else:
        raise ValueError(f"segment attention kernel {implementation!r}: expected pallas_gpu or pallas_tpu")
    num_heads, kv_heads = q.shape[2], k.shape[2]
    if num_heads % kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {kv_heads} key/value heads")
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return attend(q, k, v, segment_ids)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    q_spec = mesh_spec(("batch", None, "act_heads", None), q.shape, sizes)
    kv_spec = mesh_spec(("batch", None, "act_kv_heads", None), k.shape, sizes)
    if _at(q_spec, 2) != _at(kv_spec, 2):  # the kv heads split otherwise than the query heads
        groups = num_heads // kv_heads
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
        kv_spec = q_spec
    ids_spec = mesh_spec(("batch", None), segment_ids.shape, sizes)
    return jax.shard_map(attend, in_specs=(q_spec, kv_spec, kv_spec, ids_spec), out_specs=q_spec, check_vma=False)(
        q, k, v, segment_ids
    )


def _at(spec: jax.sharding.PartitionSpec, dim: int):
    return spec[dim] if dim < len(spec) else None


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _padded(x: jax.Array, tokens: int) -> jax.Array:
    """x [B,T,...] with T padded to `tokens` (zeros: segment 0, padding)."""
    return jnp.pad(x, [(0, 0), (0, tokens - x.shape[1])] + [(0, 0)] * (x.ndim - 2))


def _gpu_attention(q, k, v, segment_ids, interpret: bool = False):
    """The Triton flash-attention kernel, causal with segment ids (see the module docstring)."""
    from jax.experimental.pallas.ops.gpu import attention as kernel  # lazy: loads only where used

    _, num_tokens, num_heads, head_dim = q.shape
    groups = num_heads // k.shape[2]
    if num_tokens <= GPU_BLOCK_TOKENS:  # one block of a power of two (Triton's array sizes)
        tokens = max(GPU_MIN_TOKENS, 1 << (num_tokens - 1).bit_length())
    else:
        tokens = _round_up(num_tokens, GPU_BLOCK_TOKENS)
    block = min(GPU_BLOCK_TOKENS, tokens)
    backward = min(GPU_BACKWARD_BLOCK_TOKENS, tokens)
    blocks = kernel.BlockSizes(
        block_q=block,
        block_k=block,
        block_q_dkv=backward,
        block_kv_dkv=backward,
        block_q_dq=backward,
        block_kv_dq=backward,
    )
    k, v = jnp.repeat(k, groups, axis=2).astype(q.dtype), jnp.repeat(v, groups, axis=2).astype(q.dtype)
    out = kernel.mha(
        _padded(q, tokens),
        _padded(k, tokens),
        _padded(v, tokens),
        _padded(segment_ids.astype(jnp.int32), tokens),
        sm_scale=1.0 / math.sqrt(head_dim),
        causal=True,
        block_sizes=blocks,
        interpret=interpret,
    )
    return out[:, :num_tokens]


def _tpu_attention(q, k, v, segment_ids, interpret: bool = False):
    """Splash attention, a causal mask with segment ids, one row at a time (see the module docstring)."""
    # lazy: the Pallas kernels load only on their accelerator (or in interpret mode)
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    _, num_tokens, num_heads, head_dim = q.shape
    tokens = _round_up(num_tokens, TPU_BLOCK_TOKENS[-1])
    block = next(b for b in TPU_BLOCK_TOKENS if tokens % b == 0)
    blocks = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        use_fused_bwd_kernel=True,
    )
    mask = masks.MultiHeadMask([masks.CausalMask((tokens, tokens)) for _ in range(num_heads)])
    attend = splash.make_splash_mha(mask, block_sizes=blocks, head_shards=1, q_seq_shards=1, interpret=interpret)
    scaled = q * jnp.asarray(1.0 / math.sqrt(head_dim), q.dtype)  # splash takes no scale

    def heads_first(x):  # [B,T,heads,D] -> [B,heads,tokens,D], as splash takes each row
        return _padded(x, tokens).transpose(0, 2, 1, 3)

    def row(q_row, k_row, v_row, ids_row):
        return attend(q_row, k_row, v_row, segment_ids=splash.SegmentIds(ids_row, ids_row))

    ids = _padded(segment_ids.astype(jnp.int32), tokens)
    out = jax.vmap(row)(heads_first(scaled), heads_first(k.astype(q.dtype)), heads_first(v.astype(q.dtype)), ids)
    return out.transpose(0, 2, 1, 3)[:, :num_tokens]

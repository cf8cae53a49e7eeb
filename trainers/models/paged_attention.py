"""Decode attention over a paged KV cache: one new query token per slot attends to the tokens its
block table points at (`trainers.engine.pages.PagePool`), and the cache those pages form
(`PagedKV`, which `transformer.Attention` takes in place of a dense cache for a decode step).
One attention function, two implementations so far:

  "gather"      pure JAX: the slot's pages gathered into a dense [KVH, S, D] view, then the same
                grouped-query einsum, float32 scores and softmax as `transformer.Attention`. Any
                backend; the CPU's path.
  "pallas_gpu"  the paged-attention Pallas kernel JAX ships for GPUs
                (`jax.experimental.pallas.ops.gpu.paged_attention`); `interpret=True` runs it on the
                CPU (the tests check it against the gather path that way).
The TPU kernels (`pallas.ops.tpu.paged_attention`, `ragged_paged_attention`) take the same layout
but have no interpreter on a CPU, so they wait until they can be checked; a TPU uses the gather.

Layouts: q [B, NH, D] (RoPE applied); k_pages, v_pages [KVH, P, page_tokens, D] (the Pallas
kernels' layout; keys stored after RoPE); block_tables [B, max_pages] int32; lengths [B] int32, the
tokens slot b holds counting the query's own (its keys and values written before the call). Query
head h reads KV head h // (NH / KVH), as in `transformer.Attention`. Returns [B, NH, D] in q's dtype.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


class PagedKV(NamedTuple):
    """One layer's paged cache for a decode step of B slots: k_pages, v_pages [KVH, P, page_tokens, D];
    block_tables [B, max_pages] int32; lengths [B] int32, the tokens each slot holds before this
    step. The step writes each slot's new key and value at position lengths (page
    block_tables[b, lengths // page_tokens]) and attends over positions 0 .. lengths. A slot that must
    not write (free, or ended) points its table at a scratch page no slot reads."""

    k_pages: jax.Array
    v_pages: jax.Array
    block_tables: jax.Array
    lengths: jax.Array


def write_token_kv(cache: PagedKV, keys: jax.Array, values: jax.Array) -> PagedKV:
    """keys, values [B, KVH, D]: each slot's new token's, written at position cache.lengths."""
    page_tokens = cache.k_pages.shape[2]
    rows = jnp.arange(cache.block_tables.shape[0])
    pages = cache.block_tables[rows, cache.lengths // page_tokens]
    offsets = cache.lengths % page_tokens
    k_pages = cache.k_pages.at[:, pages, offsets].set(keys.transpose(1, 0, 2).astype(cache.k_pages.dtype))
    v_pages = cache.v_pages.at[:, pages, offsets].set(values.transpose(1, 0, 2).astype(cache.v_pages.dtype))
    return cache._replace(k_pages=k_pages, v_pages=v_pages)

IMPLEMENTATIONS = ("gather", "pallas_gpu")
MASKED_SCORE = float(jnp.finfo(jnp.float32).min)  # as `transformer`'s dense attention masks


def default_implementation() -> str:
    """The implementation for JAX's default backend: the Pallas kernel on a GPU, else the gather."""
    return "pallas_gpu" if jax.default_backend() == "gpu" else "gather"


def gathered_kv(pages: jax.Array, block_tables: jax.Array) -> jax.Array:
    """pages [KVH, P, page_tokens, D], block_tables [B, max_pages] -> [B, KVH, max_pages x page_tokens, D]:
    each slot's pages laid end to end (positions past its length hold whatever those pages hold)."""
    kv_heads, _, page_tokens, head_dim = pages.shape
    batch, max_pages = block_tables.shape
    taken = pages[:, block_tables]  # [KVH, B, max_pages, page_tokens, D]
    return taken.reshape(kv_heads, batch, max_pages * page_tokens, head_dim).transpose(1, 0, 2, 3)


def paged_decode_attention(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array, block_tables: jax.Array,
                           lengths: jax.Array, implementation: str = "gather", interpret: bool = False) -> jax.Array:
    """Attention of each slot's one query over its tokens 0 .. lengths - 1 (see the module docstring),
    scaled by 1 / sqrt(D). `interpret` runs a Pallas kernel in its interpreter (any backend)."""
    batch, num_heads, head_dim = q.shape
    kv_heads = k_pages.shape[0]
    scale = 1.0 / math.sqrt(head_dim)
    if implementation == "gather":
        groups = num_heads // kv_heads
        keys, values = gathered_kv(k_pages, block_tables), gathered_kv(v_pages, block_tables)  # [B,KVH,S,D]
        grouped = q.reshape(batch, kv_heads, groups, head_dim)
        scores = jnp.einsum("bkgd,bksd->bkgs", grouped, keys.astype(q.dtype), preferred_element_type=jnp.float32)
        scores = scores * scale
        attended = jnp.arange(keys.shape[2])[None, :] < lengths[:, None]  # [B,S]
        scores = jnp.where(attended[:, None, None, :], scores, MASKED_SCORE)
        probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
        out = jnp.einsum("bkgs,bksd->bkgd", probs, values)
        return out.reshape(batch, num_heads, head_dim).astype(q.dtype)
    if implementation == "pallas_gpu":
        from jax.experimental.pallas.ops.gpu import paged_attention as kernel

        pages_per_slot = block_tables.shape[1]
        return kernel.paged_attention(q * jnp.asarray(scale, q.dtype), k_pages, v_pages, block_tables,
                                      lengths.astype(jnp.int32), interpret=interpret,
                                      pages_per_compute_block=_divisor_at_most(pages_per_slot, 8),
                                      k_splits=1).astype(q.dtype)
    raise ValueError(f"attention implementation {implementation!r}: expected one of {', '.join(IMPLEMENTATIONS)}")


def _divisor_at_most(total: int, most: int) -> int:
    """The largest divisor of `total` not above `most` (the kernels take whole compute blocks of pages)."""
    return max(d for d in range(1, min(total, most) + 1) if total % d == 0)

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
  "pallas_tpu"  the one JAX ships for TPUs (`jax.experimental.pallas.ops.tpu.paged_attention`, the
                same layout); `interpret=True` runs it in Pallas's TPU interpret mode, which
                simulates a TPU's memories and DMAs on the CPU (how the tests check it). Its
                float32 dots run as a TPU's matrix unit runs them by default, in bfloat16 passes.
A TPU's kernel needs whole tiles: a head size that is a multiple of 128 and pages of a multiple of
8 tokens (`tpu_kernel_fits`); a model whose heads are smaller (SmolLM2's 64) decodes with the gather
on a TPU. The GPU's kernel is lowered by Triton, which takes arrays whose sizes are powers of two
only: a head size and a page size that are powers of two (`gpu_kernel_fits`, else the gather), and
compute blocks of a power of two pages. The ragged kernel (`ragged_paged_attention`) also takes
prompt pieces; the engine's prefill pieces run as a dense forward over a gathered view
(`dense_view`) instead.

Layouts: q [B, NH, D] (RoPE applied); k_pages, v_pages [KVH, P, page_tokens, D] (the Pallas
kernels' layout; keys stored after RoPE); block_tables [B, max_pages] int32; lengths [B] int32, the
tokens slot b holds counting the query's own (its keys and values written before the call). Query
head h reads KV head h // (NH / KVH), as in `transformer.Attention`. Returns [B, NH, D] in q's dtype.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from trainers.models.backend import compute_backend


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


IMPLEMENTATIONS = ("gather", "pallas_gpu", "pallas_tpu")
TPU_HEAD_DIM, TPU_PAGE_TOKENS = 128, 8  # the TPU kernel's tiles: head size and page size multiples
MASKED_SCORE = float(jnp.finfo(jnp.float32).min)  # as `transformer`'s dense attention masks


def default_implementation(head_dim: int = TPU_HEAD_DIM, page_tokens: int = TPU_PAGE_TOKENS) -> str:
    """The implementation for the backend programs are traced for (`backend.compute_backend`): the
    Pallas kernel of a GPU or a TPU when the model's head size and the page size fit it
    (`gpu_kernel_fits`, `tpu_kernel_fits`), else the gather."""
    backend = compute_backend()
    if backend == "gpu" and gpu_kernel_fits(head_dim, page_tokens):
        return "pallas_gpu"
    if backend == "tpu" and tpu_kernel_fits(head_dim, page_tokens):
        return "pallas_tpu"
    return "gather"


def tpu_kernel_fits(head_dim: int, page_tokens: int) -> bool:
    """The TPU kernel takes heads of a multiple of 128 and pages of a multiple of 8 tokens."""
    return head_dim % TPU_HEAD_DIM == 0 and page_tokens % TPU_PAGE_TOKENS == 0


def gpu_kernel_fits(head_dim: int, page_tokens: int) -> bool:
    """The GPU kernel (lowered by Triton, whose arrays have power-of-two sizes) takes a head size and
    a page size that are powers of two."""
    return _is_power_of_two(head_dim) and _is_power_of_two(page_tokens)


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _taken(pages: jax.Array, block_tables: jax.Array) -> jax.Array:
    """[KVH, B, max_pages x page_tokens, D]: each slot's pages laid end to end, heads first."""
    kv_heads, _, page_tokens, head_dim = pages.shape
    batch, max_pages = block_tables.shape
    return pages[:, block_tables].reshape(kv_heads, batch, max_pages * page_tokens, head_dim)


def paged_decode_attention(
    q: jax.Array,
    k_pages: jax.Array,
    v_pages: jax.Array,
    block_tables: jax.Array,
    lengths: jax.Array,
    implementation: str = "gather",
    interpret: bool = False,
) -> jax.Array:
    """Attention of each slot's one query over its tokens 0 .. lengths - 1 (see the module docstring),
    scaled by 1 / sqrt(D). `interpret` runs a Pallas kernel in its interpreter (any backend)."""
    batch, num_heads, head_dim = q.shape
    kv_heads = k_pages.shape[0]
    scale = 1.0 / math.sqrt(head_dim)
    if implementation == "gather":
        groups = num_heads // kv_heads
        # [KVH, B, S, D]: the pages as gathered, not transposed (a copy the einsums need not)
        keys, values = _taken(k_pages, block_tables), _taken(v_pages, block_tables)
        grouped = q.reshape(batch, kv_heads, groups, head_dim)
        scores = jnp.einsum("bkgd,kbsd->bkgs", grouped, keys.astype(q.dtype), preferred_element_type=jnp.float32)
        scores = scores * scale
        attended = jnp.arange(keys.shape[2])[None, :] < lengths[:, None]  # [B,S]
        scores = jnp.where(attended[:, None, None, :], scores, MASKED_SCORE)
        probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
        out = jnp.einsum("bkgs,kbsd->bkgd", probs, values)
        return out.reshape(batch, num_heads, head_dim).astype(q.dtype)
    if implementation == "pallas_gpu":
        # lazy: the Pallas kernels load only on their accelerator
        from jax.experimental.pallas.ops.gpu import paged_attention as kernel

        pages_per_slot = block_tables.shape[1]
        return kernel.paged_attention(
            q * jnp.asarray(scale, q.dtype),
            k_pages,
            v_pages,
            block_tables,
            lengths.astype(jnp.int32),
            interpret=interpret,
            pages_per_compute_block=_power_of_two_divisor_at_most(pages_per_slot, 8),
            k_splits=1,
        ).astype(q.dtype)
    if implementation == "pallas_tpu":
        # lazy: the Pallas kernels load only on their accelerator
        from jax.experimental.pallas import tpu as pltpu
        from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention as tpu_kernel

        pages_per_slot = block_tables.shape[1]
        with pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext():
            return tpu_kernel(
                q * jnp.asarray(scale, q.dtype),
                k_pages,
                v_pages,
                lengths.astype(jnp.int32),
                block_tables,
                pages_per_compute_block=_divisor_at_most(pages_per_slot, 8),
            ).astype(q.dtype)
    raise ValueError(f"attention implementation {implementation!r}: expected one of {', '.join(IMPLEMENTATIONS)}")


def _divisor_at_most(total: int, most: int) -> int:
    """The largest divisor of `total` not above `most` (the kernels take whole compute blocks of pages)."""
    return max(d for d in range(1, min(total, most) + 1) if total % d == 0)


def _power_of_two_divisor_at_most(total: int, most: int) -> int:
    """The largest power of two that divides `total`, not above `most`: the GPU kernel's compute
    block of pages (Triton lowers arrays of power-of-two sizes only; 12 pages go in blocks of 4)."""
    block = 1
    while block * 2 <= most and total % (block * 2) == 0:
        block *= 2
    return block


def dense_view(
    k_pages: jax.Array, v_pages: jax.Array, block_tables: jax.Array, lengths: jax.Array, width: int, extra: int
) -> tuple[list, jax.Array]:
    """Each slot's cached tokens gathered once into the dense layout of `transformer.Attention`,
    right-aligned: slot b's token t sits at column width - lengths[b] + t, so that its next `extra`
    tokens all go to columns width .. width + extra - 1, the same column for every slot (the static
    sampler's layout, whose decode step then runs unchanged). width >= every length.

    Returns ((keys [B, KVH, D, width + extra], values [B, KVH, width + extra, D]), valid [B, width + extra]
    bool: the columns holding a cached token)."""
    page_tokens = k_pages.shape[2]
    token = jnp.arange(width)[None, :] - (width - lengths[:, None])  # [B, width]: the token a column holds
    valid = token >= 0
    token = jnp.maximum(token, 0)
    pages = jnp.take_along_axis(block_tables, token // page_tokens, axis=1)
    offsets = token % page_tokens
    keys = k_pages[:, pages, offsets].transpose(1, 0, 3, 2)  # [B, KVH, D, width]
    values = v_pages[:, pages, offsets].transpose(1, 0, 2, 3)  # [B, KVH, width, D]
    keys = jnp.pad(keys, ((0, 0), (0, 0), (0, 0), (0, extra)))
    values = jnp.pad(values, ((0, 0), (0, 0), (0, extra), (0, 0)))
    return (keys, values), jnp.pad(valid, ((0, 0), (0, extra)))


def write_view_tokens(
    k_pages: jax.Array,
    v_pages: jax.Array,
    view: tuple[jax.Array, jax.Array],
    block_tables: jax.Array,
    lengths: jax.Array,
    counts: jax.Array,
    width: int,
    scratch_page: int,
) -> tuple[jax.Array, jax.Array]:
    """Write back the tokens a `dense_view` gained: slot b's columns width .. width + counts[b] - 1
    become its tokens lengths[b] .. lengths[b] + counts[b] - 1 (the rest go to the scratch page)."""
    keys, values = view
    page_tokens, extra = k_pages.shape[2], keys.shape[3] - width
    step = jnp.arange(extra)[None, :]
    token = lengths[:, None] + step  # [B, extra]
    page_index = jnp.minimum(token // page_tokens, block_tables.shape[1] - 1)
    pages = jnp.where(step < counts[:, None], jnp.take_along_axis(block_tables, page_index, axis=1), scratch_page)
    offsets = token % page_tokens
    new_keys = keys[:, :, :, width:].transpose(1, 0, 3, 2)  # [KVH, B, extra, D]
    new_values = values[:, :, width:, :].transpose(1, 0, 2, 3)
    return (
        k_pages.at[:, pages, offsets].set(new_keys.astype(k_pages.dtype)),
        v_pages.at[:, pages, offsets].set(new_values.astype(v_pages.dtype)),
    )

"""The engine's device programs, each jitted once per shape: admit arrivals (prefill their prompts,
write the keys and values into pages, sample each completion's first token), or prefill one piece
of long prompts (`prefill_piece`, a chunked prefill between decode chunks), and decode a chunk of
K tokens over a bucket of slots. The host loop that calls them is `engine.batching`.

Decode chunk (`decode_chunk`), per slot and step: feed the slot's last token at its position, write
its key and value into the slot's pages, attend over the slot's tokens (`paged_attention`), sample
with `generate`'s sampler and the slot's uniform for that step, and stop the slot at EOS or at
max_new_tokens. With `turns` (multi-turn episodes) a step may instead take a forced token (an
environment's reply the host wrote; log-prob 0, not sampled), and a sampled EOS or stop sequence
pauses the slot for the host rather than ending it. A stopped or paused slot writes to the scratch
page, which no slot reads.

Every program that samples returns each token's log-prob under the distribution it was drawn from
and, when sampling.truncates (top-k / top-p), also under the full one (`sample_token_logprobs`):
`full_logprobs` beside `logprobs` (None, or absent from a chunk's dict, without a filter).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers.models import transformer as model_lib
from trainers.models.generate import SamplingParams, StaticGraph, TurnStops, sample_token_logprobs
from trainers.models.paged_attention import PagedKV, dense_view, write_view_tokens

Array = jax.Array | np.ndarray
"""A program's input: a host array goes to the device with the call (no separate transfer per array)."""
KVPages = list[tuple[jax.Array, jax.Array]]
"""Each layer's (keys, values) pages [KV heads, pages, page_tokens, head_dim]."""
Params = Any  # the model's parameters (an nnx.State)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Admission:
    """n arriving groups, as the admission program takes them (`admit`, `admit_and_decode`): their
    distinct prompts, where each prompt column's key and value go, where a partly filled last page
    is copied for the group's other completions, and token 0's uniforms. Made by the host loop
    (`batching._Run.admit`); padding rows repeat a real prompt and write to the scratch page."""

    prompt_tokens: Array  # [n, Lp] int32, left-padded
    prompt_valid: Array  # [n, Lp] bool
    pages: Array  # [n, Lp] int32: each column's page (the scratch page for padding)
    offsets: Array  # [n, Lp] int32: its offset in that page
    tail_columns: Array  # [n, T] int32: the prompt columns of the partly filled last page's tokens
    tail_pages: Array  # [n, G - 1, T] int32: each other completion's own page for them
    uniforms: Array  # [n x G] float32: the draws token 0 of each completion is sampled with


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PrefillPiece:
    """One piece of a chunked prefill of n prompts (`prefill_piece`): their next C tokens, the pages
    those before them are in, and for the prompts that end in this piece the last page's copies and
    token 0's uniforms."""

    tokens: Array  # [n, C] int32: prompt token done[i] + j at column j, the first counts[i] real
    tables: Array  # [n, max_pages] int32: the group's first slot's pages
    done: Array  # [n] int32: prompt tokens already in the pages
    counts: Array  # [n] int32: real tokens in this piece
    tail_source: Array  # [n] int32: a partly filled last page to copy (the scratch page: none)
    tail_pages: Array  # [n, G - 1] int32: each other completion's own page for that copy
    uniforms: Array  # [n x G] float32: token 0's draws


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SlotBatch:
    """A decode chunk's bucket of S slots, as the device takes them: each slot's state, its inputs
    for the chunk's K steps, and when the chunk hands back to the host. Packed once per chunk by
    the host loop (`batching._Run.decode`); the chunk's results come back as a dict."""

    tables: Array  # [S, max_pages] int32: each slot's pages
    lengths: Array  # [S] int32: tokens in the slot's cache
    last_token: Array  # [S] int32: sampled, not yet fed
    active: Array  # [S] bool
    generated: Array  # [S] int32: tokens emitted so far
    uniforms: Array  # [S, K] float32: the draws of the slot's next K steps
    # multi-turn (`DecodeProgram.turns`): the host's reply tokens for the next steps, and the slot's
    # last W tokens and whether each was sampled (W = the longest stop sequence); [S, 0] without turns
    forced_tokens: Array  # [S, K or 0] int32
    forced: Array  # [S, K or 0] bool
    recent_tokens: Array  # [S, W] int32
    recent_sampled: Array  # [S, W] bool
    # the chunk ends early once at most exit_active slots are active while at least exit_steps_left
    # steps would be left (traced int32 scalars: no recompilation; exit_active 0: run until none is)
    exit_active: Array
    exit_steps_left: Array


@dataclasses.dataclass(frozen=True)
class DecodeProgram:
    """What a decode chunk's program is compiled for (static: one program each): the sampling, K =
    chunk_tokens steps, the scratch page ended slots write to, multi-turn stops, the attention
    ("paged" or "view", `decode_chunk`) and a "view" chunk's dense view width."""

    sampling: SamplingParams
    chunk_tokens: int
    scratch_page: int
    turns: TurnStops | None = None
    attention: str = "view"
    view_tokens: int = 0


def _step_uniforms(rng_key: jax.Array, rows: int, max_new_tokens: int) -> jax.Array:
    """[N, rows]: the uniform `generate` draws for each sampling step and row (one key per step,
    split up front, each giving the step's [rows] uniforms)."""
    step_keys = jax.random.split(rng_key, max_new_tokens)
    return jax.vmap(lambda key: jax.random.uniform(key, (rows,), jnp.float32))(step_keys)


uniforms_jit = jax.jit(_step_uniforms, static_argnames=("rows", "max_new_tokens"))


@functools.partial(jax.jit, static_argnames=("rows", "micro_batch", "max_new_tokens", "call_stride"))
def micro_batch_uniforms_jit(
    rng_key: jax.Array, first_call: Array, rows: int, micro_batch: int, max_new_tokens: int, call_stride: int
) -> jax.Array:
    """[N, rows]: `_step_uniforms` of each micro-batch of `micro_batch` rows, the k-th drawn from
    fold_in(rng_key, first_call + k x call_stride) (first_call traced: one program for every call)."""
    return jnp.concatenate(
        [
            _step_uniforms(
                jax.random.fold_in(rng_key, first_call + k * call_stride),
                min(micro_batch, rows - start),
                max_new_tokens,
            )
            for k, start in enumerate(range(0, rows, micro_batch))
        ],
        axis=1,
    )


def _prefill(model: Any, prompt_tokens: Array, prompt_valid: Array) -> tuple[jax.Array, list]:
    """Dense forward of left-padded prompts [n, Lp]: (last position's logits [n, V], per layer keys
    [n, KVH, D, Lp] and values [n, KVH, Lp, D])."""
    valid = prompt_valid.astype(jnp.bool_)
    hidden, prompt_kv = model(
        prompt_tokens, model_lib.positions_from_valid(valid), model_lib.causal_padding_mask(valid)
    )
    return model.logits(hidden[:, -1, :]), prompt_kv


def _write_prompts(
    kv_pages: KVPages, prompt_kv: list, pages: Array, offsets: Array, tail_columns: Array, tail_pages: Array
) -> KVPages:
    """Write prefilled keys/values into pages: pages, offsets [n, Lp] int32 give each prompt column's
    page and offset (the scratch page for padding and unused rows); the tail (the tokens of a
    partly filled last page) goes again into each other completion's own page: tail_columns [n, T]
    the prompt columns of its tokens, tail_pages [n, G - 1, T] their pages (offsets 0 .. T - 1,
    T = page_tokens; the scratch page past the tail)."""
    out = []
    offsets_tail = jnp.broadcast_to(jnp.arange(tail_pages.shape[2]), tail_pages.shape)
    for (k_pages, v_pages), (keys, values) in zip(kv_pages, prompt_kv):
        k_new = keys.transpose(1, 0, 3, 2)  # [KVH, n, Lp, D]
        v_new = values.transpose(1, 0, 2, 3)  # [KVH, n, Lp, D]
        k_pages = k_pages.at[:, pages, offsets].set(k_new.astype(k_pages.dtype))
        v_pages = v_pages.at[:, pages, offsets].set(v_new.astype(v_pages.dtype))
        if tail_pages.shape[1]:
            columns = tail_columns[None, :, :, None]  # [1, n, T, 1]
            k_tail = jnp.take_along_axis(k_new, columns, axis=2)[:, :, None]  # [KVH, n, 1, T, D]
            v_tail = jnp.take_along_axis(v_new, columns, axis=2)[:, :, None]
            tail_shape = (k_tail.shape[0], *tail_pages.shape, k_tail.shape[-1])  # [KVH, n, G - 1, T, D]
            k_pages = k_pages.at[:, tail_pages, offsets_tail].set(
                jnp.broadcast_to(k_tail, tail_shape).astype(k_pages.dtype)
            )
            v_pages = v_pages.at[:, tail_pages, offsets_tail].set(
                jnp.broadcast_to(v_tail, tail_shape).astype(v_pages.dtype)
            )
        out.append((k_pages, v_pages))
    return out


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling"), donate_argnames=("kv_pages",))
def admit(
    graphdef: StaticGraph, params: Params, kv_pages: KVPages, arrivals: Admission, sampling: SamplingParams
) -> tuple:
    """One program for arrivals: prefill n distinct prompts [n, Lp], write their keys and values
    into pages (`_write_prompts`), and sample token 0 of each of their G = sampling.prompt_group
    completions from the prompt's last logits. Returns (kv_pages, tokens, logprobs, full_logprobs
    [n x G]; full_logprobs None unless sampling.truncates)."""
    return _admit(nnx.merge(graphdef.graphdef, params), kv_pages, arrivals, sampling)


def _admit(model: Any, kv_pages: KVPages, arrivals: Admission, sampling: SamplingParams) -> tuple:
    a = arrivals
    logits, prompt_kv = _prefill(model, a.prompt_tokens, a.prompt_valid)
    token, logprob, full = sample_token_logprobs(
        jnp.repeat(logits, sampling.prompt_group, axis=0), a.uniforms, sampling
    )
    kv_pages = _write_prompts(kv_pages, prompt_kv, a.pages, a.offsets, a.tail_columns, a.tail_pages)
    return kv_pages, token, logprob, full if sampling.truncates else None


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "view_tokens"), donate_argnames=("kv_pages",))
def prefill_piece(
    graphdef: StaticGraph,
    params: Params,
    kv_pages: KVPages,
    piece: PrefillPiece,
    sampling: SamplingParams,
    view_tokens: int,
    scratch_page: int,
) -> tuple:
    """One piece of a chunked prefill: n prompts' next C tokens attend to the tokens 0 .. done[i] - 1
    already in their pages (gathered into a dense view `view_tokens` wide, `dense_view`) and causally
    to each other; their keys and values are written into the pages after the others. Token 0 of
    each of the G completions is sampled from the logits at the piece's last real column (the host
    keeps those of the prompts whose last token is in this piece). A prompt that ends here with a
    partly filled last page has that page copied into each other completion's own page (the scratch
    page for the rest). Returns (kv_pages, tokens, logprobs, full_logprobs [n x G]; full_logprobs
    None unless sampling.truncates)."""
    model = nnx.merge(graphdef.graphdef, params)
    piece_tokens, tables, done, counts = piece.tokens, piece.tables, piece.done, piece.counts
    tail_source, tail_pages, uniforms = piece.tail_source, piece.tail_pages, piece.uniforms
    rows, width = piece_tokens.shape
    views = [dense_view(k, v, tables, done, view_tokens, width) for k, v in kv_pages]
    new = jnp.arange(width)[None, :] < counts[:, None]  # [n, C]
    valid = views[0][1].at[:, view_tokens:].set(new)  # [n, W + C]: the columns holding a token
    column = jnp.arange(view_tokens + width)[None, :] - view_tokens  # < 0: the view's, else the piece's column
    mask = valid[:, None, :] & (column <= jnp.arange(width)[:, None])[None]  # [n, C, W + C]: causal
    positions = done[:, None] + jnp.arange(width)[None, :]
    hidden, cache = model(piece_tokens, positions, mask, [kv for kv, _ in views], view_tokens)
    last = hidden[jnp.arange(rows), jnp.maximum(counts - 1, 0)]
    token, logprob, full = sample_token_logprobs(
        jnp.repeat(model.logits(last), sampling.prompt_group, axis=0), uniforms, sampling
    )
    out = []
    for (k_pages, v_pages), view in zip(kv_pages, cache):
        k_pages, v_pages = write_view_tokens(k_pages, v_pages, view, tables, done, counts, view_tokens, scratch_page)
        if tail_pages.shape[1]:
            k_pages = k_pages.at[:, tail_pages].set(
                jnp.broadcast_to(
                    k_pages[:, tail_source][:, :, None], (k_pages.shape[0], *tail_pages.shape, *k_pages.shape[2:])
                )
            )
            v_pages = v_pages.at[:, tail_pages].set(
                jnp.broadcast_to(
                    v_pages[:, tail_source][:, :, None], (v_pages.shape[0], *tail_pages.shape, *v_pages.shape[2:])
                )
            )
        out.append((k_pages, v_pages))
    return out, token, logprob, full if sampling.truncates else None


@functools.partial(jax.jit, static_argnames=("graphdef", "program"), donate_argnames=("kv_pages",))
def admit_and_decode(
    graphdef: StaticGraph,
    params: Params,
    kv_pages: KVPages,
    arrivals: Admission,
    positions: Array,
    slots: SlotBatch,
    program: DecodeProgram,
) -> dict[str, Any]:
    """`admit` and then `decode_chunk` in one program, for a call whose groups all fit its slots at
    once (its only admission): no host read between the two. The admitted completions sit at
    `positions` [n x G] of the chunk's slots (out of range: a padding row, dropped); each starts
    from its token 0, or stays inactive if token 0 ended it (EOS, or a budget of one token), so
    `slots`' last_token and active are the program's own. Returns decode_chunk's dict plus token0,
    logprob0 (and full_logprob0 when sampling.truncates) [n x G]. Single-turn only."""
    model, sampling = nnx.merge(graphdef.graphdef, params), program.sampling
    kv_pages, token0, logprob0, full_logprob0 = _admit(model, kv_pages, arrivals, sampling)
    ended = jnp.full(token0.shape, sampling.max_new_tokens <= 1)
    if sampling.stop_at_eos:
        ended = ended | _is_eos(token0, sampling)
    count = slots.tables.shape[0]
    slots = dataclasses.replace(
        slots,
        last_token=jnp.zeros((count,), jnp.int32).at[positions].set(token0, mode="drop"),
        active=jnp.zeros((count,), jnp.bool_).at[positions].set(~ended, mode="drop"),
    )
    out = _decode(model, kv_pages, slots, program)
    out["token0"], out["logprob0"] = token0, logprob0
    if full_logprob0 is not None:
        out["full_logprob0"] = full_logprob0
    return out


@functools.partial(jax.jit, static_argnames=("graphdef", "program"), donate_argnames=("kv_pages",))
def decode_chunk(
    graphdef: StaticGraph, params: Params, kv_pages: KVPages, slots: SlotBatch, program: DecodeProgram
) -> dict[str, Any]:
    """Up to program.chunk_tokens (K) decode steps of every slot, fewer once at most
    `slots.exit_active` slots are still active while at least `slots.exit_steps_left` steps would be
    left (of the chunk, and of the longest budget left): the host can then refill or shrink the
    bucket while it still pays. With program.turns (multi-turn) a step may take a forced token
    instead of sampling (`SlotBatch.forced_tokens`), and a turn's end pauses the slot.

    Returns a dict: kv_pages, lengths, last_token, active, generated, paused [S] (turns: the slot
    sampled a turn's end), and per step j < K: tokens, logprobs, emitted [S, K] (a token was taken
    at step j) and sampled [S, K] (the model sampled it), full_logprobs [S, K] only when
    sampling.truncates, and steps (the steps run).

    program.attention: "paged", every step attends over the slot's pages (`paged_decode_attention`:
    the Pallas kernel on a GPU); "view", the slots' tokens are gathered once into a dense
    right-aligned view of view_tokens + K columns (`dense_view`; view_tokens >= every slot's
    length), the K steps run the static sampler's dense decode over it, and the chunk's new keys
    and values are written to the pages at the end: on a CPU a gather per step costs more than the
    step's attention, one per chunk does not, and the view is only as wide as the bucket's longest
    slot."""
    return _decode(nnx.merge(graphdef.graphdef, params), kv_pages, slots, program)


def _decode(model: Any, kv_pages: KVPages, slots: SlotBatch, program: DecodeProgram) -> dict[str, Any]:
    sampling, chunk_tokens, scratch_page = program.sampling, program.chunk_tokens, program.scratch_page
    turns, attention, view_tokens = program.turns, program.attention, program.view_tokens
    tables, lengths, uniforms = slots.tables, slots.lengths, slots.uniforms
    forced_tokens, forced = slots.forced_tokens, slots.forced
    exit_active, exit_steps_left = slots.exit_active, slots.exit_steps_left
    recent_tokens, recent_sampled = slots.recent_tokens, slots.recent_sampled
    last_token, active, generated = slots.last_token, slots.active, slots.generated
    count = tables.shape[0]
    window = recent_tokens.shape[1]
    width = view_tokens
    if attention == "view":
        views = [dense_view(k, v, tables, lengths, width, chunk_tokens) for k, v in kv_pages]
        cache, view_valid = [kv for kv, _ in views], views[0][1]
    else:
        cache, view_valid = kv_pages, jnp.zeros((count, 0), jnp.bool_)

    def cond(carry: dict[str, Any]) -> jax.Array:
        j, active = carry["j"], carry["active"]
        running = jnp.sum(active.astype(jnp.int32))
        budget_left = jnp.max(jnp.where(active, sampling.max_new_tokens - carry["generated"], 0))
        left = jnp.minimum(chunk_tokens - j, budget_left)
        return (j < chunk_tokens) & (running > 0) & ((running > exit_active) | (left < exit_steps_left))

    def body(carry: dict[str, Any]) -> dict[str, Any]:
        j, active = carry["j"], carry["active"]
        if attention == "view":
            valid = _set_column(carry["view_valid"], width + j, jnp.ones((count,), jnp.bool_))
            hidden, cache = model(
                carry["last_token"][:, None], carry["lengths"][:, None], valid[:, None, :], carry["cache"], width + j
            )
        else:
            valid = carry["view_valid"]
            write_tables = jnp.where(active[:, None], tables, scratch_page)
            write_lengths = jnp.where(active, carry["lengths"], 0)
            caches = [PagedKV(k, v, write_tables, write_lengths) for k, v in carry["cache"]]
            hidden, caches = model(carry["last_token"][:, None], carry["lengths"][:, None], None, caches)
            cache = [(c.k_pages, c.v_pages) for c in caches]
        token, logprob, full = sample_token_logprobs(model.logits(hidden[:, 0, :]), uniforms[:, j], sampling)
        sampled = active
        if turns is not None:
            is_forced = forced[:, j]
            token = jnp.where(is_forced, forced_tokens[:, j], token)
            logprob = jnp.where(is_forced, 0.0, logprob)
            full = jnp.where(is_forced, 0.0, full)
            sampled = active & ~is_forced
        token = jnp.where(active, token, sampling.pad_id)
        generated = carry["generated"] + active.astype(jnp.int32)
        ended = generated >= sampling.max_new_tokens
        paused = carry["paused"]
        recent, recent_s = carry["recent_tokens"], carry["recent_sampled"]
        if sampling.stop_at_eos:
            is_eos = _is_eos(token, sampling)
            if turns is None:
                ended = ended | is_eos
            else:
                stop = is_eos
                if window:
                    recent = jnp.where(
                        active[:, None], jnp.concatenate([recent[:, 1:], token[:, None]], axis=1), recent
                    )
                    recent_s = jnp.where(
                        active[:, None], jnp.concatenate([recent_s[:, 1:], sampled[:, None]], axis=1), recent_s
                    )
                    for sequence in turns.sequences:
                        m = len(sequence)
                        stop = stop | (
                            jnp.all(recent[:, window - m :] == jnp.asarray(sequence, jnp.int32), axis=1)
                            & jnp.all(recent_s[:, window - m :], axis=1)
                        )
                paused = paused | (sampled & stop)
        full_logprobs = {}
        if sampling.truncates:
            full_logprobs["full_logprobs"] = _set_column(carry["full_logprobs"], j, jnp.where(active, full, 0.0))
        return dict(
            **full_logprobs,
            j=j + 1,
            cache=cache,
            view_valid=valid,
            lengths=carry["lengths"] + active.astype(jnp.int32),
            last_token=jnp.where(active, token, carry["last_token"]),
            active=active & ~ended & ~paused,
            generated=generated,
            paused=paused,
            recent_tokens=recent,
            recent_sampled=recent_s,
            tokens=_set_column(carry["tokens"], j, token),
            logprobs=_set_column(carry["logprobs"], j, jnp.where(active, logprob, 0.0)),
            emitted=_set_column(carry["emitted"], j, active),
            sampled=_set_column(carry["sampled"], j, sampled),
        )

    carry = jax.lax.while_loop(
        cond,
        body,
        dict(
            **({"full_logprobs": jnp.zeros((count, chunk_tokens), jnp.float32)} if sampling.truncates else {}),
            j=jnp.zeros((), jnp.int32),
            cache=cache,
            view_valid=view_valid,
            lengths=lengths,
            last_token=last_token,
            active=active,
            generated=generated,
            paused=jnp.zeros((count,), jnp.bool_),
            recent_tokens=recent_tokens,
            recent_sampled=recent_sampled,
            tokens=jnp.full((count, chunk_tokens), sampling.pad_id, jnp.int32),
            logprobs=jnp.zeros((count, chunk_tokens), jnp.float32),
            emitted=jnp.zeros((count, chunk_tokens), jnp.bool_),
            sampled=jnp.zeros((count, chunk_tokens), jnp.bool_),
        ),
    )
    carry["steps"] = carry.pop("j")
    cache = carry.pop("cache")
    if attention == "view":
        counts = carry["lengths"] - lengths  # the tokens each slot fed in this chunk
        cache = [
            write_view_tokens(k, v, view, tables, lengths, counts, width, scratch_page)
            for (k, v), view in zip(kv_pages, cache)
        ]
    carry["kv_pages"] = cache
    for name in ("recent_tokens", "recent_sampled", "view_valid"):
        carry.pop(name)
    return carry


def _is_eos(token: jax.Array, sampling: SamplingParams) -> jax.Array:
    """token [S] is an end of sequence (sampling.eos_id or one of extra_eos_ids)."""
    is_eos = token == sampling.eos_id
    for extra in sampling.extra_eos_ids:
        is_eos = is_eos | (token == extra)
    return is_eos


def _set_column(array: jax.Array, column: jax.Array | int, values: jax.Array) -> jax.Array:
    """array [S, C] with column `column` (traced) set to values [S]: an in-place slice update, which
    XLA's CPU backend runs much faster inside a loop than the scatter `.at[:, column].set` becomes."""
    return jax.lax.dynamic_update_slice(array, values[:, None].astype(array.dtype), (0, column))

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

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from trainers.models import transformer as model_lib
from trainers.models.generate import SamplingParams, StaticGraph, TurnStops, sample_token_logprobs
from trainers.models.paged_attention import PagedKV, dense_view, write_view_tokens


def _step_uniforms(rng_key, rows: int, max_new_tokens: int):
    """[N, rows]: the uniform `generate` draws for each sampling step and row (one key per step,
    split up front, each giving the step's [rows] uniforms)."""
    step_keys = jax.random.split(rng_key, max_new_tokens)
    return jax.vmap(lambda key: jax.random.uniform(key, (rows,), jnp.float32))(step_keys)


uniforms_jit = jax.jit(_step_uniforms, static_argnames=("rows", "max_new_tokens"))


@functools.partial(jax.jit, static_argnames=("rows", "micro_batch", "max_new_tokens", "call_stride"))
def micro_batch_uniforms_jit(rng_key, first_call, rows: int, micro_batch: int, max_new_tokens: int, call_stride: int):
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


def _prefill(model, prompt_tokens, prompt_valid):
    """Dense forward of left-padded prompts [n, Lp]: (last position's logits [n, V], per layer keys
    [n, KVH, D, Lp] and values [n, KVH, Lp, D])."""
    valid = prompt_valid.astype(jnp.bool_)
    hidden, prompt_kv = model(
        prompt_tokens, model_lib.positions_from_valid(valid), model_lib.causal_padding_mask(valid)
    )
    return model.logits(hidden[:, -1, :]), prompt_kv


def _write_prompts(kv_pages, prompt_kv, pages, offsets, tail_columns, tail_pages):
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
    graphdef: StaticGraph,
    params,
    kv_pages,
    prompt_tokens,
    prompt_valid,
    pages,
    offsets,
    tail_columns,
    tail_pages,
    uniforms,
    sampling: SamplingParams,
):
    """One program for arrivals: prefill n distinct prompts [n, Lp], write their keys and values
    into pages (`_write_prompts`), and sample token 0 of each of their G = sampling.prompt_group
    completions from the prompt's last logits with uniforms [n x G]. Returns (kv_pages, tokens,
    logprobs, full_logprobs [n x G]; full_logprobs None unless sampling.truncates)."""
    return _admit(
        nnx.merge(graphdef.graphdef, params),
        kv_pages,
        prompt_tokens,
        prompt_valid,
        pages,
        offsets,
        tail_columns,
        tail_pages,
        uniforms,
        sampling,
    )


def _admit(
    model,
    kv_pages,
    prompt_tokens,
    prompt_valid,
    pages,
    offsets,
    tail_columns,
    tail_pages,
    uniforms,
    sampling: SamplingParams,
):
    logits, prompt_kv = _prefill(model, prompt_tokens, prompt_valid)
    token, logprob, full = sample_token_logprobs(jnp.repeat(logits, sampling.prompt_group, axis=0), uniforms, sampling)
    kv_pages = _write_prompts(kv_pages, prompt_kv, pages, offsets, tail_columns, tail_pages)
    return kv_pages, token, logprob, full if sampling.truncates else None


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "view_tokens"), donate_argnames=("kv_pages",))
def prefill_piece(
    graphdef: StaticGraph,
    params,
    kv_pages,
    piece_tokens,
    tables,
    done,
    counts,
    tail_source,
    tail_pages,
    uniforms,
    sampling: SamplingParams,
    view_tokens: int,
    scratch_page: int,
):
    """One piece of a chunked prefill: n prompts' next C tokens, piece_tokens [n, C] (prompt token
    done[i] + j at column j, the first counts[i] columns real), attend to the tokens 0 .. done[i] - 1
    already in their pages (tables [n, max_pages], the group's first slot: gathered into a dense view
    `view_tokens` wide, `dense_view`) and causally to each other; their keys and values are written
    into the pages after the others. Token 0 of each of the G completions is sampled from the logits
    at the piece's last real column, with uniforms [n x G] (the host keeps those of the prompts whose
    last token is in this piece). A prompt that ends here with a partly filled last page has that page,
    tail_source [n], copied into each other completion's own page, tail_pages [n, G - 1] (the
    scratch page for the rest). Returns (kv_pages, tokens, logprobs, full_logprobs [n x G]; full_logprobs
    None unless sampling.truncates)."""
    model = nnx.merge(graphdef.graphdef, params)
    rows, piece = piece_tokens.shape
    views = [dense_view(k, v, tables, done, view_tokens, piece) for k, v in kv_pages]
    new = jnp.arange(piece)[None, :] < counts[:, None]  # [n, C]
    valid = views[0][1].at[:, view_tokens:].set(new)  # [n, W + C]: the columns holding a token
    column = jnp.arange(view_tokens + piece)[None, :] - view_tokens  # < 0: the view's, else the piece's column
    mask = valid[:, None, :] & (column <= jnp.arange(piece)[:, None])[None]  # [n, C, W + C]: causal
    positions = done[:, None] + jnp.arange(piece)[None, :]
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


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "sampling", "chunk_tokens", "scratch_page", "attention", "view_tokens"),
    donate_argnames=("kv_pages",),
)
def admit_and_decode(
    graphdef: StaticGraph,
    params,
    kv_pages,
    prompt_tokens,
    prompt_valid,
    pages,
    offsets,
    tail_columns,
    tail_pages,
    admit_uniforms,
    positions,
    tables,
    lengths,
    generated,
    uniforms,
    exit_active,
    exit_steps_left,
    sampling: SamplingParams,
    chunk_tokens: int,
    scratch_page: int,
    attention: str = "view",
    view_tokens: int = 0,
):
    """`admit` and then `decode_chunk` in one program, for a call whose groups all fit its slots at
    once (its only admission): no host read between the two. The admitted completions sit at
    `positions` [n x G] of the chunk's slots (out of range: a padding row, dropped); each starts
    from its token 0, or stays inactive if token 0 ended it (EOS, or a budget of one token).
    Returns decode_chunk's dict plus token0, logprob0 (and full_logprob0 when sampling.truncates)
    [n x G]. Single-turn only."""
    model = nnx.merge(graphdef.graphdef, params)
    kv_pages, token0, logprob0, full_logprob0 = _admit(
        model, kv_pages, prompt_tokens, prompt_valid, pages, offsets, tail_columns, tail_pages, admit_uniforms, sampling
    )
    ended = jnp.full(token0.shape, sampling.max_new_tokens <= 1)
    if sampling.stop_at_eos:
        ended = ended | _is_eos(token0, sampling)
    slots = tables.shape[0]
    last_token = jnp.zeros((slots,), jnp.int32).at[positions].set(token0, mode="drop")
    active = jnp.zeros((slots,), jnp.bool_).at[positions].set(~ended, mode="drop")
    empty = jnp.zeros((slots, 0), jnp.int32)
    out = _decode(
        model,
        kv_pages,
        tables,
        lengths,
        last_token,
        active,
        generated,
        uniforms,
        empty,
        empty.astype(jnp.bool_),
        empty,
        empty.astype(jnp.bool_),
        exit_active,
        exit_steps_left,
        sampling,
        chunk_tokens,
        scratch_page,
        None,
        attention,
        view_tokens,
    )
    out["token0"], out["logprob0"] = token0, logprob0
    if full_logprob0 is not None:
        out["full_logprob0"] = full_logprob0
    return out


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "sampling", "chunk_tokens", "scratch_page", "turns", "attention", "view_tokens"),
    donate_argnames=("kv_pages",),
)
def decode_chunk(
    graphdef: StaticGraph,
    params,
    kv_pages,
    tables,
    lengths,
    last_token,
    active,
    generated,
    uniforms,
    forced_tokens,
    forced,
    recent_tokens,
    recent_sampled,
    exit_active,
    exit_steps_left,
    sampling: SamplingParams,
    chunk_tokens: int,
    scratch_page: int,
    turns: TurnStops | None,
    attention: str = "view",
    view_tokens: int = 0,
):
    """Up to `chunk_tokens` decode steps of every slot, fewer once at most `exit_active` slots are
    still active while at least `exit_steps_left` steps would be left (of the chunk, and of the
    longest budget left): the host can then refill or shrink the bucket while it still pays (both
    traced int32 scalars, no recompilation; exit_active 0: run until none is active). Per slot: tables
    [S, max_pages], lengths (tokens in its cache), last_token (sampled, not yet fed), active,
    generated (tokens emitted so far), uniforms [S, K] (its next K steps'). With `turns`:
    forced_tokens, forced [S, K] (the host's reply tokens for the next steps) and the slot's last W
    tokens and whether each was sampled, recent_tokens, recent_sampled [S, W] (W = the longest stop
    sequence); without, these are ignored (pass [S, 0] arrays).

    Returns a dict: kv_pages, lengths, last_token, active, generated, paused [S] (turns: the slot
    sampled a turn's end), and per step j < K: tokens, logprobs, emitted [S, K] (a token was taken
    at step j) and sampled [S, K] (the model sampled it), full_logprobs [S, K] only when
    sampling.truncates, and steps (the steps run).

    attention: "paged", every step attends over the slot's pages (`paged_decode_attention`: the
    Pallas kernel on a GPU); "view", the slots' tokens are gathered once into a dense right-aligned
    view of `view_tokens` + K columns (`dense_view`; view_tokens >= every slot's length), the K
    steps run the static sampler's dense decode over it, and the chunk's new keys and values are
    written to the pages at the end: on a CPU a gather per step costs more than the step's
    attention, one per chunk does not, and the view is only as wide as the bucket's longest slot."""
    return _decode(
        nnx.merge(graphdef.graphdef, params),
        kv_pages,
        tables,
        lengths,
        last_token,
        active,
        generated,
        uniforms,
        forced_tokens,
        forced,
        recent_tokens,
        recent_sampled,
        exit_active,
        exit_steps_left,
        sampling,
        chunk_tokens,
        scratch_page,
        turns,
        attention,
        view_tokens,
    )


def _decode(
    model,
    kv_pages,
    tables,
    lengths,
    last_token,
    active,
    generated,
    uniforms,
    forced_tokens,
    forced,
    recent_tokens,
    recent_sampled,
    exit_active,
    exit_steps_left,
    sampling: SamplingParams,
    chunk_tokens: int,
    scratch_page: int,
    turns: TurnStops | None,
    attention: str,
    view_tokens: int,
):
    slots = tables.shape[0]
    window = recent_tokens.shape[1]
    width = view_tokens
    if attention == "view":
        views = [dense_view(k, v, tables, lengths, width, chunk_tokens) for k, v in kv_pages]
        cache, view_valid = [kv for kv, _ in views], views[0][1]
    else:
        cache, view_valid = kv_pages, jnp.zeros((slots, 0), jnp.bool_)

    def cond(carry):
        j, active = carry["j"], carry["active"]
        running = jnp.sum(active.astype(jnp.int32))
        budget_left = jnp.max(jnp.where(active, sampling.max_new_tokens - carry["generated"], 0))
        left = jnp.minimum(chunk_tokens - j, budget_left)
        return (j < chunk_tokens) & (running > 0) & ((running > exit_active) | (left < exit_steps_left))

    def body(carry):
        j, active = carry["j"], carry["active"]
        if attention == "view":
            valid = _set_column(carry["view_valid"], width + j, jnp.ones((slots,), jnp.bool_))
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
            **({"full_logprobs": jnp.zeros((slots, chunk_tokens), jnp.float32)} if sampling.truncates else {}),
            j=jnp.zeros((), jnp.int32),
            cache=cache,
            view_valid=view_valid,
            lengths=lengths,
            last_token=last_token,
            active=active,
            generated=generated,
            paused=jnp.zeros((slots,), jnp.bool_),
            recent_tokens=recent_tokens,
            recent_sampled=recent_sampled,
            tokens=jnp.full((slots, chunk_tokens), sampling.pad_id, jnp.int32),
            logprobs=jnp.zeros((slots, chunk_tokens), jnp.float32),
            emitted=jnp.zeros((slots, chunk_tokens), jnp.bool_),
            sampled=jnp.zeros((slots, chunk_tokens), jnp.bool_),
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


def _set_column(array: jax.Array, column, values: jax.Array) -> jax.Array:
    """array [S, C] with column `column` (traced) set to values [S]: an in-place slice update, which
    XLA's CPU backend runs much faster inside a loop than the scatter `.at[:, column].set` becomes."""
    return jax.lax.dynamic_update_slice(array, values[:, None].astype(array.dtype), (0, column))

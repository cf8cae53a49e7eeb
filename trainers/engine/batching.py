"""Continuous batching over a paged KV cache: `generate_paged`, today's `models.generate.generate`
(same arguments, same samples) run as a fixed number of decode slots that are refilled as
sequences end, instead of one static batch that decodes until its longest completion ends.

The host loop, between jitted chunks of `chunk_tokens` decode steps:
  1. admit: while slots are free and groups wait, take the next group (its G = prompt_group
     completions need G free slots); the arrivals' distinct prompts are prefilled together
     (`_prefill_jit`, the dense forward `generate` uses), their keys and values written into fresh
     pages of the group's first slot, which the other G - 1 fork (`PagePool.fork`: the prompt is
     stored and prefilled once); token 0 of each completion is sampled from the prompt's logits;
  2. reserve: every active slot gets the pages its next chunk writes (`PagePool.reserve`; the
     copies of a shared partly filled page are made on the device first, `_copy_pages_jit`);
  3. decode a chunk (`_decode_chunk_jit`) over the active slots, gathered into the smallest
     bucket of slots that holds them (`slot_bucket`; their block tables are all that moves: the pages stay
     where they are), so the last long sequences of a step run in a small program rather than
     among idle slots: each step feeds every active slot's last token at its position, writes its
     key and value into its pages, attends over its own tokens (`paged_attention`), samples with
     `generate`'s sampler and the uniform `generate` would use for that row and step, and ends the
     slot at EOS or at max_new_tokens; ended slots write to a scratch page no slot reads;
  4. retire: ended slots give their pages back and take the next arrivals at step 1.

Same samples: every completion gets the uniforms `generate` draws for its row and step, and the
sampler, RoPE positions and attention of `generate` over the same tokens, so greedy output is the
same tokens and sampled output the same draws (log-probs equal up to float rounding: the sums run
over a paged rather than a left-padded layout). `EngineStats` reports slot utilisation (useful
decode tokens / slot-steps run) and the pages in use.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers.data.encoding import bucket_width
from trainers.engine.pages import PagePool
from trainers.models import transformer as model_lib
from trainers.models.generate import GenerationResult, SamplingParams, StaticGraph, sample_token, static_graph
from trainers.models.paged_attention import PagedKV


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """num_slots: decode lanes run together; page_tokens: token positions a page holds;
    chunk_tokens: decode steps between two visits of the host (admit, retire)."""

    num_slots: int
    page_tokens: int = 16
    chunk_tokens: int = 8


@dataclasses.dataclass
class EngineStats:
    """What one `generate_paged` call did: decode slot-steps run and the useful tokens among them
    (`slot_utilisation`), chunks, prefill calls, the most pages in use at once of the pool, and
    summed over the chunks' ends the KV positions the pages in use hold against the tokens stored
    in them (`kv_overhead`: 1.0 when every page is full; a shared page counts once)."""

    slot_steps: int = 0
    decode_tokens: int = 0
    chunks: int = 0
    prefills: int = 0
    peak_pages_in_use: int = 0
    pool_pages: int = 0
    kv_positions_held: int = 0
    kv_tokens_stored: int = 0

    @property
    def slot_utilisation(self) -> float:
        return self.decode_tokens / self.slot_steps if self.slot_steps else 0.0

    @property
    def kv_overhead(self) -> float:
        return self.kv_positions_held / self.kv_tokens_stored if self.kv_tokens_stored else 0.0


def tokens_stored(pool: PagePool) -> int:
    """The token positions written in the pages in use: each slot's tokens, a shared page once."""
    filled: dict[int, int] = {}
    for slot in np.flatnonzero(pool.pages_held):
        length = int(pool.lengths[slot])
        for i, page in enumerate(pool.slot_pages(int(slot))):
            filled[page] = max(filled.get(page, 0), min(max(length - i * pool.page_tokens, 0), pool.page_tokens))
    return sum(filled.values())


def step_uniforms(rng_key: jax.Array, rows: int, max_new_tokens: int) -> np.ndarray:
    """[N, rows] float32: the uniform `generate` draws for each sampling step and row (one key per
    step, split up front, each giving the step's [rows] uniforms)."""
    return np.asarray(_uniforms_jit(rng_key, rows, max_new_tokens))


@functools.partial(jax.jit, static_argnames=("rows", "max_new_tokens"))
def _uniforms_jit(rng_key, rows, max_new_tokens):
    step_keys = jax.random.split(rng_key, max_new_tokens)
    return jax.vmap(lambda key: jax.random.uniform(key, (rows,), jnp.float32))(step_keys)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _prefill_jit(graphdef: StaticGraph, params, prompt_tokens, prompt_valid):
    """Dense forward of left-padded prompts [n, Lp]: (last position's logits [n, V], per layer keys
    [n, KVH, D, Lp] and values [n, KVH, Lp, D])."""
    model = nnx.merge(graphdef.graphdef, params)
    valid = prompt_valid.astype(jnp.bool_)
    hidden, prompt_kv = model(prompt_tokens, model_lib.positions_from_valid(valid),
                              model_lib.causal_padding_mask(valid))
    return model.logits(hidden[:, -1, :]), prompt_kv


@functools.partial(jax.jit, donate_argnames=("kv_pages",))
def _write_prompts_jit(kv_pages, prompt_kv, pages, offsets):
    """Write prefilled keys/values into pages: pages, offsets [n, Lp] int32 give each prompt column's
    page and offset (the scratch page for padding and unused rows)."""
    out = []
    for (k_pages, v_pages), (keys, values) in zip(kv_pages, prompt_kv):
        k_new = keys.transpose(1, 0, 3, 2)  # [KVH, n, Lp, D]
        v_new = values.transpose(1, 0, 2, 3)  # [KVH, n, Lp, D]
        out.append((k_pages.at[:, pages, offsets].set(k_new.astype(k_pages.dtype)),
                    v_pages.at[:, pages, offsets].set(v_new.astype(v_pages.dtype))))
    return out


@functools.partial(jax.jit, donate_argnames=("kv_pages",))
def _copy_pages_jit(kv_pages, sources, targets):
    """Copy page sources[i] to targets[i] in every layer (pairs of the scratch page do nothing useful)."""
    return [(k.at[:, targets].set(k[:, sources]), v.at[:, targets].set(v[:, sources])) for k, v in kv_pages]


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "chunk_tokens", "scratch_page"),
                   donate_argnames=("kv_pages",))
def _decode_chunk_jit(graphdef: StaticGraph, params, kv_pages, tables, lengths, last_token, active, generated, uniforms,
                      sampling: SamplingParams, chunk_tokens: int, scratch_page: int):
    """Up to `chunk_tokens` decode steps of every slot (fewer once none is active). Per slot: tables
    [S, max_pages], lengths (tokens in its cache), last_token (sampled, not yet fed), active,
    generated (tokens sampled so far), uniforms [S, K] (its next K steps'). Returns the new
    kv_pages, lengths, last_token, active, generated, and per step j < K: tokens, logprobs [S, K]
    and emitted [S, K] (a token sampled at step j), and the steps run."""
    model = nnx.merge(graphdef.graphdef, params)
    slots = tables.shape[0]
    tokens_out = jnp.full((slots, chunk_tokens), sampling.pad_id, jnp.int32)
    logprobs_out = jnp.zeros((slots, chunk_tokens), jnp.float32)
    emitted_out = jnp.zeros((slots, chunk_tokens), jnp.bool_)

    def cond(carry):
        return (carry["j"] < chunk_tokens) & jnp.any(carry["active"])

    def body(carry):
        j, active = carry["j"], carry["active"]
        write_tables = jnp.where(active[:, None], tables, scratch_page)
        write_lengths = jnp.where(active, carry["lengths"], 0)
        caches = [PagedKV(k, v, write_tables, write_lengths) for k, v in carry["kv_pages"]]
        hidden, caches = model(carry["last_token"][:, None], carry["lengths"][:, None], None, caches)
        token, logprob = sample_token(model.logits(hidden[:, 0, :]), uniforms[:, j], sampling)
        token = jnp.where(active, token, sampling.pad_id)
        generated = carry["generated"] + active.astype(jnp.int32)
        ended = generated >= sampling.max_new_tokens
        if sampling.stop_at_eos:
            is_eos = token == sampling.eos_id
            for extra in sampling.extra_eos_ids:
                is_eos = is_eos | (token == extra)
            ended = ended | is_eos
        return dict(
            j=j + 1, kv_pages=[(c.k_pages, c.v_pages) for c in caches],
            lengths=carry["lengths"] + active.astype(jnp.int32),
            last_token=jnp.where(active, token, carry["last_token"]),
            active=active & ~ended, generated=generated,
            tokens=carry["tokens"].at[:, j].set(token),
            logprobs=carry["logprobs"].at[:, j].set(jnp.where(active, logprob, 0.0)),
            emitted=carry["emitted"].at[:, j].set(active))

    carry = jax.lax.while_loop(cond, body, dict(
        j=jnp.zeros((), jnp.int32), kv_pages=kv_pages, lengths=lengths, last_token=last_token, active=active,
        generated=generated, tokens=tokens_out, logprobs=logprobs_out, emitted=emitted_out))
    return (carry["kv_pages"], carry["lengths"], carry["last_token"], carry["active"], carry["generated"],
            carry["tokens"], carry["logprobs"], carry["emitted"], carry["j"])


@functools.partial(jax.jit, static_argnames=("sampling",))
def _first_tokens_jit(logits, uniforms, sampling: SamplingParams):
    return sample_token(logits, uniforms, sampling)


def generate_paged(graphdef: nnx.GraphDef, params: nnx.State, prompt_tokens, prompt_valid, rng_key: jax.Array,
                   sampling: SamplingParams, settings: EngineSettings,
                   uniforms: np.ndarray | None = None) -> tuple[GenerationResult, EngineStats]:
    """`generate`'s samples (see its docstring for the arguments and the result), generated with
    continuous batching over settings.num_slots slots and a paged KV cache (the module docstring).
    uniforms [N, rows]: the draws to sample with, instead of those `generate` makes from `rng_key`
    (rows that came from several `generate` calls keep their own)."""
    prompt_tokens, prompt_valid = np.asarray(prompt_tokens, np.int32), np.asarray(prompt_valid, bool)
    rows, prompt_width = prompt_tokens.shape
    max_new, group = sampling.max_new_tokens, sampling.prompt_group
    if not prompt_valid[:, -1].all():
        raise ValueError("prompts must be LEFT-padded: prompt_valid[:, -1] is False for some rows")
    if rows % group or settings.num_slots < group:
        raise ValueError(f"{rows} rows in groups of {group} on {settings.num_slots} slots: the rows must be whole "
                         "groups and a group must fit the slots")
    model_cfg = nnx.merge(graphdef, params).cfg
    page = settings.page_tokens
    max_pages = -(-(prompt_width + max_new) // page)
    pool = PagePool(settings.num_slots * max_pages, page, settings.num_slots, max_pages)
    scratch = pool.num_pages  # one page past the pool: where free and ended slots write
    dtype = model_cfg.dtype
    shape = (model_cfg.num_kv_heads, scratch + 1, page, model_cfg.head_dim)
    kv_pages = [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(model_cfg.num_layers)]
    if uniforms is None:
        uniforms = step_uniforms(rng_key, rows, max_new)  # [N, rows]
    elif uniforms.shape != (max_new, rows):
        raise ValueError(f"uniforms of shape {uniforms.shape}: expected (max_new_tokens, rows) = {(max_new, rows)}")
    prompt_lengths = prompt_valid.sum(axis=1).astype(np.int32)
    slots = settings.num_slots
    slot_row = np.full(slots, -1, np.int64)
    lengths, last_token = np.zeros(slots, np.int32), np.zeros(slots, np.int32)
    active, generated = np.zeros(slots, bool), np.zeros(slots, np.int32)
    tokens = np.full((rows, max_new), sampling.pad_id, np.int32)
    logprobs = np.zeros((rows, max_new), np.float32)
    mask = np.zeros((rows, max_new), bool)
    stats = EngineStats(pool_pages=pool.num_pages)
    waiting = list(range(0, rows, group))  # the first row of each group, in order
    graph = static_graph(graphdef)  # hashed once, not at every chunk's call

    while True:
        # 1. admit whole groups into free slots
        free = [s for s in range(slots) if slot_row[s] < 0]
        arrivals = []
        while waiting and len(free) >= group:
            arrivals.append((waiting.pop(0), free[:group]))
            free = free[group:]
        if arrivals:
            stats.prefills += 1
            kv_pages, logits = _admit(graph, params, kv_pages, pool, arrivals, prompt_tokens, prompt_valid,
                                      prompt_lengths, scratch)
            first_rows = [row for first, _ in arrivals for row in range(first, first + group)]
            first_slots = [s for _, taken in arrivals for s in taken]
            token0, logprob0 = _first_tokens_jit(jnp.repeat(logits, group, axis=0),
                                                 jnp.asarray(uniforms[0, first_rows]), sampling)
            token0, logprob0 = np.asarray(token0), np.asarray(logprob0)
            for i, (row, slot) in enumerate(zip(first_rows, first_slots)):
                tokens[row, 0], logprobs[row, 0], mask[row, 0] = token0[i], logprob0[i], True
                slot_row[slot], lengths[slot], last_token[slot] = row, prompt_lengths[row], token0[i]
                generated[slot] = 1
                ended = max_new <= 1 or (sampling.stop_at_eos and _is_eos(int(token0[i]), sampling))
                active[slot] = not ended
                if ended:
                    pool.release(slot)
                    slot_row[slot] = -1
        if not active.any():
            if not waiting:
                break
            continue
        # 2. reserve the pages the chunk writes; copy shared partly filled pages first
        chunk = settings.chunk_tokens
        copies = []
        for slot in np.flatnonzero(active):
            # the cache never holds the last sampled token: at most prompt + max_new - 1 tokens
            most = prompt_lengths[slot_row[slot]] + max_new - 1
            copies += pool.reserve(int(slot), int(min(lengths[slot] + chunk, most)))
        if copies:
            # a fixed count (one program): a slot copies at most the pages its chunk writes into
            padded = np.full((2, slots * (chunk // page + 2)), scratch, np.int32)
            padded[0, :len(copies)] = [c.source for c in copies]
            padded[1, :len(copies)] = [c.target for c in copies]
            kv_pages = _copy_pages_jit(kv_pages, jnp.asarray(padded[0]), jnp.asarray(padded[1]))
        stats.peak_pages_in_use = max(stats.peak_pages_in_use, pool.pages_in_use)
        # 3. decode a chunk over the active slots, gathered into the smallest bucket that holds them:
        #    when the queue runs dry the last long sequences run in a small program, not among idle slots
        running = np.flatnonzero(active)
        bucket = slot_bucket(len(running), slots)
        chunk_uniforms = np.zeros((bucket, chunk), np.float32)
        for i, slot in enumerate(running):
            row, start = slot_row[slot], generated[slot]
            steps = uniforms[start:start + chunk, row]
            chunk_uniforms[i, :len(steps)] = steps
        picked = np.zeros(bucket, np.int64)
        picked[:len(running)] = running
        in_bucket = np.zeros(bucket, bool)
        in_bucket[:len(running)] = True
        (kv_pages, lengths_d, last_d, active_d, generated_d, chunk_tokens_d, chunk_logprobs_d, emitted_d,
         steps_run) = _decode_chunk_jit(graph, params, kv_pages, jnp.asarray(pool.tables[picked]),
                                        jnp.asarray(lengths[picked]), jnp.asarray(last_token[picked]),
                                        jnp.asarray(in_bucket), jnp.asarray(generated[picked]),
                                        jnp.asarray(chunk_uniforms), sampling, chunk, scratch)
        emitted = np.asarray(emitted_d)[:len(running)]
        chunk_tokens_h, chunk_logprobs_h = np.asarray(chunk_tokens_d), np.asarray(chunk_logprobs_d)
        stats.chunks += 1
        stats.slot_steps += bucket * int(steps_run)
        stats.decode_tokens += int(emitted.sum())
        for i, slot in enumerate(running):
            row, start, count = slot_row[slot], generated[slot], int(emitted[i].sum())
            tokens[row, start:start + count] = chunk_tokens_h[i, :count]
            logprobs[row, start:start + count] = chunk_logprobs_h[i, :count]
            mask[row, start:start + count] = True
        still = np.zeros(slots, bool)
        still[running] = np.asarray(active_d)[:len(running)]
        lengths[running] = np.asarray(lengths_d)[:len(running)]
        last_token[running] = np.asarray(last_d)[:len(running)]
        generated[running] = np.asarray(generated_d)[:len(running)]
        for slot in running:
            pool.advance(int(slot), int(lengths[slot]))
        stats.kv_positions_held += pool.pages_in_use * pool.page_tokens
        stats.kv_tokens_stored += tokens_stored(pool)
        # 4. retire ended slots
        for slot in np.flatnonzero(active & ~still):
            pool.release(int(slot))
            slot_row[slot] = -1
        active = still
    lengths_out = mask.sum(axis=1).astype(np.int32)
    result = GenerationResult(tokens=tokens, logprobs=logprobs, mask=mask, lengths=lengths_out,
                              decode_steps=int(lengths_out.max()) if rows else 0)
    return result, stats


def slot_bucket(active: int, slots: int) -> int:
    """The decode program's slot count for `active` active slots: the next power of two up to 8, then
    the next of 8 x (2, 3, 4, 6, 8, 12, ...) (`encoding.bucket_width`: about two sizes per doubling,
    each under 1.5x what it holds), never more than `slots`."""
    if active <= 8:
        return min(slots, 1 << max(active - 1, 0).bit_length())
    return min(slots, bucket_width(active, 8))


def _is_eos(token: int, sampling: SamplingParams) -> bool:
    return token == sampling.eos_id or token in sampling.extra_eos_ids


def _arrival_prompts(prompt_tokens, prompt_valid, arrivals, padded_count):
    firsts = [first for first, _ in arrivals]
    firsts += [firsts[0]] * (padded_count - len(firsts))  # padding rows repeat a real prompt, written nowhere
    return prompt_tokens[firsts], prompt_valid[firsts]


def _padded_count(count: int) -> int:
    return 1 << (count - 1).bit_length()  # arrivals prefill in power-of-two batches: few compiled shapes


def _admit(graphdef, params, kv_pages, pool: PagePool, arrivals, prompt_tokens, prompt_valid, prompt_lengths,
           scratch: int):
    """Prefill the arrivals' prompts into fresh pages of each group's first slot and fork the rest;
    returns the new kv_pages and the prompts' last logits [arrivals, V]."""
    padded = _padded_count(len(arrivals))
    width = prompt_tokens.shape[1]
    pages = np.full((padded, width), scratch, np.int32)
    offsets = np.zeros((padded, width), np.int32)
    for i, (first, taken) in enumerate(arrivals):
        length = int(prompt_lengths[first])
        table = pool.admit(taken[0], length)
        for t in range(length):
            column = width - length + t
            pages[i, column], offsets[i, column] = table[t // pool.page_tokens], t % pool.page_tokens
        for slot in taken[1:]:
            pool.fork(taken[0], slot)
    tokens, valid = _arrival_prompts(prompt_tokens, prompt_valid, arrivals, padded)
    logits, prompt_kv = _prefill_jit(graphdef, params, jnp.asarray(tokens), jnp.asarray(valid))
    return _write_prompts_jit(kv_pages, prompt_kv, jnp.asarray(pages), jnp.asarray(offsets)), logits[:len(arrivals)]

"""Continuous batching over a paged KV cache: `generate_paged`, the one way the trainer generates
(rollouts sync and async, dynamic-sampling refills, multi-turn episodes, evaluation, the `generate`
command). A fixed number of decode slots is refilled as sequences end, instead of a static batch
that decodes until its longest completion ends. Same arguments and samples as the static reference
sampler `models.generate.generate`.

The host loop, between jitted chunks of `chunk_tokens` decode steps (`engine.programs`):
  1. admit: while slots are free and groups wait, take the next group (its G = prompt_group
     completions need G free slots); the arrivals' distinct prompts are prefilled together (the
     dense forward `generate` uses), their keys and values written into fresh pages of the group's
     first slot, whose full pages the other G - 1 share (`PagePool.admit_groups`: the prompt is
     stored and prefilled once; a partly filled last page is written once per slot, the one page
     each completion writes into); token 0 of each completion is sampled from the prompt's logits.
     When every group fits the slots at once (the call's only admission) and neither weights in
     flight nor turns need the host, the prefill runs in the first chunk's program: one dispatch
     and no host read between them (with later admissions it stays a program of its own, which
     those reuse: fewer programs to compile). In a call whose prompts are padded wider than
     prefill_chunk_tokens, arrivals are prefilled in pieces instead (`programs.prefill_piece`),
     one piece per visit of the host, each at most that wide and a last one only as wide as its
     tokens need, so the slots already decoding wait one piece between two chunks, never a whole
     long prompt, and a short prompt does not pay for the padded width of a long one; each group
     starts once its prompt's last piece has run;
  2. answer turns (multi-turn only): a slot that sampled a turn's end (EOS or a stop sequence)
     waits, holding its pages, while the host asks `on_turn_end` for the environment's reply; the
     reply enters the slot as forced tokens over its next steps (the other slots decode on), or the
     slot ends;
  3. reserve: every active slot gets the pages its next chunk writes (`PagePool.grow`);
  4. decode a chunk over the active slots, gathered into the smallest bucket of slots that holds
     them (`slot_bucket`; only their block tables move, the pages stay where they are), so the last
     long sequences of a step run in a small program rather than among idle slots. With in-flight
     weights the newest weights are taken before each chunk (and each admission). A chunk ends
     early once enough of its slots have ended for the next waiting group to enter, or, when none
     waits, for the rest to fit a smaller bucket with half a chunk or more to go (`exit_rule`): a
     slot that ends mid-chunk idles a few steps, not until the chunk's end;
  5. retire: ended slots give their pages back and take the next arrivals at step 1.

Same samples: every completion gets the uniforms `generate` draws for its row and step, and the
sampler, RoPE positions and attention of `generate` over the same tokens, so greedy output is the
same tokens and sampled output the same draws (log-probs equal up to float rounding: the sums run
over a paged rather than a left-padded layout). `EngineStats` reports slot utilisation (useful
decode tokens / slot-steps run), the pages in use, and prefill and decode time.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from trainers.data.encoding import bucket_width
from trainers.engine import programs
from trainers.engine.pages import PAGE_TOKENS, PagePool
from trainers.models.generate import GenerationResult, SamplingParams, TurnEnd, TurnStops, static_graph
from trainers.models.paged_attention import default_implementation
from trainers.parallel.host import to_host, tree_to_host

Weights = Callable[[], tuple[Any, int]]  # () -> (params, version): see `rollout.spec.Weights`


class GroupGate(Protocol):
    """Admission driven by finished groups (dynamic sampling without rounds): the engine asks how many
    more waiting groups may enter, and reports each group that ended (all its G rows)."""

    def admit_limit(self, in_flight_groups: int) -> int:
        """How many more groups may be admitted now, with `in_flight_groups` admitted and not ended."""

    def ended(self, first_row: int, tokens: np.ndarray, mask: np.ndarray) -> None:
        """The group of rows first_row .. first_row + G - 1 ended; tokens / mask [G, max_new_tokens]."""


KV_MEMORY_FRACTION = 0.5
"""The share of a device's free memory the KV pool may take when the slots follow the memory
(`EngineSettings.memory_fraction` in rollouts that leave rollout.decode_slots unset)."""


PREFILL_CHUNK_TOKENS = 512
"""In a call whose prompts are padded wider than this, they are prefilled in pieces of at most this
many tokens (`EngineSettings.prefill_chunk_tokens`)."""


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """num_slots: decode lanes run together; page_tokens: token positions a page holds;
    chunk_tokens: decode steps between two visits of the host (admit, retire, turns, weights);
    memory_fraction > 0: on a device that reports its memory (an accelerator; not the CPU), the
    slots grow past num_slots, in whole groups up to the call's rows, as long as the KV pool stays
    within this share of the device's free memory (`memory_slots`); prefill_chunk_tokens > 0:
    in a call whose prompts are padded wider than this, arrivals are prefilled in pieces of at most
    this many tokens, one piece between two decode chunks (0: every prompt at once)."""

    num_slots: int
    page_tokens: int = PAGE_TOKENS
    chunk_tokens: int = 16
    memory_fraction: float = 0.0
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS

    def __post_init__(self) -> None:
        for name in ("num_slots", "page_tokens", "chunk_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prefill_chunk_tokens < 0:
            raise ValueError(f"prefill_chunk_tokens must be >= 0, got {self.prefill_chunk_tokens}")
        if not 0.0 <= self.memory_fraction < 1.0:
            raise ValueError(f"memory_fraction must be in [0, 1), got {self.memory_fraction}")


def memory_slots(
    num_slots: int, rows: int, group: int, slot_bytes: int, free_bytes: int | None, fraction: float
) -> int:
    """The decode slots of a call of `rows` rows in groups of `group`: num_slots, or more where the
    device's free memory allows: the most whole groups, up to `rows`, whose slots' KV pages
    (`slot_bytes` each: a slot can hold a whole sequence) fit in fraction x free_bytes. Never fewer
    than num_slots; free_bytes None (the device does not say) or fraction 0: num_slots."""
    if free_bytes is None or fraction <= 0:
        return num_slots
    fit = int(fraction * free_bytes) // slot_bytes // group * group
    return max(num_slots, min(fit, rows))


def free_device_bytes(mesh: Any = None) -> int | None:
    """Free memory of a device the pages go to (the mesh's first of this process, or the default
    device): its bytes_limit less bytes_in_use; None where the backend keeps no such figures (the
    CPU), and in a run of several processes, whose slot counts must agree while their free memory
    need not (each keeps the configured slots)."""
    if jax.process_count() > 1:
        return None
    device = mesh.devices.flat[0] if mesh is not None else jax.local_devices()[0]
    stats = device.memory_stats() or {}
    if "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


@dataclasses.dataclass
class EngineStats:
    """What one `generate_paged` call did: decode slot-steps run and the useful tokens among them
    (`slot_utilisation`), chunks, prefill calls, the most pages in use at once of the pool, and
    summed over every decode step the KV positions the pages in use hold (those reserved for the
    chunk included) against the tokens stored in them (`kv_overhead`: 1.0 when every page is full;
    a shared page counts once); the wall time spent in prefills and in decode chunks (each until
    its results reached the host; a call's only admission runs in its first chunk's program, and
    its time is that chunk's), and the longest of those prefill programs (`longest_prefill_s`: the
    longest the slots already decoding waited between two chunks for arrivals)."""

    slot_steps: int = 0
    decode_tokens: int = 0
    chunks: int = 0
    prefills: int = 0
    peak_pages_in_use: int = 0
    pool_pages: int = 0
    kv_positions_held: int = 0
    kv_tokens_stored: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    longest_prefill_s: float = 0.0

    @property
    def slot_utilisation(self) -> float:
        return self.decode_tokens / self.slot_steps if self.slot_steps else 0.0

    @property
    def kv_overhead(self) -> float:
        return self.kv_positions_held / self.kv_tokens_stored if self.kv_tokens_stored else 0.0

    def add(self, other: EngineStats) -> None:
        """Sum another call's figures into these (the peak is the larger of the two)."""
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            setattr(
                self,
                field.name,
                max(mine, theirs)
                if field.name in ("peak_pages_in_use", "pool_pages", "longest_prefill_s")
                else mine + theirs,
            )


def step_uniforms(rng_key: jax.Array, rows: int, max_new_tokens: int) -> np.ndarray:
    """[N, rows] float32: the uniform `generate` draws for each sampling step and row (one key per
    step, split up front, each giving the step's [rows] uniforms)."""
    return np.asarray(programs.uniforms_jit(rng_key, rows, max_new_tokens))


def micro_batch_uniforms(
    rng_key: jax.Array, first_call: int, rows: int, micro_batch: int, max_new_tokens: int, call_stride: int = 1
) -> np.ndarray:
    """[N, rows]: the uniforms of `rows` rows cut into micro-batches of `micro_batch` rows, the k-th
    drawing as `generate` does from fold_in(rng_key, first_call + k x call_stride): the samples of a
    rollout whose micro-batch k has that key, whichever way the engine groups the rows."""
    if not rows:
        return np.zeros((max_new_tokens, 0), np.float32)
    return np.asarray(
        programs.micro_batch_uniforms_jit(
            rng_key, np.uint32(first_call), rows, micro_batch, max_new_tokens, call_stride
        )
    )


def decode_attention(head_dim: int, page_tokens: int) -> str:
    """How the decode chunks of a model with heads of `head_dim` over pages of `page_tokens` attend
    (`programs.decode_chunk`'s `attention`): "paged" where a Pallas kernel reads the pages
    (`paged_attention.default_implementation`), else "view"."""
    return "paged" if default_implementation(head_dim, page_tokens) != "gather" else "view"


def _fixed(params) -> Weights:
    return lambda: (params, 0)


def generate_paged(
    graphdef: nnx.GraphDef,
    weights: Weights | nnx.State,
    prompt_tokens,
    prompt_valid,
    rng_key: jax.Array,
    sampling: SamplingParams,
    settings: EngineSettings,
    *,
    uniforms: np.ndarray | None = None,
    in_flight: bool = False,
    turns: TurnStops | None = None,
    on_turn_end: TurnEnd | None = None,
    mesh: Any = None,
    gate: GroupGate | None = None,
) -> tuple[GenerationResult, EngineStats]:
    """`generate`'s samples (see its docstring for the arguments and the result), generated with
    continuous batching over settings.num_slots slots and a paged KV cache (the module docstring).

    weights: the parameters, or a `Weights` callable () -> (params, version), called once, or with
    in_flight=True before every chunk and every admission but the first (new weights apply from the
    next token on; the keys and values already cached stay as the older weights computed them, not
    recomputed, so each token's log-prob is the one it was sampled with); `token_versions` says
    which weights sampled each token.
    uniforms [N, rows]: the draws to sample with, instead of those `generate` makes from `rng_key`
    (rows that came from several `generate` calls keep their own: `micro_batch_uniforms`).
    turns, on_turn_end: multi-turn episodes. A row whose sampled tokens end a turn (EOS, or one of
    turns.sequences, all its tokens sampled) pauses; the host calls on_turn_end (`generate.TurnEnd`)
    and feeds the reply as forced tokens (log-prob 0), or ends the row. `mask` then marks every
    token after the prompt, `sampled` those the model sampled.
    mesh: the device mesh the weights live on; the pages are placed on it, KV heads split over its
    `tensor` axis where they divide. Host reads gather across processes (`host.to_host`).
    gate: admission decided by the groups that ended (`GroupGate`): groups still enter in order, so
    the groups generated are a prefix of the rows (as many as `gate.ended` was called); the rows of
    groups never admitted keep an empty mask."""
    prompt_tokens, prompt_valid = to_host(prompt_tokens).astype(np.int32), to_host(prompt_valid).astype(bool)
    rows, prompt_width = prompt_tokens.shape
    max_new, group = sampling.max_new_tokens, sampling.prompt_group
    if max_new < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new}")
    if rows and not prompt_valid[:, -1].all():
        raise ValueError(
            "prompts must be LEFT-padded: prompt_valid[:, -1] is False for rows "
            f"{np.flatnonzero(~prompt_valid[:, -1]).tolist()}"
        )
    if rows % group or settings.num_slots < group:
        raise ValueError(
            f"{rows} rows in groups of {group} on {settings.num_slots} slots: the rows must be whole "
            "groups and a group must fit the slots"
        )
    if turns is not None and (on_turn_end is None or not sampling.stop_at_eos):
        raise ValueError(
            "multi-turn generation needs on_turn_end and stop_at_eos (a turn ends at the end-of-turn token)"
        )
    if uniforms is None:
        uniforms = step_uniforms(rng_key, rows, max_new)  # [N, rows]
    elif uniforms.shape != (max_new, rows):
        raise ValueError(f"uniforms of shape {uniforms.shape}: expected (max_new_tokens, rows) = {(max_new, rows)}")
    run = _Run(
        graphdef,
        weights if callable(weights) else _fixed(weights),
        prompt_tokens,
        prompt_valid,
        uniforms,
        sampling,
        settings,
        in_flight,
        turns,
        on_turn_end,
        mesh,
        gate,
    )
    return run.generate()


class _Run:
    """One `generate_paged` call: the pool, the slots' host state and the outputs."""

    def __init__(
        self,
        graphdef,
        weights: Weights,
        prompt_tokens,
        prompt_valid,
        uniforms,
        sampling: SamplingParams,
        settings: EngineSettings,
        in_flight: bool,
        turns: TurnStops | None,
        on_turn_end,
        mesh,
        gate: GroupGate | None = None,
    ) -> None:
        self.weights, self.in_flight, self.turns, self.on_turn_end = weights, in_flight, turns, on_turn_end
        self.gate = gate
        self.prompt_tokens, self.prompt_valid, self.uniforms = prompt_tokens, prompt_valid, uniforms
        self.sampling, self.settings = sampling, settings
        self.graph = static_graph(graphdef)  # hashed once, not at every chunk's call
        self.params, self.version = weights()
        self.fetched = True  # the weights just taken serve the first admission
        model_cfg = _model_config(self.graph, self.params)
        rows, prompt_width = prompt_tokens.shape
        max_new, page = sampling.max_new_tokens, settings.page_tokens
        max_pages = -(-(prompt_width + max_new) // page)
        if settings.memory_fraction:
            slot_bytes = (
                2
                * model_cfg.num_layers
                * model_cfg.num_kv_heads
                * max_pages
                * page
                * model_cfg.head_dim
                * jnp.dtype(model_cfg.dtype).itemsize
            )
            settings = dataclasses.replace(
                settings,
                num_slots=memory_slots(
                    settings.num_slots,
                    rows,
                    sampling.prompt_group,
                    slot_bytes,
                    free_device_bytes(mesh),
                    settings.memory_fraction,
                ),
            )
            self.settings = settings
        slots = settings.num_slots
        self.pool = PagePool(slots * max_pages, page, slots, max_pages)
        self.scratch = self.pool.num_pages  # one page past the pool: where free and ended slots write
        shape = (model_cfg.num_kv_heads, self.scratch + 1, page, model_cfg.head_dim)
        self.kv_pages = _zero_pages(shape, model_cfg.dtype, model_cfg.num_layers, mesh)
        self.attention = decode_attention(model_cfg.head_dim, page)
        self.window = max((len(s) for s in turns.sequences), default=0) if turns is not None else 0
        self.prompt_lengths = prompt_valid.sum(axis=1).astype(np.int32)
        self.slot_row = np.full(slots, -1, np.int64)
        self.lengths, self.last_token = np.zeros(slots, np.int32), np.zeros(slots, np.int32)
        self.active, self.paused = np.zeros(slots, bool), np.zeros(slots, bool)
        self.generated = np.zeros(slots, np.int32)
        self.pending: dict[int, np.ndarray] = {}  # slot -> reply tokens not yet fed
        self.tokens = np.full((rows, max_new), sampling.pad_id, np.int32)
        self.logprobs = np.zeros((rows, max_new), np.float32)
        # top-k / top-p: each token's log-prob under the full distribution too (else they are `logprobs`)
        self.full_logprobs = np.zeros((rows, max_new), np.float32) if sampling.truncates else None
        self.mask = np.zeros((rows, max_new), bool)
        self.sampled = np.zeros((rows, max_new), bool)
        self.versions = np.zeros((rows, max_new), np.int32)
        self.stats = EngineStats(pool_pages=self.pool.num_pages)
        self.waiting = list(range(0, rows, sampling.prompt_group))  # the first row of each group, in order
        self.prefilling: list[_Prefill] = []  # arrivals whose long prompts are prefilled piece by piece, oldest first
        self.rows_left: dict[int, int] = {}  # with a gate: a group in flight (its first row) -> rows not ended

    def generate(self) -> tuple[GenerationResult, EngineStats]:
        while True:
            arrivals = self.admit()
            fused = None  # a call's only admission runs in one program with the first chunk
            if arrivals is not None:
                if (
                    not self.queue_open()
                    and self.turns is None
                    and not self.in_flight
                    and not self.active.any()
                    and not self.prefilling
                ):
                    self.start(arrivals.rows, arrivals.slots)
                    fused = arrivals
                else:
                    self.prefill(arrivals)
            if self.prefilling:
                self.prefill_piece()
            if self.turns is not None:
                self.answer_turns()
            if not self.active.any():
                if not self.queue_open() and not self.prefilling:
                    break
                continue
            self.reserve()
            self.decode(fused)
        lengths = self.mask.sum(axis=1).astype(np.int32)
        result = GenerationResult(
            tokens=self.tokens,
            logprobs=self.logprobs,
            mask=self.mask,
            lengths=lengths,
            decode_steps=int(lengths.max()) if len(lengths) else 0,
            token_versions=self.versions,
            sampled=self.sampled if self.turns is not None else None,
            full_logprobs=self.logprobs if self.full_logprobs is None else self.full_logprobs,
        )
        return result, self.stats

    def newest_weights(self) -> None:
        """In flight: take the newest weights (before an admission's prefill or a chunk)."""
        if self.in_flight and not self.fetched:
            self.params, self.version = self.weights()
        self.fetched = False

    def queue_open(self) -> bool:
        """Groups wait that may still enter: the gate (if any) allows more once the groups in flight
        have ended."""
        return bool(self.waiting) and (self.gate is None or self.gate.admit_limit(0) > 0)

    def end(self, slots: np.ndarray) -> None:
        """The sequences of `slots` ended: their pages go back, the slots take arrivals; a group
        whose rows have all ended goes to the gate."""
        if not len(slots):
            return
        if self.gate is not None:
            group = self.sampling.prompt_group
            for row in self.slot_row[slots]:
                first = int(row) - int(row) % group
                self.rows_left[first] -= 1
                if not self.rows_left[first]:
                    del self.rows_left[first]
                    rows = slice(first, first + group)
                    self.gate.ended(first, self.tokens[rows].copy(), self.mask[rows].copy())
        self.pool.release(slots)
        self.slot_row[slots], self.active[slots], self.paused[slots] = -1, False, False
        for slot in slots if self.pending else ():
            self.pending.pop(int(slot), None)

    # 1. admit whole groups into free slots
    def admit(self) -> _Arrivals | None:
        """Take the waiting groups the free slots hold and give them their pages: the prefill
        program's arguments (`prefill` runs it; `start` leaves it to the first chunk)."""
        group, pool, page = self.sampling.prompt_group, self.pool, self.pool.page_tokens
        free = np.flatnonzero(self.slot_row < 0)
        count = min(len(self.waiting), len(free) // group)
        if self.gate is not None and count:
            count = min(count, self.gate.admit_limit(len(self.rows_left)))
        if not count:
            return None
        firsts, self.waiting = self.waiting[:count], self.waiting[count:]
        if self.gate is not None:
            self.rows_left.update((first, group) for first in firsts)
        slots = free[: count * group]
        rows = (np.asarray(firsts, np.int64)[:, None] + np.arange(group)).reshape(-1)
        self.stats.prefills += 1
        padded = 1 << (count - 1).bit_length()  # power-of-two prefill batches: few compiled shapes
        width = self.prompt_tokens.shape[1]
        lengths = self.prompt_lengths[firsts].astype(np.int64)
        prompt_pages, own_tails = pool.admit_groups(slots.reshape(count, group), lengths)
        piece = self.settings.prefill_chunk_tokens
        if piece and width > piece:  # prompts this long in the call: every arrival's prefill goes in pieces
            self.slot_row[slots] = rows  # taken: they start once their prompt's last piece has run
            last_pages = np.take_along_axis(prompt_pages, ((lengths - 1) // page)[:, None], axis=1)[:, 0]
            self.prefilling.append(
                _Prefill(
                    rows,
                    slots,
                    np.asarray(firsts, np.int64),
                    lengths.astype(np.int32),
                    np.where(lengths % page > 0, last_pages, -1),
                    own_tails,
                    padded,
                )
            )
            return None
        token = np.arange(width)[None, :] - (width - lengths)[:, None]  # each column's token; < 0: padding
        valid = token >= 0
        token = np.maximum(token, 0)
        pages = np.full((padded, width), self.scratch, np.int32)
        offsets = np.zeros((padded, width), np.int32)
        pages[:count] = np.where(valid, np.take_along_axis(prompt_pages, token // page, axis=1), self.scratch)
        offsets[:count] = np.where(valid, token % page, 0)
        # the tail (tokens full .. length - 1 of a partly filled last page) again in each other slot's own page
        full = lengths // page * page
        in_tail = np.arange(page)[None, :] < (lengths - full)[:, None]  # [count, T]
        tail_columns = np.zeros((padded, page), np.int32)
        tail_columns[:count] = np.where(in_tail, width - lengths[:, None] + full[:, None] + np.arange(page), 0)
        tail_pages = np.full((padded, group - 1, page), self.scratch, np.int32)
        tail_pages[:count] = np.where(in_tail[:, None, :], own_tails[:, :, None], self.scratch)
        uniforms = np.zeros(padded * group, np.float32)
        uniforms[: len(rows)] = self.uniforms[0, rows]
        firsts = firsts + [firsts[0]] * (padded - count)  # padding rows repeat a real prompt, written nowhere
        args = (
            self.prompt_tokens[firsts],
            self.prompt_valid[firsts],
            pages,
            offsets,
            tail_columns,
            tail_pages,
            uniforms,
        )
        return _Arrivals(rows, slots, args)

    def prefill(self, arrivals: _Arrivals) -> None:
        """Run the admission program on its own (while other slots decode, or with turns): prefill
        the arrivals' prompts into their pages (`PagePool.admit_groups`: the full pages shared, the
        partly filled last one written once per slot) and sample token 0 of each completion."""
        start = time.perf_counter()
        self.newest_weights()
        self.kv_pages, token0, logprob0, full0 = programs.admit(
            self.graph, self.params, self.kv_pages, *arrivals.args, self.sampling
        )
        token0, logprob0, full0 = tree_to_host((token0, logprob0, full0))
        self.took_prefill_time(time.perf_counter() - start)
        n = len(arrivals.rows)
        self.took_token0(arrivals.rows, arrivals.slots, token0[:n], logprob0[:n], None if full0 is None else full0[:n])

    def prefill_piece(self) -> None:
        """The next piece of the oldest chunked prefill (`programs.prefill_piece`): each of its prompts'
        next prefill_chunk_tokens tokens (the piece as wide as the most of them left, bucketed), after
        those already in its pages; the groups whose prompt ends in it take token 0 and start decoding
        at the next chunk, the others wait for more pieces. So the slots already decoding wait one
        piece between two chunks, not a whole long prompt."""
        start = time.perf_counter()
        self.newest_weights()
        job, piece, page, group = (
            self.prefilling[0],
            self.settings.prefill_chunk_tokens,
            self.pool.page_tokens,
            self.sampling.prompt_group,
        )
        count, width = len(job.firsts), self.prompt_tokens.shape[1]
        counts = np.zeros(job.padded, np.int32)
        counts[:count] = np.clip(job.lengths - job.done, 0, piece)
        step_tokens = piece
        piece = min(piece, bucket_width(int(counts.max()), page))  # a last piece only as wide as it needs
        done = np.zeros(job.padded, np.int32)
        done[:count] = np.where(counts[:count] > 0, job.done, 0)  # a prompt already prefilled reads nothing
        token = done[:count, None] + np.arange(piece)[None, :]  # [count, C]: the prompt token of each column
        columns = np.clip(width - job.lengths[:, None] + token, 0, width - 1)
        piece_tokens = np.zeros((job.padded, piece), np.int32)
        piece_tokens[:count] = np.where(
            np.arange(piece)[None, :] < counts[:count, None],
            np.take_along_axis(self.prompt_tokens[job.firsts], columns, axis=1),
            0,
        )
        tables = np.zeros((job.padded, self.pool.max_pages_per_slot), np.int32)
        tables[:count] = self.pool.tables[job.slots[::group]]
        ends = (counts[:count] > 0) & (job.done + counts[:count] == job.lengths)
        copies = ends & (job.tail_source >= 0)
        tail_source = np.full(job.padded, self.scratch, np.int32)
        tail_source[:count] = np.where(copies, job.tail_source, self.scratch)
        tail_pages = np.full((job.padded, group - 1), self.scratch, np.int32)
        tail_pages[:count] = np.where(copies[:, None], job.own_tails, self.scratch)
        uniforms = np.zeros(job.padded * group, np.float32)
        uniforms[: len(job.rows)] = self.uniforms[0, job.rows]
        self.kv_pages, token0, logprob0, full0 = programs.prefill_piece(
            self.graph,
            self.params,
            self.kv_pages,
            piece_tokens,
            tables,
            done,
            counts,
            tail_source,
            tail_pages,
            uniforms,
            self.sampling,
            self.view_width(int(done.max())),
            self.scratch,
        )
        token0, logprob0, full0 = tree_to_host((token0, logprob0, full0))
        self.took_prefill_time(time.perf_counter() - start)
        job.done += step_tokens
        if (job.done >= job.lengths).all():
            self.prefilling.pop(0)
        if ends.any():
            starting = np.repeat(ends, group)
            self.took_token0(
                job.rows[starting],
                job.slots[starting],
                token0[: len(job.rows)][starting],
                logprob0[: len(job.rows)][starting],
                None if full0 is None else full0[: len(job.rows)][starting],
            )

    def took_prefill_time(self, seconds: float) -> None:
        self.stats.prefill_s += seconds
        self.stats.longest_prefill_s = max(self.stats.longest_prefill_s, seconds)

    def took_token0(
        self,
        rows: np.ndarray,
        slots: np.ndarray,
        token0: np.ndarray,
        logprob0: np.ndarray,
        full0: np.ndarray | None = None,
    ) -> None:
        """Prefilled rows start in their slots with token 0 taken: active, or paused (a turn's end) or
        ended by it. full0: token 0's log-prob under the full distribution (sampling.truncates only)."""
        sampling = self.sampling
        self.start(rows, slots)
        self.took_first_tokens(rows, token0, logprob0, full0)
        self.last_token[slots] = token0
        is_eos = np.isin(token0, (sampling.eos_id, *sampling.extra_eos_ids))
        if self.turns is not None:
            one_token_stops = [s[0] for s in self.turns.sequences if len(s) == 1]
            self.paused[slots] = is_eos | np.isin(token0, one_token_stops)
            self.active[slots] = ~self.paused[slots]
            return
        ended = is_eos & sampling.stop_at_eos if sampling.max_new_tokens > 1 else np.ones(len(slots), bool)
        self.active[slots] = ~ended
        self.end(slots[ended])

    def start(self, rows: np.ndarray, slots: np.ndarray) -> None:
        """The slots hold their rows, each with its prompt and token 0 taken (active until token 0
        says otherwise)."""
        self.slot_row[slots], self.lengths[slots] = rows, self.prompt_lengths[rows]
        self.generated[slots], self.active[slots] = 1, True

    def took_first_tokens(
        self, rows: np.ndarray, token0: np.ndarray, logprob0: np.ndarray, full0: np.ndarray | None = None
    ) -> None:
        self.tokens[rows, 0], self.logprobs[rows, 0], self.mask[rows, 0] = token0, logprob0, True
        self.sampled[rows, 0], self.versions[rows, 0] = True, self.version
        if self.full_logprobs is not None:
            self.full_logprobs[rows, 0] = full0

    # 2. the host's side of a turn's end
    def answer_turns(self) -> None:
        max_new = self.sampling.max_new_tokens
        for slot in np.flatnonzero(self.paused):
            row, step = int(self.slot_row[slot]), int(self.generated[slot])
            reply = self.on_turn_end(row, step, self.tokens[row, :step].copy())
            self.paused[slot] = False
            if reply is None or step + len(reply) >= max_new:
                self.end(np.array([slot]))
                continue
            if len(reply):
                self.pending[int(slot)] = np.asarray(reply, np.int32)
            self.active[slot] = True

    # 3. grow every active slot's pages to hold what its chunk writes
    def reserve(self) -> None:
        running = np.flatnonzero(self.active)
        # the cache never holds the last sampled token: at most prompt + max_new - 1 tokens
        most = self.prompt_lengths[self.slot_row[running]] + self.sampling.max_new_tokens - 1
        self.pool.grow(running, np.minimum(self.lengths[running] + self.chunk_tokens(), most))
        self.stats.peak_pages_in_use = max(self.stats.peak_pages_in_use, self.pool.pages_in_use)

    def chunk_tokens(self) -> int:
        """settings.chunk_tokens; without EOS stops, once no group waits and nothing else needs the
        host between chunks (weights in flight, turns), the whole budget: every sequence runs to
        max_new_tokens, so no slot frees early and one chunk finishes the call."""
        if (
            not self.queue_open()
            and not self.prefilling
            and not self.in_flight
            and self.turns is None
            and not self.sampling.stop_at_eos
        ):
            return self.sampling.max_new_tokens
        return self.settings.chunk_tokens

    def view_tokens(self, running: np.ndarray) -> int:
        """The dense view's width for a "view" chunk: the running slots' longest length, bucketed (a
        few compiled widths: `bucket_width` in pages), at most a table's worth of pages."""
        if self.attention != "view":
            return 0
        return self.view_width(int(self.lengths[running].max()))

    def view_width(self, longest: int) -> int:
        """A dense view's width for slots of at most `longest` tokens: bucketed in pages (a few
        compiled widths), at most a table's worth of pages; 0 for none."""
        page = self.pool.page_tokens
        return min(bucket_width(longest, page), self.pool.max_pages_per_slot * page) if longest else 0

    def exit_rule(self, running: int, bucket: int) -> tuple[int, int]:
        """(exit_active, exit_steps_left) for `decode_chunk`: the chunk ends once at most exit_active
        of its `running` slots are still active, if exit_steps_left steps would still be left.
        While groups wait (that the gate, if any, lets in): as soon as enough slots are free for the
        next group to enter. Otherwise: once the rest fit a smaller bucket (`slot_bucket`), with half a
        chunk or more left (a shorter tail is not worth a host round trip and another compiled
        program). So a slot that ends mid-chunk idles a few steps, not until the chunk's end.
        (0, 0): run the whole chunk."""
        if self.waiting and (self.gate is None or self.gate.admit_limit(len(self.rows_left)) > 0):
            short = self.sampling.prompt_group - int((self.slot_row < 0).sum())  # > 0: admission just ran
            return max(running - short, 0), 0
        if not self.sampling.stop_at_eos and self.turns is None:
            return 0, 0  # every sequence runs to the budget: none ends early
        smaller = bucket - 1
        while smaller > 0 and slot_bucket(smaller, self.settings.num_slots) == bucket:
            smaller -= 1
        return smaller, max(self.settings.chunk_tokens // 2, 1)

    # 4. decode a chunk over the active slots, gathered into the smallest bucket that holds them
    def decode(self, arrivals: _Arrivals | None = None) -> None:
        """arrivals: the call's only admission, prefilled by the chunk's own program
        (`programs.admit_and_decode`)."""
        start_s = time.perf_counter()
        chunk, window = self.chunk_tokens(), self.window
        self.newest_weights()
        running = np.flatnonzero(self.active)
        n = len(running)
        bucket = slot_bucket(n, self.settings.num_slots)
        rows, starts = self.slot_row[running], self.generated[running]
        steps = starts[:, None] + np.arange(chunk)[None, :]  # [n, K]: the token index each step samples
        chunk_uniforms = np.zeros((bucket, chunk), np.float32)
        chunk_uniforms[:n] = np.where(
            steps < self.sampling.max_new_tokens,
            self.uniforms[np.minimum(steps, self.sampling.max_new_tokens - 1), rows[:, None]],
            0.0,
        )
        forced_tokens, forced = np.zeros((bucket, chunk), np.int32), np.zeros((bucket, chunk), bool)
        recent_tokens = np.full((bucket, window), self.sampling.pad_id, np.int32)
        recent_sampled = np.zeros((bucket, window), bool)
        for i in range(n) if self.turns is not None else ():
            reply = self.pending.get(int(running[i]))
            if reply is not None:
                forced_tokens[i, : len(reply[:chunk])], forced[i, : len(reply[:chunk])] = reply[:chunk], True
            if window:
                row, start = rows[i], starts[i]
                first = max(start - window, 0)
                recent_tokens[i, window - (start - first) :] = self.tokens[row, first:start]
                recent_sampled[i, window - (start - first) :] = self.sampled[row, first:start]
        picked = np.zeros(bucket, np.int64)
        picked[:n] = running
        in_bucket = np.arange(bucket) < n
        exit_active, exit_steps_left = map(np.int32, self.exit_rule(n, bucket))
        # numpy arguments go to the device with the call (no separate transfer per array)
        if arrivals is None:
            out = programs.decode_chunk(
                self.graph,
                self.params,
                self.kv_pages,
                self.pool.tables[picked],
                self.lengths[picked],
                self.last_token[picked],
                in_bucket,
                self.generated[picked],
                chunk_uniforms,
                forced_tokens,
                forced,
                recent_tokens,
                recent_sampled,
                exit_active,
                exit_steps_left,
                self.sampling,
                chunk,
                self.scratch,
                self.turns,
                self.attention,
                self.view_tokens(running),
            )
        else:
            positions = np.full(len(arrivals.args[-1]), bucket, np.int32)  # padding rows: out of range, dropped
            positions[: len(arrivals.slots)] = np.searchsorted(running, arrivals.slots)
            out = programs.admit_and_decode(
                self.graph,
                self.params,
                self.kv_pages,
                *arrivals.args,
                positions,
                self.pool.tables[picked],
                self.lengths[picked],
                self.generated[picked],
                chunk_uniforms,
                exit_active,
                exit_steps_left,
                self.sampling,
                chunk,
                self.scratch,
                self.attention,
                self.view_tokens(running),
            )
        self.kv_pages = out.pop("kv_pages")
        host = tree_to_host(out)
        if arrivals is not None:
            rows0 = arrivals.rows
            full0 = host["full_logprob0"][: len(rows0)] if "full_logprob0" in host else None
            self.took_first_tokens(rows0, host["token0"][: len(rows0)], host["logprob0"][: len(rows0)], full0)
        emitted = host["emitted"][:n]  # a prefix of each slot's steps: a slot that stops stays stopped
        self.stats.chunks += 1
        self.stats.slot_steps += bucket * int(host["steps"])
        self.stats.decode_tokens += int(emitted.sum())
        counts = emitted.sum(axis=1)
        out_rows, out_columns = np.repeat(rows, counts), steps[emitted]
        self.tokens[out_rows, out_columns] = host["tokens"][:n][emitted]
        self.logprobs[out_rows, out_columns] = host["logprobs"][:n][emitted]
        if self.full_logprobs is not None:
            self.full_logprobs[out_rows, out_columns] = host["full_logprobs"][:n][emitted]
        self.mask[out_rows, out_columns] = True
        self.sampled[out_rows, out_columns] = host["sampled"][:n][emitted]
        self.versions[out_rows, out_columns] = self.version
        for i, slot in enumerate(running if self.pending else ()):
            reply = self.pending.get(int(slot))
            if reply is not None:
                if counts[i] >= len(reply):
                    del self.pending[int(slot)]
                else:
                    self.pending[int(slot)] = reply[counts[i] :]
        self.lengths[running] = host["lengths"][:n]
        self.last_token[running] = host["last_token"][:n]
        self.generated[running] = host["generated"][:n]
        self.paused[running] = host["paused"][:n]
        still = host["active"][:n]
        # KV memory through the chunk, step by step: the pages held (reserved before it) against the
        # tokens they store, which grow by the tokens each step feeds
        steps_run = int(host["steps"])
        fed = np.cumsum(emitted.sum(axis=0)[:steps_run])
        self.stats.kv_positions_held += steps_run * self.pool.pages_in_use * self.pool.page_tokens
        self.stats.kv_tokens_stored += steps_run * self.pool.tokens_stored() + int(fed.sum())
        self.pool.advance(running, self.lengths[running])
        self.stats.decode_s += time.perf_counter() - start_s
        # 5. retire ended slots (a paused slot keeps its pages until its turn is answered)
        self.active[running] = still
        self.end(running[~still & ~self.paused[running]])


@dataclasses.dataclass
class _Prefill:
    """Arrivals whose prompts are prefilled in pieces: their rows and slots (G consecutive per group),
    each group's first row, prompt length, partly filled last page (-1: the prompt fills its pages)
    and the other slots' own pages for it [n, G - 1]; the prefill batch (n padded to a power of two)
    and the prompt tokens prefilled so far (`done`, the same for every prompt: pieces start at token
    0 of each)."""

    rows: np.ndarray
    slots: np.ndarray
    firsts: np.ndarray
    lengths: np.ndarray
    tail_source: np.ndarray
    own_tails: np.ndarray
    padded: int
    done: int = 0


@dataclasses.dataclass(frozen=True)
class _Arrivals:
    """Groups admitted together: their rows and slots (G consecutive per group) and the admission
    program's arguments (`programs.admit`)."""

    rows: np.ndarray
    slots: np.ndarray
    args: tuple


_MODEL_CONFIGS: dict[Any, Any] = {}


def _model_config(graph, params):
    """The model's config (its layers, KV heads, head size, dtype), kept per graph: merging a model
    to read it costs milliseconds, which every generation would pay."""
    if graph not in _MODEL_CONFIGS:
        _MODEL_CONFIGS[graph] = nnx.merge(graph.graphdef, params).cfg
    return _MODEL_CONFIGS[graph]


def _zero_pages(shape: tuple[int, ...], dtype, num_layers: int, mesh: Any) -> list[tuple[jax.Array, jax.Array]]:
    """Each layer's (keys, values) pages [KVH, P, page_tokens, D], zero, made by one program; on
    `mesh` (if any) with the KV heads split over its `tensor` axis where they divide, else replicated."""
    sharding = None
    if mesh is not None:
        tensor = dict(zip(mesh.axis_names, mesh.devices.shape)).get("tensor", 1)
        sharding = NamedSharding(
            mesh, PartitionSpec("tensor") if tensor > 1 and shape[0] % tensor == 0 else PartitionSpec()
        )
    return _zeros_jit(shape, jnp.dtype(dtype), num_layers, sharding)


@functools.partial(jax.jit, static_argnames=("shape", "dtype", "num_layers", "sharding"))
def _zeros_jit(shape, dtype, num_layers, sharding):
    zeros = [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(num_layers)]
    if sharding is None:
        return zeros
    return jax.lax.with_sharding_constraint(zeros, sharding)


def slot_bucket(active: int, slots: int) -> int:
    """The decode program's slot count for `active` active slots: the next power of two up to 8, then
    the next of 8 x (2, 3, 4, 6, 8, 12, ...) (`encoding.bucket_width`: about two sizes per doubling,
    each under 1.5x what it holds), never more than `slots`."""
    if active <= 8:
        return min(slots, 1 << max(active - 1, 0).bit_length())
    return min(slots, bucket_width(active, 8))

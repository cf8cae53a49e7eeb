"""Continuous batching over a paged KV cache: `generate_paged`, the one way the trainer generates
(rollouts sync and async, dynamic-sampling refills, multi-turn episodes, evaluation, the `generate`
command). A fixed number of decode slots is refilled as sequences end, instead of a static batch
that decodes until its longest completion ends. Same arguments and samples as the static reference
sampler `models.generate.generate`.

The host loop (`_Run`), between jitted chunks of `chunk_tokens` decode steps (`engine.programs`,
each taking its inputs as one pytree: `Admission`, `PrefillPiece`, `SlotBatch`); which groups enter
and how each chunk runs is the scheduler's (`engine.scheduler`):
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
     them (`scheduler.slot_bucket`; only their block tables move, the pages stay where they are), so the last
     long sequences of a step run in a small program rather than among idle slots. With in-flight
     weights the newest weights are taken before each chunk (and each admission). A chunk ends
     early once enough of its slots have ended for the next waiting group to enter, or, when none
     waits, for the rest to fit a smaller bucket with half a chunk or more to go
     (`Scheduler.exit_rule`): a
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
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from trainers.data.encoding import bucket_width
from trainers.engine import inputs, programs
from trainers.engine.outputs import Outputs
from trainers.engine.pages import PAGE_TOKENS, PagePool
from trainers.engine.programs import KVPages
from trainers.engine.scheduler import ChunkPlan, GroupGate, Scheduler
from trainers.engine.slots import Slots
from trainers.models.generate import GenerationResult, SamplingParams, StaticGraph, TurnEnd, TurnStops, static_graph
from trainers.models.paged_attention import default_implementation
from trainers.models.presets import ModelConfig
from trainers.parallel.host import to_host, tree_to_host

Weights = Callable[[], tuple[Any, int]]  # () -> (params, version): see `rollout.spec.Weights`


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


def grown_into_memory(
    settings: EngineSettings, model_cfg: Any, rows: int, group: int, max_pages: int, mesh: Any
) -> EngineSettings:
    """`settings` with its slots grown into the device's free memory (`memory_slots`), each slot's
    KV pages `max_pages` pages of the model's keys and values in its dtype."""
    m = model_cfg
    slot_bytes = (
        2 * m.num_layers * m.num_kv_heads * max_pages * settings.page_tokens * m.head_dim * jnp.dtype(m.dtype).itemsize
    )
    free = free_device_bytes(mesh)
    slots = memory_slots(settings.num_slots, rows, group, slot_bytes, free, settings.memory_fraction)
    return dataclasses.replace(settings, num_slots=slots)


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

    def took_prefill(self, seconds: float) -> None:
        self.prefill_s += seconds
        self.longest_prefill_s = max(self.longest_prefill_s, seconds)

    def took_chunk(self, bucket: int, steps_run: int, emitted: np.ndarray, pool: PagePool) -> None:
        """A decode chunk over `bucket` slots ran `steps_run` steps; emitted [n, K]: the tokens its
        running slots took. The KV memory through it, step by step: the pages held (reserved before
        it) against the tokens they store, which grow by the tokens each step feeds."""
        self.chunks += 1
        self.slot_steps += bucket * steps_run
        self.decode_tokens += int(emitted.sum())
        fed = np.cumsum(emitted.sum(axis=0)[:steps_run])
        self.kv_positions_held += steps_run * pool.pages_in_use * pool.page_tokens
        self.kv_tokens_stored += steps_run * pool.tokens_stored() + int(fed.sum())

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


def _fixed(params: Any) -> Weights:
    return lambda: (params, 0)


def generate_paged(
    graphdef: nnx.GraphDef,
    weights: Weights | nnx.State,
    prompt_tokens: np.ndarray | jax.Array,
    prompt_valid: np.ndarray | jax.Array,
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
        graphdef: nnx.GraphDef,
        weights: Weights,
        prompt_tokens: np.ndarray,
        prompt_valid: np.ndarray,
        uniforms: np.ndarray,
        sampling: SamplingParams,
        settings: EngineSettings,
        in_flight: bool,
        turns: TurnStops | None,
        on_turn_end: TurnEnd | None,
        mesh: Any,
        gate: GroupGate | None = None,
    ) -> None:
        self.weights, self.in_flight, self.turns, self.on_turn_end = weights, in_flight, turns, on_turn_end
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
            settings = self.settings = grown_into_memory(
                settings, model_cfg, rows, sampling.prompt_group, max_pages, mesh
            )
        slots = settings.num_slots
        self.pool = PagePool(slots * max_pages, page, slots, max_pages)
        self.scratch = self.pool.num_pages  # one page past the pool: where free and ended slots write
        shape = (model_cfg.num_kv_heads, self.scratch + 1, page, model_cfg.head_dim)
        self.kv_pages = _zero_pages(shape, model_cfg.dtype, model_cfg.num_layers, mesh)
        self.attention = decode_attention(model_cfg.head_dim, page)
        self.window = max((len(s) for s in turns.sequences), default=0) if turns is not None else 0
        self.prompt_lengths = prompt_valid.sum(axis=1).astype(np.int32)
        self.slots = Slots.empty(slots)
        self.out = Outputs.empty(rows, max_new, sampling.pad_id, sampling.truncates)
        self.stats = EngineStats(pool_pages=self.pool.num_pages)
        self.scheduler = Scheduler(
            rows,
            sampling.prompt_group,
            slots,
            settings.chunk_tokens,
            max_new,
            runs_to_budget=not sampling.stop_at_eos and turns is None,
            gate=gate,
        )
        # arrivals whose long prompts are prefilled piece by piece, oldest first
        self.prefilling: list[inputs.ChunkedPrefill] = []

    def generate(self) -> tuple[GenerationResult, EngineStats]:
        while True:
            arrivals = self.admit()
            fused = None  # a call's only admission runs in one program with the first chunk
            if arrivals is not None:
                if (
                    not self.scheduler.queue_open()
                    and self.turns is None
                    and not self.in_flight
                    and not self.slots.active.any()
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
            if not self.slots.active.any():
                if not self.scheduler.queue_open() and not self.prefilling:
                    break
                continue
            plan = self.scheduler.plan_chunk(
                self.slots.active,
                int((self.slots.row < 0).sum()),
                host_between_chunks=bool(self.prefilling) or self.in_flight or self.turns is not None,
            )
            self.reserve(plan)
            self.decode(plan, fused)
        return self.out.result(self.turns is not None), self.stats

    def newest_weights(self) -> None:
        """In flight: take the newest weights (before an admission's prefill or a chunk)."""
        if self.in_flight and not self.fetched:
            self.params, self.version = self.weights()
        self.fetched = False

    def end(self, slots: np.ndarray) -> None:
        """The sequences of `slots` ended: their pages go back, the slots take arrivals; a group
        whose rows have all ended goes to the gate."""
        if not len(slots):
            return
        self.scheduler.ended(self.slots.row[slots], self.out.tokens, self.out.mask)
        self.pool.release(slots)
        self.slots.release(slots)

    # 1. admit whole groups into free slots
    def admit(self) -> _Arrivals | None:
        """Take the waiting groups the free slots hold and give them their pages: the prefill
        program's arguments (`prefill` runs it; `start` leaves it to the first chunk)."""
        group, pool, page = self.sampling.prompt_group, self.pool, self.pool.page_tokens
        free = np.flatnonzero(self.slots.row < 0)
        firsts = self.scheduler.admit(len(free))
        if not firsts:
            return None
        count = len(firsts)
        slots = free[: count * group]
        rows = (np.asarray(firsts, np.int64)[:, None] + np.arange(group)).reshape(-1)
        self.stats.prefills += 1
        width = self.prompt_tokens.shape[1]
        lengths = self.prompt_lengths[firsts].astype(np.int64)
        prompt_pages, own_tails = pool.admit_groups(slots.reshape(count, group), lengths)
        piece = self.settings.prefill_chunk_tokens
        if piece and width > piece:  # prompts this long in the call: every arrival's prefill goes in pieces
            self.slots.row[slots] = rows  # taken: they start once their prompt's last piece has run
            self.prefilling.append(inputs.chunked_prefill(rows, slots, firsts, lengths, prompt_pages, own_tails, page))
            return None
        arrivals = inputs.admission(
            self.prompt_tokens,
            self.prompt_valid,
            self.uniforms[0],
            firsts,
            lengths,
            prompt_pages,
            own_tails,
            page,
            self.scratch,
        )
        return _Arrivals(rows, slots, arrivals)

    def prefill(self, arrivals: _Arrivals) -> None:
        """Run the admission program on its own (while other slots decode, or with turns): prefill
        the arrivals' prompts into their pages (`PagePool.admit_groups`: the full pages shared, the
        partly filled last one written once per slot) and sample token 0 of each completion."""
        start = time.perf_counter()
        self.newest_weights()
        self.kv_pages, token0, logprob0, full0 = programs.admit(
            self.graph, self.params, self.kv_pages, arrivals.admission, self.sampling
        )
        token0, logprob0, full0 = tree_to_host((token0, logprob0, full0))
        self.stats.took_prefill(time.perf_counter() - start)
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
        job, group = self.prefilling[0], self.sampling.prompt_group
        step_tokens = self.settings.prefill_chunk_tokens
        piece, ends = inputs.prefill_piece(
            job,
            self.prompt_tokens,
            self.pool.tables[job.slots[::group]],
            self.uniforms[0],
            step_tokens,
            self.pool.page_tokens,
            self.scratch,
        )
        self.kv_pages, token0, logprob0, full0 = programs.prefill_piece(
            self.graph,
            self.params,
            self.kv_pages,
            piece,
            self.sampling,
            self.view_width(int(piece.done.max())),
            self.scratch,
        )
        token0, logprob0, full0 = tree_to_host((token0, logprob0, full0))
        self.stats.took_prefill(time.perf_counter() - start)
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
        self.out.take(rows, 0, token0, logprob0, full0, True, self.version)
        self.slots.last_token[slots] = token0
        is_eos = np.isin(token0, (sampling.eos_id, *sampling.extra_eos_ids))
        if self.turns is not None:
            one_token_stops = [s[0] for s in self.turns.sequences if len(s) == 1]
            self.slots.paused[slots] = is_eos | np.isin(token0, one_token_stops)
            self.slots.active[slots] = ~self.slots.paused[slots]
            return
        ended = is_eos & sampling.stop_at_eos if sampling.max_new_tokens > 1 else np.ones(len(slots), bool)
        self.slots.active[slots] = ~ended
        self.end(slots[ended])

    def start(self, rows: np.ndarray, slots: np.ndarray) -> None:
        """The slots hold their rows, each with its prompt and token 0 taken (active until token 0
        says otherwise)."""
        self.slots.start(slots, rows, self.prompt_lengths[rows])

    # 2. the host's side of a turn's end
    def answer_turns(self) -> None:
        max_new = self.sampling.max_new_tokens
        for slot in np.flatnonzero(self.slots.paused):
            row, step = int(self.slots.row[slot]), int(self.slots.generated[slot])
            reply = self.on_turn_end(row, step, self.out.tokens[row, :step].copy())
            self.slots.paused[slot] = False
            if reply is None or step + len(reply) >= max_new:
                self.end(np.array([slot]))
                continue
            if len(reply):
                self.slots.pending[int(slot)] = np.asarray(reply, np.int32)
            self.slots.active[slot] = True

    # 3. grow every active slot's pages to hold what its chunk writes
    def reserve(self, plan: ChunkPlan) -> None:
        running = plan.running
        # the cache never holds the last sampled token: at most prompt + max_new - 1 tokens
        most = self.prompt_lengths[self.slots.row[running]] + self.sampling.max_new_tokens - 1
        self.pool.grow(running, np.minimum(self.slots.lengths[running] + plan.chunk_tokens, most))
        self.stats.peak_pages_in_use = max(self.stats.peak_pages_in_use, self.pool.pages_in_use)

    def view_width(self, longest: int) -> int:
        """A dense view's width for slots of at most `longest` tokens: bucketed in pages (a few
        compiled widths: `bucket_width`), at most a table's worth of pages; 0 for none."""
        page = self.pool.page_tokens
        return min(bucket_width(longest, page), self.pool.max_pages_per_slot * page) if longest else 0

    # 4. decode a chunk over the active slots, gathered into the smallest bucket that holds them
    def decode(self, plan: ChunkPlan, arrivals: _Arrivals | None = None) -> None:
        """arrivals: the call's only admission, prefilled by the chunk's own program
        (`programs.admit_and_decode`)."""
        start_s = time.perf_counter()
        self.newest_weights()
        running, bucket, chunk = plan.running, plan.bucket, plan.chunk_tokens
        n = len(running)
        rows = self.slots.row[running]
        steps = self.slots.generated[running][:, None] + np.arange(chunk)[None, :]  # [n, K]: each step's token index
        slots = self.slots.batch(
            plan, self.pool.tables, self.uniforms, self.out, self.window, self.sampling.pad_id, self.turns is not None
        )
        # a "view" chunk gathers the running slots' tokens into a dense view as wide as the longest
        view = self.view_width(int(self.slots.lengths[running].max())) if self.attention == "view" else 0
        program = programs.DecodeProgram(self.sampling, chunk, self.scratch, self.turns, self.attention, view)
        if arrivals is None:
            out = programs.decode_chunk(self.graph, self.params, self.kv_pages, slots, program)
        else:
            positions = np.full(len(arrivals.admission.uniforms), bucket, np.int32)  # padding rows: dropped
            positions[: len(arrivals.slots)] = np.searchsorted(running, arrivals.slots)
            out = programs.admit_and_decode(
                self.graph, self.params, self.kv_pages, arrivals.admission, positions, slots, program
            )
        self.kv_pages = out.pop("kv_pages")
        host = tree_to_host(out)
        if arrivals is not None:
            rows0 = arrivals.rows
            full0 = host["full_logprob0"][: len(rows0)] if "full_logprob0" in host else None
            self.out.take(
                rows0, 0, host["token0"][: len(rows0)], host["logprob0"][: len(rows0)], full0, True, self.version
            )
        emitted = host["emitted"][:n]  # a prefix of each slot's steps: a slot that stops stays stopped
        counts = emitted.sum(axis=1)
        out_rows, out_columns = np.repeat(rows, counts), steps[emitted]
        self.out.take(
            out_rows,
            out_columns,
            host["tokens"][:n][emitted],
            host["logprobs"][:n][emitted],
            host["full_logprobs"][:n][emitted] if "full_logprobs" in host else None,
            host["sampled"][:n][emitted],
            self.version,
        )
        still = self.slots.took_chunk(running, counts, host)
        self.stats.took_chunk(bucket, int(host["steps"]), emitted, self.pool)
        self.pool.advance(running, self.slots.lengths[running])
        self.stats.decode_s += time.perf_counter() - start_s
        # 5. retire ended slots (a paused slot keeps its pages until its turn is answered)
        self.slots.active[running] = still
        self.end(running[~still & ~self.slots.paused[running]])


@dataclasses.dataclass(frozen=True)
class _Arrivals:
    """Groups admitted together: their rows and slots (G consecutive per group) and the admission
    program's inputs (`programs.admit`)."""

    rows: np.ndarray
    slots: np.ndarray
    admission: programs.Admission


_MODEL_CONFIGS: dict[Any, Any] = {}


def _model_config(graph: StaticGraph, params: Any) -> ModelConfig:
    """The model's config (its layers, KV heads, head size, dtype), kept per graph: merging a model
    to read it costs milliseconds, which every generation would pay."""
    if graph not in _MODEL_CONFIGS:
        _MODEL_CONFIGS[graph] = nnx.merge(graph.graphdef, params).cfg
    return _MODEL_CONFIGS[graph]


def _zero_pages(shape: tuple[int, ...], dtype: Any, num_layers: int, mesh: Any) -> KVPages:
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
def _zeros_jit(shape: tuple[int, ...], dtype: Any, num_layers: int, sharding: NamedSharding | None) -> KVPages:
    zeros = [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(num_layers)]
    if sharding is None:
        return zeros
    return jax.lax.with_sharding_constraint(zeros, sharding)

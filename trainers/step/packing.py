"""Sequence packing: a micro-batch's sequences laid end to end in rows of one length, so that the
log-prob passes and the update compute their tokens and little padding.

A micro-batch of S sequences (prompts left-padded [S, Lp], completions right-padded [S, Lc])
becomes R rows of L token positions; an update's A micro-batches are packed together and their rows
dealt evenly over them (`pack_micro_batches`). Consecutive sequences with the same prompt (GRPO's G
completions of one prompt) form a *unit* [prompt, c1, ..., ck] in a row: the prompt once, then each
completion after it. Completions go into rows first-fit, longest first, joining their prompt's unit
in a row where it has room, else starting a unit with its own copy of the prompt (`_placed`).

Each position carries its unit's number in the row (`segments`, 1-based; 0 = padding) and its
member (`members`: 0 the prompt, i the unit's i-th completion). A query attends to the keys
before it in its own unit that are the prompt or its own completion
(`transformer.segment_attention_mask`), and
positions restart in every unit (prompt 0 .. P-1, each completion P, P + 1, ...): each completion
sees exactly what it sees unpacked, so its log-probs are those of the unpacked pass.

The completion tokens come back through three [R, Tr] arrays: `predictor`, the position in the row
whose hidden state predicts a completion token (the prompt's last token for token 0, the token
before it after that); `target`, that token; and `slot`, where its log-prob goes in the
micro-batch's [S, Lc] layout (s * Lc + j; S * Lc, out of range, for a padding entry).

Pure NumPy; the shapes are bucketed (`packed_shape`) so that a run compiles few of them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

ROW_TOKEN_PARTS = 4  # row lengths are multiples of a quarter of (prompt width + completion width)
TARGET_PARTS = 8  # a row's completion-token count is bucketed in eighths of its length
TOKEN_MULTIPLE = 16
COUNT_BITS = 4  # row and sequence counts are bucketed to 4 significant bits (`_nice_count`)
PACKING_GAIN = 0.8
"""Pack where the packed rows compute at most this share of the unpacked pass's positions: packing
costs some attention over whole rows, and fixed-length batches have nothing to remove."""


@dataclasses.dataclass(frozen=True)
class PackedShape:
    """rows R, row_tokens L and row_targets Tr (completion tokens per row) of a packed micro-batch."""

    rows: int
    row_tokens: int
    row_targets: int

    def union(self, other: PackedShape) -> PackedShape:
        return PackedShape(
            max(self.rows, other.rows), max(self.row_tokens, other.row_tokens), max(self.row_targets, other.row_targets)
        )


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """A packed micro-batch; every array [R, L] or [R, Tr], int32 (see the module docstring)."""

    tokens: np.ndarray
    positions: np.ndarray
    segments: np.ndarray
    members: np.ndarray
    predictor: np.ndarray
    target: np.ndarray
    slot: np.ndarray
    real_tokens: int  # the positions that hold a token (the prompt copies included)

    @property
    def shape(self) -> PackedShape:
        return PackedShape(self.tokens.shape[0], self.tokens.shape[1], self.predictor.shape[1])

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays the packed log-prob pass and update read, by their batch names."""
        return {f"packed_{f}": getattr(self, f) for f in ("tokens", "positions", "segments", "members")} | {
            "packed_predictor": self.predictor,
            "packed_target": self.target,
            "packed_slot": self.slot,
        }


@dataclasses.dataclass(frozen=True)
class _Unit:
    prompt: np.ndarray  # the prompt's valid tokens
    completions: tuple[tuple[int, np.ndarray], ...]  # (sequence index, its valid completion tokens)

    @property
    def length(self) -> int:
        return len(self.prompt) + sum(len(c) for _, c in self.completions)

    @property
    def targets(self) -> int:
        return sum(len(c) for _, c in self.completions)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _nice_count(n: int, multiple: int) -> int:
    """The smallest count >= n that is `multiple` times a number of at most COUNT_BITS significant
    bits (1 .. 16, then 18, 20, .. 32, 36, 40, ..): few distinct shapes, at most a ninth of them empty."""
    units = max(1, -(-n // multiple))
    step = 1 << max(0, units.bit_length() - COUNT_BITS)
    return _round_up(units, step) * multiple


def _lengths(prompt_valid: np.ndarray, completion_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each sequence's prompt and completion token counts; ValueError unless every prompt is
    left-padded and every completion right-padded (no hole: packing drops padding positions)."""
    prompt_valid = np.asarray(prompt_valid, bool)
    completion_mask = np.asarray(completion_mask, bool)
    prompt_lengths = prompt_valid.sum(axis=1)
    completion_lengths = completion_mask.sum(axis=1)
    width_p, width_c = prompt_valid.shape[1], completion_mask.shape[1]
    if not np.array_equal(prompt_valid, np.arange(width_p)[None, :] >= (width_p - prompt_lengths)[:, None]):
        raise ValueError("packing needs left-padded prompts")
    if not np.array_equal(completion_mask, np.arange(width_c)[None, :] < completion_lengths[:, None]):
        raise ValueError("packing needs right-padded completions without holes")
    return prompt_lengths, completion_lengths


def _placed(
    prompt_tokens: np.ndarray,
    prompt_valid: np.ndarray,
    completion_tokens: np.ndarray,
    completion_mask: np.ndarray,
    row_tokens: int,
    share_prompts: bool = True,
) -> list[list[_Unit]]:
    """The sequences in rows of `row_tokens`, first-fit, longest completion first: a completion goes
    into the first row that holds its prompt's unit and has room for it (no new copy of the prompt),
    else into the first row with room for the prompt and it (a new unit), else into a new row.
    Without `share_prompts` every completion starts a unit of its own (one sequence per segment).
    A prompt is the same for a run of consecutive sequences with equal prompts (GRPO's group).
    Sequences without a completion token are left out; ValueError for a sequence longer than a row."""
    prompt_lengths, completion_lengths = _lengths(prompt_valid, completion_mask)
    width_p = prompt_tokens.shape[1]
    prompts: list[np.ndarray] = []
    prompt_of = np.zeros(len(prompt_tokens), np.int64)
    for s in range(len(prompt_tokens)):
        own = np.asarray(prompt_tokens[s, width_p - int(prompt_lengths[s]) :], np.int32)
        if not prompts or not np.array_equal(own, prompts[-1]):
            prompts.append(own)
        prompt_of[s] = len(prompts) - 1
    rows: list[dict[tuple[int, int], list[tuple[int, np.ndarray]]]] = []  # (prompt, unit) -> completions
    free = np.zeros(len(prompt_tokens), np.int64)  # room left in each row (at most one row a sequence)
    rows_of_prompt: dict[int, list[int]] = {}
    for s in sorted(np.flatnonzero(completion_lengths > 0).tolist(), key=lambda s: -completion_lengths[s]):
        g, n = int(prompt_of[s]), int(completion_lengths[s])
        p = len(prompts[g])
        if p + n > row_tokens:
            raise ValueError(f"a sequence of {p + n} tokens does not fit in rows of {row_tokens}")
        target = next((r for r in rows_of_prompt.get(g, ()) if free[r] >= n), None) if share_prompts else None
        cost = n
        if target is None:
            open_rows = np.flatnonzero(free[: len(rows)] >= p + n)
            target = int(open_rows[0]) if len(open_rows) else len(rows)
            if target == len(rows):
                rows.append({})
                free[target] = row_tokens
            rows_of_prompt.setdefault(g, []).append(target)
            cost = p + n
        unit = (g, 0 if share_prompts else s)  # not shared: each sequence a unit of its own
        rows[target].setdefault(unit, []).append((s, np.asarray(completion_tokens[s, :n], np.int32)))
        free[target] -= cost
    return [
        [_Unit(prompts[g], tuple(sorted(members, key=lambda m: m[0]))) for (g, _), members in sorted(row.items())]
        for row in rows
    ]


def row_tokens_for(longest_tokens: int, prompt_width: int, completion_width: int) -> int:
    """The row length for a longest sequence of `longest_tokens`: the shortest of a quarter, a half,
    three quarters and the whole of the unpacked row (prompt + completion width), each rounded up
    to 16 tokens, that holds it."""
    width = prompt_width + completion_width
    for part in range(1, ROW_TOKEN_PARTS + 1):
        candidate = _round_up(max(1, -(-part * width // ROW_TOKEN_PARTS)), TOKEN_MULTIPLE)
        if candidate >= longest_tokens:
            return candidate
    return _round_up(longest_tokens, TOKEN_MULTIPLE)


def packed_shape(
    prompt_tokens: np.ndarray,
    prompt_valid: np.ndarray,
    completion_tokens: np.ndarray,
    completion_mask: np.ndarray,
    row_multiple: int = 1,
    row_tokens: int | None = None,
) -> PackedShape:
    """The bucketed shape that holds this micro-batch: rows of `row_tokens` (None: the longest
    sequence, prompt + completion, rounded up as `row_tokens_for`), as many as first-fit needs
    rounded up to `row_multiple` (the devices a micro-batch is split over) times a count of few
    sizes (`_nice_count`); and the most completion tokens a row holds, in eighths of the row.
    ValueError as `pack` (a prompt not left-padded, a completion with a hole)."""
    prompt_lengths, completion_lengths = _lengths(prompt_valid, completion_mask)
    if row_tokens is None:
        live = completion_lengths > 0
        longest = int((prompt_lengths + completion_lengths)[live].max()) if live.any() else 1
        row_tokens = row_tokens_for(longest, prompt_tokens.shape[1], completion_tokens.shape[1])
    rows = _placed(prompt_tokens, prompt_valid, completion_tokens, completion_mask, row_tokens)
    targets = max((sum(u.targets for u in row) for row in rows), default=1)
    target_quantum = max(1, _round_up(-(-row_tokens // TARGET_PARTS), TOKEN_MULTIPLE))
    return PackedShape(
        rows=_nice_count(max(len(rows), 1), row_multiple),
        row_tokens=row_tokens,
        row_targets=min(_round_up(targets, target_quantum), row_tokens),
    )


def unpacked_positions(prompt_width: int, sequences: int, completion_width: int, prompt_group: int) -> int:
    """Token positions the unpacked pass computes: every row's prompt and completion columns, the
    prompt once per group of `prompt_group` rows when they share it (`plan.shared_prompt_group`)."""
    return sequences // prompt_group * prompt_width + sequences * completion_width


def real_tokens(prompt_valid: np.ndarray, completion_mask: np.ndarray, prompt_group: int) -> int:
    """The tokens among those positions: valid prompt tokens (once per group) and completion tokens."""
    return int(np.asarray(prompt_valid)[::prompt_group].sum() + np.asarray(completion_mask).sum())


def _least_tokens(prompt_tokens, prompt_valid, completion_tokens, completion_mask) -> int:
    """The tokens any packing of the micro-batch holds: every completion token, and each run of
    consecutive sequences with the same prompt's prompt tokens once."""
    first = np.ones(len(prompt_tokens), bool)
    first[1:] = (prompt_tokens[1:] != prompt_tokens[:-1]).any(axis=1) | (prompt_valid[1:] != prompt_valid[:-1]).any(
        axis=1
    )
    return int(np.asarray(prompt_valid)[first].sum() + np.asarray(completion_mask).sum())


def pack(
    prompt_tokens: np.ndarray,
    prompt_valid: np.ndarray,
    completion_tokens: np.ndarray,
    completion_mask: np.ndarray,
    shape: PackedShape,
    row_multiple: int = 1,
) -> PackedRows:
    """The micro-batch packed into `shape` (one that `packed_shape` gave for it or for a larger
    one). With row_multiple = d > 1 the rows are dealt so that each of d consecutive blocks of R / d
    rows (what each device gets) holds about the same number of tokens.

    ValueError when it does not fit, or when a prompt is not left-padded or a completion has a hole
    (packing drops padding positions, so such a batch runs unpacked)."""
    sequences, completion_width = completion_tokens.shape
    rows = _placed(prompt_tokens, prompt_valid, completion_tokens, completion_mask, shape.row_tokens)
    if len(rows) > shape.rows:
        raise ValueError(f"the micro-batch needs more than {shape.rows} rows of {shape.row_tokens} tokens")
    rows += [[] for _ in range(shape.rows - len(rows))]
    if row_multiple > 1:
        rows = _dealt(rows, row_multiple)
    return _fill(rows, shape, {s: s for s in range(sequences)}, sequences, completion_width)


def _fill(
    rows: list[list[_Unit]], shape: PackedShape, slot_of: dict[int, int], sequences: int, completion_width: int
) -> PackedRows:
    """The arrays of `rows` (shape.rows of them) in `shape`; sequence s's log-probs go to slot
    slot_of[s] of a [sequences, completion_width] layout."""
    R, L, T = shape.rows, shape.row_tokens, shape.row_targets
    tokens = np.zeros((R, L), np.int32)
    positions = np.zeros((R, L), np.int32)
    segments = np.zeros((R, L), np.int32)
    members = np.zeros((R, L), np.int32)
    predictor = np.zeros((R, T), np.int32)
    target = np.zeros((R, T), np.int32)
    slot = np.full((R, T), sequences * completion_width, np.int32)
    real = 0
    for r, row in enumerate(rows):
        at, filled = 0, 0
        for number, unit in enumerate(row, start=1):
            p = len(unit.prompt)
            tokens[r, at : at + p] = unit.prompt
            positions[r, at : at + p] = np.arange(p)
            segments[r, at : at + p + sum(len(c) for _, c in unit.completions)] = number
            last_prompt = at + p - 1
            at += p
            for member, (s, completion) in enumerate(unit.completions, start=1):
                n = len(completion)
                if filled + n > T:
                    raise ValueError(f"a row holds more than {T} completion tokens")
                tokens[r, at : at + n] = completion
                positions[r, at : at + n] = p + np.arange(n)
                members[r, at : at + n] = member
                predictor[r, filled] = last_prompt
                predictor[r, filled + 1 : filled + n] = at + np.arange(n - 1)
                target[r, filled : filled + n] = completion
                slot[r, filled : filled + n] = slot_of[s] * completion_width + np.arange(n)
                at += n
                filled += n
        real += at
    return PackedRows(tokens, positions, segments, members, predictor, target, slot, real)


def _dealt(rows: list[list[_Unit]], blocks: int) -> list[list[_Unit]]:
    """The rows reordered so that block b (rows b * R/blocks .. ) gets every blocks-th row of the
    fullest-first order, back and forth: the blocks' token counts differ by at most a row's."""
    order = sorted(range(len(rows)), key=lambda r: -sum(u.length for u in rows[r]))
    per_block = len(rows) // blocks
    dealt: list[list[list[_Unit]]] = [[] for _ in range(blocks)]
    for i, r in enumerate(order):
        lap, at = divmod(i, blocks)
        dealt[at if lap % 2 == 0 else blocks - 1 - at].append(rows[r])
    assert all(len(d) == per_block for d in dealt)
    return [row for block in dealt for row in block]


PACKED_AWAY = ("prompt_tokens", "prompt_valid", "completion_tokens")
"""What a packed batch no longer carries: the rows hold those tokens (completion_mask stays, the loss's mask)."""


@dataclasses.dataclass(frozen=True)
class PassBatch:
    """A log-prob pass's or an update's inputs as they run, and what they compute."""

    arrays: dict[str, np.ndarray]
    packed: bool
    positions: int  # token positions the pass computes
    tokens: int  # the tokens among them


def pack_micro_batches(
    arrays: dict[str, np.ndarray],
    prompt_group: int,
    row_multiple: int = 1,
    enabled: bool = True,
    micro_batch_tokens: int | None = None,
    share_prompts: bool = True,
) -> PassBatch:
    """arrays: a pass's inputs with a leading micro-batch axis [A, M, ...] (prompt_tokens,
    prompt_valid, completion_tokens, completion_mask, and the loss's own per-sequence arrays).
    Packed when `enabled` and the rows compute at most PACKING_GAIN of the positions the unpacked
    pass would (prompt_group: the rows sharing each prompt there, `plan.shared_prompt_group`).

    Packed, the A micro-batches' sequences are laid in rows together (`_placed`) and the rows
    dealt over the micro-batches x `row_multiple` devices, fullest first, back and forth, so every
    micro-batch and every device holds about the same tokens. The micro-batches are A, or with
    `micro_batch_tokens` as few as hold the rows in at most that many token positions each (rows
    x row length): micro-batches by tokens, not by sequences. The `PackedRows.arrays`
    [A, R, ...] replace PACKED_AWAY; every other array is re-laid [A, M', ...] to follow the rows:
    micro-batch a holds the sequences of its rows, in their order, then empty slots (all zeros:
    no mask, no weight, so they add nothing to the loss or a metric). Sequences without a
    completion token are left out. With A = 1 and no `micro_batch_tokens` the layout stays as it
    came (a log-prob pass's results come back in its sequences' order). share_prompts=False: each
    completion in a unit of its own, with its own prompt copy (what segment-id attention kernels
    need: `segment_attention.shares_prompts`).

    Every loss weight is normalised over the mini-batch before this (`token_weights`), so the
    sums over the re-laid micro-batches are those over the given ones."""
    micro_batches, sequences, completion_width = arrays["completion_tokens"].shape
    prompt_width = arrays["prompt_tokens"].shape[-1]
    unpacked = micro_batches * unpacked_positions(prompt_width, sequences, completion_width, prompt_group)
    flat = {k: v.reshape(micro_batches * sequences, *v.shape[2:]) for k, v in arrays.items()}
    parts = tuple(flat[k] for k in (*PACKED_AWAY, "completion_mask"))
    layout = None
    if enabled and _least_tokens(*parts) <= PACKING_GAIN * unpacked:  # else too little padding to remove
        try:
            layout = _lay_out(*parts, micro_batches, row_multiple, micro_batch_tokens, share_prompts)
        except ValueError:  # a prompt not left-padded, a completion with a hole
            layout = None
    if layout is not None and layout.positions <= PACKING_GAIN * unpacked:
        return layout.apply(flat, completion_width)
    flat_valid = arrays["prompt_valid"].reshape(-1, prompt_width)
    return PassBatch(arrays, False, unpacked, real_tokens(flat_valid, arrays["completion_mask"], prompt_group))


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where packing puts a pass's sequences: each micro-batch's rows and sequence slots."""

    shape: PackedShape
    rows: list[list[list[_Unit]]]  # [micro-batch][row] -> units
    sequences: list[list[int]]  # [micro-batch] -> the flat indices of its sequences, slot by slot
    slots: int  # M': sequence slots per micro-batch

    @property
    def positions(self) -> int:
        return len(self.rows) * self.shape.rows * self.shape.row_tokens

    def apply(self, flat: dict[str, np.ndarray], completion_width: int) -> PassBatch:
        packed = []
        kept: dict[str, list[np.ndarray]] = {k: [] for k in flat if k not in PACKED_AWAY}
        for rows, order in zip(self.rows, self.sequences):
            slot_of = {s: j for j, s in enumerate(order)}
            packed.append(_fill(rows, self.shape, slot_of, self.slots, completion_width))
            for k in kept:
                v = flat[k][order]
                kept[k].append(np.concatenate([v, np.zeros((self.slots - len(order), *v.shape[1:]), v.dtype)]))
        stacked = {k: np.stack([p.arrays()[k] for p in packed]) for k in packed[0].arrays()}
        laid = {k: np.stack(v) for k, v in kept.items()}
        return PassBatch({**laid, **stacked}, True, self.positions, sum(p.real_tokens for p in packed))


def _lay_out(
    prompt_tokens: np.ndarray,
    prompt_valid: np.ndarray,
    completion_tokens: np.ndarray,
    completion_mask: np.ndarray,
    micro_batches: int,
    row_multiple: int,
    micro_batch_tokens: int | None = None,
    share_prompts: bool = True,
) -> _Layout:
    """The rows of every sequence ([N, ...] arrays, N = A x M), dealt over `micro_batches` x
    `row_multiple` blocks, or over as few micro-batches as hold them in `micro_batch_tokens`
    positions each (see `pack_micro_batches`); ValueError as `pack`."""
    total, completion_width = completion_tokens.shape
    row_tokens = packed_shape(prompt_tokens, prompt_valid, completion_tokens, completion_mask).row_tokens
    placed = _placed(prompt_tokens, prompt_valid, completion_tokens, completion_mask, row_tokens, share_prompts)
    needed = max(len(placed), 1)
    if micro_batch_tokens is not None:
        most_rows = max(row_multiple, micro_batch_tokens // row_tokens // row_multiple * row_multiple)
        fewest = -(-needed // most_rows)
        while _nice_count(-(-needed // fewest), row_multiple) > most_rows:
            fewest += 1
        # of a few counts from the fewest, the one whose rows leave the least room empty
        micro_batches = min(range(fewest, fewest + 4), key=lambda a: a * _nice_count(-(-needed // a), row_multiple))
    rows_each = _nice_count(-(-needed // micro_batches), row_multiple)
    placed += [[] for _ in range(rows_each * micro_batches - len(placed))]
    dealt = _dealt(placed, micro_batches * row_multiple)
    rows = [dealt[a * rows_each : (a + 1) * rows_each] for a in range(micro_batches)]
    if micro_batches == 1 and micro_batch_tokens is None:
        sequences = [list(range(total))]
        slots = total
    else:
        sequences = [[s for row in mb for unit in row for s, _ in unit.completions] for mb in rows]
        slots = _nice_count(max(len(order) for order in sequences), row_multiple)
    targets = max((sum(u.targets for u in row) for row in placed), default=1)
    target_quantum = max(1, _round_up(-(-row_tokens // TARGET_PARTS), TOKEN_MULTIPLE))
    shape = PackedShape(rows_each, row_tokens, min(_round_up(targets, target_quantum), row_tokens))
    return _Layout(shape, rows, sequences, slots)

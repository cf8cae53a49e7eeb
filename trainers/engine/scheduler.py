"""The engine's scheduler, on the host (no JAX): which waiting groups enter the free decode slots,
and how the next decode chunk runs (`ChunkPlan`: its slots, its bucket, its steps, and when it
hands back to the host). The host loop (`batching._Run`) asks it before each admission and each
chunk and tells it which sequences ended; the pages and the slots' token state stay with the loop.

Groups enter whole (a prompt's G completions share its pages) and in order, as many as the free
slots hold, or fewer where a `GroupGate` (dynamic sampling: enough informative groups in flight)
says so. A chunk's K steps are `chunk_tokens`, or the whole budget once nothing needs the host
between chunks; it ends early once enough slots are free for the next waiting group, or once the
slots still running fit a smaller bucket (`exit_rule`).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from trainers.data.encoding import bucket_width


class GroupGate(Protocol):
    """Admission driven by finished groups (dynamic sampling without rounds): the engine asks how many
    more waiting groups may enter, and reports each group that ended (all its G rows)."""

    def admit_limit(self, in_flight_groups: int) -> int:
        """How many more groups may be admitted now, with `in_flight_groups` admitted and not ended."""

    def ended(self, first_row: int, tokens: np.ndarray, mask: np.ndarray) -> None:
        """The group of rows first_row .. first_row + G - 1 ended; tokens / mask [G, max_new_tokens]."""


def slot_bucket(active: int, slots: int) -> int:
    """The decode program's slot count for `active` active slots: the next power of two up to 8, then
    the next of 8 x (2, 3, 4, 6, 8, 12, ...) (`encoding.bucket_width`: about two sizes per doubling,
    each under 1.5x what it holds), never more than `slots`."""
    if active <= 8:
        return min(slots, 1 << max(active - 1, 0).bit_length())
    return min(slots, bucket_width(active, 8))


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    """How the next decode chunk runs: the active slots (rows 0 .. n - 1 of its bucket, in order),
    the program's slot count, its K steps, and when it ends early (`programs.SlotBatch`:
    exit_active, exit_steps_left; (0, 0): the whole chunk)."""

    running: np.ndarray
    bucket: int
    chunk_tokens: int
    exit_active: int
    exit_steps_left: int


class Scheduler:
    """The waiting groups of one `generate_paged` call and the groups in flight (with a gate).

    rows: the call's sequences, `group` consecutive ones per prompt; num_slots: the decode slots;
    chunk_tokens: decode steps between two visits of the host; max_new_tokens: a sequence's budget;
    runs_to_budget: no sequence ends early (no EOS stop, no turns), so every one runs to the budget."""

    def __init__(
        self,
        rows: int,
        group: int,
        num_slots: int,
        chunk_tokens: int,
        max_new_tokens: int,
        runs_to_budget: bool,
        gate: GroupGate | None = None,
    ) -> None:
        self.group, self.num_slots, self.gate = group, num_slots, gate
        self.chunk_tokens, self.max_new_tokens, self.runs_to_budget = chunk_tokens, max_new_tokens, runs_to_budget
        self.waiting = list(range(0, rows, group))  # the first row of each group not yet admitted, in order
        self.rows_left: dict[int, int] = {}  # with a gate: a group in flight (its first row) -> rows not ended

    def queue_open(self) -> bool:
        """Groups wait that may still enter: the gate (if any) allows more once the groups in flight
        have ended."""
        return bool(self.waiting) and (self.gate is None or self.gate.admit_limit(0) > 0)

    def admit(self, free_slots: int) -> list[int]:
        """The groups that enter now (their first rows, in order), as many as `free_slots` hold and
        the gate allows; they leave the queue."""
        count = min(len(self.waiting), free_slots // self.group)
        if self.gate is not None and count:
            count = min(count, self.gate.admit_limit(len(self.rows_left)))
        firsts, self.waiting = self.waiting[:count], self.waiting[count:]
        if self.gate is not None:
            self.rows_left.update((first, self.group) for first in firsts)
        return firsts

    def ended(self, rows: np.ndarray, tokens: np.ndarray, mask: np.ndarray) -> None:
        """The sequences of `rows` ended (tokens, mask [rows, max_new]: the call's outputs so far):
        with a gate, each group whose rows have all ended goes to it."""
        if self.gate is None:
            return
        for row in rows:
            first = int(row) - int(row) % self.group
            self.rows_left[first] -= 1
            if not self.rows_left[first]:
                del self.rows_left[first]
                group = slice(first, first + self.group)
                self.gate.ended(first, tokens[group].copy(), mask[group].copy())

    def plan_chunk(self, active: np.ndarray, free_slots: int, host_between_chunks: bool) -> ChunkPlan:
        """The next chunk over the `active` slots ([slots] bool), `free_slots` being free;
        host_between_chunks: something needs the host between chunks (a chunked prefill under way,
        weights in flight, turns)."""
        running = np.flatnonzero(active)
        bucket = slot_bucket(len(running), self.num_slots)
        whole = not self.queue_open() and not host_between_chunks and self.runs_to_budget
        exit_active, exit_steps_left = self.exit_rule(len(running), bucket, free_slots)
        return ChunkPlan(
            running, bucket, self.max_new_tokens if whole else self.chunk_tokens, exit_active, exit_steps_left
        )

    def exit_rule(self, running: int, bucket: int, free_slots: int) -> tuple[int, int]:
        """(exit_active, exit_steps_left): the chunk ends once at most exit_active of its `running`
        slots are still active, if exit_steps_left steps would still be left. While groups wait
        (that the gate, if any, lets in): as soon as enough slots are free for the next group to
        enter. Otherwise: once the rest fit a smaller bucket (`slot_bucket`), with half a chunk or
        more left (a shorter tail is not worth a host round trip and another compiled program). So a
        slot that ends mid-chunk idles a few steps, not until the chunk's end. (0, 0): run the whole
        chunk."""
        if self.waiting and (self.gate is None or self.gate.admit_limit(len(self.rows_left)) > 0):
            short = self.group - free_slots  # > 0: admission just ran
            return max(running - short, 0), 0
        if self.runs_to_budget:
            return 0, 0  # every sequence runs to the budget: none ends early
        smaller = bucket - 1
        while smaller > 0 and slot_bucket(smaller, self.num_slots) == bucket:
            smaller -= 1
        return smaller, max(self.chunk_tokens // 2, 1)

"""The paged KV cache's bookkeeping, on the host: which pages of the pool hold which slot's tokens.

The pool is `num_pages` pages of `page_tokens` token positions each; a page index names the same
page in every layer's key and value arrays (`kv_pages`). A slot (one decode lane of the engine)
holds a sequence's tokens 0 .. length - 1 in the pages of its block table, in order: token t sits
in page `table[slot, t // page_tokens]` at offset `t % page_tokens`. A slot holds only the pages
its tokens use, so memory follows the tokens generated, not the longest possible completion.

Pages are reference-counted, so the G completions of a prompt share its pages: `admit_group` gives
the group's first slot fresh pages for the prompt and the others the same full pages (every
page's count + G - 1). A prompt's partly filled last page is the one page a completion writes
into: each other slot gets its own page for it at once (`GroupPages.tail_pages`), which the
device fills with the same prompt tokens when it writes the prompt (copied at admission, not on
the first write), so no write ever lands in a shared page.

Pure Python and numpy, every operation over many slots at once: the engine calls it between
decode chunks (admit, grow, retire) and hands the device the block tables. Raises PoolExhausted
when an operation needs more free pages than there are; the pool is then unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def decode_slot_count(decode_slots: int | None, micro_batch_sequences: int, rows: int, group: int) -> int:
    """The decode slots a generation call of `rows` sequences runs with, before any growth into an
    accelerator's free memory (`batching.memory_slots`): rollout.decode_slots, or when it is None the
    rollout micro-batch; never more than the call's rows, never fewer than one group of `group`
    (a prompt's G completions are admitted together and share its pages)."""
    return max(min(decode_slots or micro_batch_sequences, rows), group)


PAGE_TOKENS = 16
"""The engine's default page size in token positions (`batching.EngineSettings.page_tokens`)."""


class PoolExhausted(RuntimeError):
    """More pages were asked for than the pool has free."""


@dataclasses.dataclass(frozen=True)
class GroupPages:
    """What `admit_group` gave a group: `prompt_pages`, the first slot's pages in order (the prompt's
    tokens; the last one partly filled when the prompt does not end on a page boundary), and
    `tail_pages`, each other slot's own page in place of that partly filled one (empty when the
    prompt fills its pages)."""

    prompt_pages: list[int]
    tail_pages: list[int]


class PagePool:
    """`num_pages` pages of `page_tokens` positions, shared by `num_slots` slots of at most
    `max_pages_per_slot` pages each (a sequence of up to max_pages_per_slot x page_tokens tokens).

    `tables` [num_slots, max_pages_per_slot] int32: each slot's pages in order, 0 beyond its pages
    (a valid index, never read: attention masks positions past `lengths`); `lengths` [num_slots]:
    the tokens each slot holds (0: the slot is free)."""

    def __init__(self, num_pages: int, page_tokens: int, num_slots: int, max_pages_per_slot: int) -> None:
        if min(num_pages, page_tokens, num_slots, max_pages_per_slot) < 1:
            raise ValueError("a page pool needs at least one page, one token a page, one slot and one page a slot")
        self.num_pages, self.page_tokens = num_pages, page_tokens
        self.num_slots, self.max_pages_per_slot = num_slots, max_pages_per_slot
        self.references = np.zeros(num_pages, np.int32)
        self.tables = np.zeros((num_slots, max_pages_per_slot), np.int32)
        self.pages_held = np.zeros(num_slots, np.int32)  # the leading entries of each table in use
        self.lengths = np.zeros(num_slots, np.int32)
        self._free_count = num_pages

    # -- what the pool holds ----------------------------------------------------------------

    @property
    def free_pages(self) -> int:
        return self._free_count

    @property
    def pages_in_use(self) -> int:
        return self.num_pages - self._free_count

    def pages_for(self, tokens: np.ndarray | int) -> np.ndarray | int:
        """Pages that hold `tokens` token positions (an int or an array of them)."""
        return -(-tokens // self.page_tokens)

    def slot_pages(self, slot: int) -> list[int]:
        return self.tables[slot, : self.pages_held[slot]].tolist()

    def tokens_stored(self) -> int:
        """The token positions written in the pages in use: each slot's tokens, a shared page once."""
        slots = np.flatnonzero(self.pages_held)
        if not len(slots):
            return 0
        held = self.pages_held[slots]
        index = np.arange(self.max_pages_per_slot)[None, :]
        in_use = index < held[:, None]  # [n, max_pages]
        filled = np.clip(self.lengths[slots, None] - index * self.page_tokens, 0, self.page_tokens)
        per_page = np.zeros(self.num_pages, np.int64)
        np.maximum.at(per_page, self.tables[slots][in_use], filled[in_use])
        return int(per_page.sum())

    # -- changes ------------------------------------------------------------------------------

    def _take(self, count: int) -> np.ndarray:
        """`count` free pages, the lowest first, each with one reference."""
        if count > self._free_count:
            raise PoolExhausted(f"{count} pages asked for, {self._free_count} of {self.num_pages} free")
        taken = np.flatnonzero(self.references == 0)[:count]
        self.references[taken] = 1
        self._free_count -= count
        return taken.astype(np.int32)

    def admit_group(self, slots: np.ndarray, tokens: int) -> GroupPages:
        """Free slots `slots` take a prompt of `tokens` tokens about to be prefilled, for the
        completions of one group: slots[0] gets fresh pages for it; the others share its full pages
        and each gets its own page for a partly filled last one (the module docstring)."""
        prompt, tail = self.admit_groups(np.asarray(slots, np.int64)[None, :], np.array([tokens]))
        return GroupPages(prompt[0][prompt[0] >= 0].tolist(), tail[0][tail[0] >= 0].tolist())

    def admit_groups(self, slots: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`admit_group` for n groups at once: slots [n, G] (free, distinct), tokens [n] -> (prompt
        pages [n, most pages] (-1 past each group's), tail pages [n, G - 1] (-1 for a group whose
        prompt fills its pages)). Pages are taken lowest first, group by group: its prompt pages,
        then its tail pages. On PoolExhausted nothing changes."""
        slots = np.asarray(slots, np.int64)
        tokens = np.asarray(tokens, np.int64)
        n, group = slots.shape
        if self.pages_held[slots].any():
            raise ValueError(f"slot {int(slots[self.pages_held[slots] > 0][0])} is not free")
        if len(np.unique(slots)) != slots.size:
            raise ValueError("a slot appears twice among the groups admitted")
        pages = self.pages_for(tokens)
        if n and pages.max() > self.max_pages_per_slot:
            self._check_fits(int(tokens.max()))
        full = tokens // self.page_tokens
        tails = (group - 1) * (pages > full)
        counts = pages + tails
        taken = self._take(int(counts.sum()))
        starts = np.cumsum(counts) - counts  # each group's pages: prompt pages, then tail pages
        columns = np.arange(int(pages.max()) if n else 0)
        in_prompt = columns[None, :] < pages[:, None]  # [n, most pages]
        prompt = np.where(in_prompt, taken[np.minimum(starts[:, None] + columns[None, :], len(taken) - 1)], -1)
        shared = columns[None, :] < full[:, None]
        np.add.at(self.references, prompt[shared], group - 1)
        rows, cols = np.nonzero(in_prompt)
        self.tables[slots[rows], cols[:, None]] = prompt[rows, cols][:, None]
        has_tail = tails > 0
        tail = np.full((n, group - 1), -1, np.int64)
        if has_tail.any():
            offsets = starts[has_tail, None] + pages[has_tail, None] + np.arange(group - 1)[None, :]
            tail[has_tail] = taken[offsets]
            self.tables[slots[has_tail, 1:], full[has_tail, None]] = tail[has_tail]
        self.pages_held[slots], self.lengths[slots] = pages[:, None], tokens[:, None]
        return prompt, tail

    def grow(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        """Make each of `slots` able to hold tokens[i] tokens: new pages where its pages end (its
        positions lengths .. tokens - 1 then fall in pages it alone holds). On PoolExhausted
        nothing changes."""
        slots = np.asarray(slots, np.int64)
        tokens = np.broadcast_to(np.asarray(tokens, np.int64), slots.shape)
        needed = self.pages_for(tokens)
        if len(slots) and needed.max() > self.max_pages_per_slot:
            self._check_fits(int(tokens.max()))
        held = self.pages_held[slots].astype(np.int64)
        extra = np.maximum(needed - held, 0)
        total = int(extra.sum())
        if not total:
            return
        fresh = self._take(total)
        rows = np.repeat(slots, extra)
        columns = np.repeat(held, extra) + np.arange(total) - np.repeat(np.cumsum(extra) - extra, extra)
        self.tables[rows, columns] = fresh
        self.pages_held[slots] = np.maximum(held, needed)

    def advance(self, slots: np.ndarray, tokens: np.ndarray) -> None:
        """`slots` now hold tokens[i] tokens each (within the pages `grow` gave them)."""
        slots = np.asarray(slots, np.int64)
        tokens = np.broadcast_to(np.asarray(tokens, np.int32), slots.shape)
        over = tokens > self.pages_held[slots] * self.page_tokens
        if over.any():
            slot = int(slots[over][0])
            raise ValueError(
                f"slot {slot}: {int(tokens[over][0])} tokens, but its pages hold "
                f"{self.pages_held[slot] * self.page_tokens}"
            )
        self.lengths[slots] = tokens

    def release(self, slots: np.ndarray) -> None:
        """The sequences of `slots` ended: their pages go back to the pool (a shared one when its
        last holder releases it)."""
        slots = np.atleast_1d(np.asarray(slots, np.int64))
        held = self.pages_held[slots]
        pages = self.tables[slots][np.arange(self.max_pages_per_slot)[None, :] < held[:, None]]
        np.subtract.at(self.references, pages, 1)
        self._free_count += int(np.count_nonzero(self.references[np.unique(pages)] == 0))
        self.tables[slots] = 0
        self.pages_held[slots], self.lengths[slots] = 0, 0

    def _check_fits(self, tokens: int) -> int:
        pages = self.pages_for(tokens)
        if pages > self.max_pages_per_slot:
            raise ValueError(f"{tokens} tokens need {pages} pages, more than a slot's {self.max_pages_per_slot}")
        return pages

"""The paged KV cache's bookkeeping, on the host: which pages of the pool hold which slot's tokens.

The pool is `num_pages` pages of `page_tokens` token positions each; a page index names the same
page in every layer's key and value arrays (`kv_pages`). A slot (one decode lane of the engine)
holds a sequence's tokens 0 .. length - 1 in the pages of its block table, in order: token t sits
in page `table[slot, t // page_tokens]` at offset `t % page_tokens`. A slot holds only the pages
its tokens use, so memory follows the tokens generated, not the longest possible completion.

Pages are reference-counted, so the G completions of a prompt share its pages: `fork` gives a slot
the block table of another (every page's count + 1), and a slot about to write into a page that
another slot also holds gets its own copy first (copy-on-write: `reserve` returns the copies the
device must make before the write). Only the prompt's partly filled last page is ever copied; the
full pages stay shared until the last holder releases them.

Pure Python and numpy: the engine calls it between decode chunks (admit, grow, retire) and hands
the device the block tables and the page copies. Raises PoolExhausted when a reservation needs more
free pages than there are; the pool is then unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np


PAGE_TOKENS = 16
"""The engine's default page size in token positions (`batching.EngineSettings.page_tokens`)."""


class PoolExhausted(RuntimeError):
    """More pages were asked for than the pool has free."""


@dataclasses.dataclass(frozen=True)
class PageCopy:
    """Copy page `source` into page `target` (every layer, keys and values) before writing to it."""

    source: int
    target: int


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
        self._free = list(range(num_pages - 1, -1, -1))  # a stack: the lowest free page is taken first

    # -- what the pool holds ----------------------------------------------------------------

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def pages_in_use(self) -> int:
        return self.num_pages - len(self._free)

    def pages_for(self, tokens: int) -> int:
        """Pages that hold `tokens` token positions."""
        return -(-tokens // self.page_tokens)

    def slot_pages(self, slot: int) -> list[int]:
        return self.tables[slot, :self.pages_held[slot]].tolist()

    # -- changes ------------------------------------------------------------------------------

    def _take(self, count: int) -> list[int]:
        if count > len(self._free):
            raise PoolExhausted(f"{count} pages asked for, {len(self._free)} of {self.num_pages} free")
        taken = [self._free.pop() for _ in range(count)]
        self.references[taken] = 1
        return taken

    def _drop(self, page: int) -> None:
        self.references[page] -= 1
        if self.references[page] == 0:
            self._free.append(page)
            self._free.sort(reverse=True)

    def admit(self, slot: int, tokens: int) -> list[int]:
        """Give free slot `slot` fresh pages for a sequence of `tokens` tokens (a prompt about to be
        prefilled); returns them, in order."""
        if self.pages_held[slot]:
            raise ValueError(f"slot {slot} is not free")
        pages = self._take(self._check_fits(tokens))
        self.tables[slot, :len(pages)] = pages
        self.pages_held[slot], self.lengths[slot] = len(pages), tokens
        return pages

    def fork(self, source: int, slot: int) -> None:
        """Free slot `slot` shares every page of `source` (its tokens too): the next completion of the
        same prompt, which then writes its own tokens after them (`reserve` copies the shared last
        page first)."""
        if self.pages_held[slot]:
            raise ValueError(f"slot {slot} is not free")
        held = int(self.pages_held[source])
        pages = self.tables[source, :held]
        self.references[pages] += 1
        self.tables[slot, :held] = pages
        self.pages_held[slot], self.lengths[slot] = held, self.lengths[source]

    def reserve(self, slot: int, tokens: int) -> list[PageCopy]:
        """Make slot `slot` able to write positions lengths[slot] .. tokens - 1: new pages where its
        pages end, and its own copy of a page it shares that those positions fall in. Returns the
        copies the device must make before writing (none when nothing is shared). On PoolExhausted
        nothing changes."""
        length, held = int(self.lengths[slot]), int(self.pages_held[slot])
        needed = self._check_fits(tokens)
        if tokens <= length:
            return []
        first_written = length // self.page_tokens  # the page position `length` falls in
        shared = [i for i in range(first_written, held) if self.references[self.tables[slot, i]] > 1]
        fresh = self._take(max(0, needed - held) + len(shared))
        copies = []
        for i in shared:
            target = fresh.pop()
            copies.append(PageCopy(int(self.tables[slot, i]), target))
            self._drop(int(self.tables[slot, i]))
            self.tables[slot, i] = target
        self.tables[slot, held:held + len(fresh)] = fresh
        self.pages_held[slot] = max(held, needed)
        return copies

    def advance(self, slot: int, tokens: int) -> None:
        """Slot `slot` now holds `tokens` tokens (within the pages `reserve` gave it)."""
        if tokens > self.pages_held[slot] * self.page_tokens:
            raise ValueError(f"slot {slot}: {tokens} tokens, but its pages hold {self.pages_held[slot] * self.page_tokens}")
        self.lengths[slot] = tokens

    def release(self, slot: int) -> None:
        """Slot `slot`'s sequence ended: its pages go back to the pool (a shared one when its last
        holder releases it)."""
        for page in self.tables[slot, :self.pages_held[slot]].tolist():
            self._drop(page)
        self.tables[slot] = 0
        self.pages_held[slot], self.lengths[slot] = 0, 0

    def _check_fits(self, tokens: int) -> int:
        pages = self.pages_for(tokens)
        if pages > self.max_pages_per_slot:
            raise ValueError(f"{tokens} tokens need {pages} pages, more than a slot's {self.max_pages_per_slot}")
        return pages

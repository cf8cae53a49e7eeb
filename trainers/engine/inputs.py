"""The admission programs' inputs, built on the host from the page pool's bookkeeping (no JAX):
`admission` for groups prefilled at once (`programs.Admission`), `prefill_piece` for the next piece
of a chunked prefill (`programs.PrefillPiece`). A batch of n arriving groups is padded to a power
of two (few compiled shapes); padding rows repeat a real prompt and write to the scratch page."""

from __future__ import annotations

import dataclasses

import numpy as np

from trainers.data.encoding import bucket_width
from trainers.engine.programs import Admission, PrefillPiece


def padded_groups(count: int) -> int:
    """The admission batch for `count` groups: the next power of two."""
    return 1 << (count - 1).bit_length()


@dataclasses.dataclass
class ChunkedPrefill:
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


def chunked_prefill(
    rows: np.ndarray,
    slots: np.ndarray,
    firsts: list[int],
    lengths: np.ndarray,
    prompt_pages: np.ndarray,
    own_tails: np.ndarray,
    page_tokens: int,
) -> ChunkedPrefill:
    """Groups (first rows `firsts`, prompts of `lengths` tokens in `prompt_pages`) to prefill in pieces."""
    last_pages = np.take_along_axis(prompt_pages, ((lengths - 1) // page_tokens)[:, None], axis=1)[:, 0]
    return ChunkedPrefill(
        rows,
        slots,
        np.asarray(firsts, np.int64),
        lengths.astype(np.int32),
        np.where(lengths % page_tokens > 0, last_pages, -1),
        own_tails,
        padded_groups(len(firsts)),
    )


def admission(
    prompt_tokens: np.ndarray,
    prompt_valid: np.ndarray,
    token0_uniforms: np.ndarray,
    firsts: list[int],
    lengths: np.ndarray,
    prompt_pages: np.ndarray,
    own_tails: np.ndarray,
    page_tokens: int,
    scratch_page: int,
) -> Admission:
    """The groups whose first rows are `firsts` (prompts of `lengths` tokens) prefilled at once: each
    prompt column's page and offset (`prompt_pages` [n, pages] from `PagePool.admit_groups`), and the
    tail (tokens of a partly filled last page) again in each other completion's own page
    (`own_tails` [n, G - 1]).
    prompt_tokens, prompt_valid [rows, Lp]: the call's prompts; token0_uniforms [rows]: token 0's draws."""
    count, group = len(firsts), own_tails.shape[1] + 1
    padded, width, page = padded_groups(count), prompt_tokens.shape[1], page_tokens
    rows = (np.asarray(firsts, np.int64)[:, None] + np.arange(group)).reshape(-1)
    token = np.arange(width)[None, :] - (width - lengths)[:, None]  # each column's token; < 0: padding
    valid = token >= 0
    token = np.maximum(token, 0)
    pages = np.full((padded, width), scratch_page, np.int32)
    offsets = np.zeros((padded, width), np.int32)
    pages[:count] = np.where(valid, np.take_along_axis(prompt_pages, token // page, axis=1), scratch_page)
    offsets[:count] = np.where(valid, token % page, 0)
    # the tail (tokens full .. length - 1 of a partly filled last page) again in each other slot's own page
    full = lengths // page * page
    in_tail = np.arange(page)[None, :] < (lengths - full)[:, None]  # [count, T]
    tail_columns = np.zeros((padded, page), np.int32)
    tail_columns[:count] = np.where(in_tail, width - lengths[:, None] + full[:, None] + np.arange(page), 0)
    tail_pages = np.full((padded, group - 1, page), scratch_page, np.int32)
    tail_pages[:count] = np.where(in_tail[:, None, :], own_tails[:, :, None], scratch_page)
    uniforms = np.zeros(padded * group, np.float32)
    uniforms[: len(rows)] = token0_uniforms[rows]
    firsts = firsts + [firsts[0]] * (padded - count)  # padding rows repeat a real prompt, written nowhere
    return Admission(prompt_tokens[firsts], prompt_valid[firsts], pages, offsets, tail_columns, tail_pages, uniforms)


def prefill_piece(
    job: ChunkedPrefill,
    prompt_tokens: np.ndarray,
    first_slot_tables: np.ndarray,
    token0_uniforms: np.ndarray,
    piece_tokens: int,
    page_tokens: int,
    scratch_page: int,
) -> tuple[PrefillPiece, np.ndarray]:
    """The next piece of `job`: each prompt's next `piece_tokens` tokens (the piece as wide as the most
    of them left, bucketed in pages), after the job.done already in its pages (first_slot_tables
    [n, max_pages]: each group's first slot's pages). Also [n] which prompts end in this piece."""
    group = job.own_tails.shape[1] + 1
    count, width = len(job.firsts), prompt_tokens.shape[1]
    counts = np.zeros(job.padded, np.int32)
    counts[:count] = np.clip(job.lengths - job.done, 0, piece_tokens)
    piece = min(piece_tokens, bucket_width(int(counts.max()), page_tokens))  # a last piece only as wide as it needs
    done = np.zeros(job.padded, np.int32)
    done[:count] = np.where(counts[:count] > 0, job.done, 0)  # a prompt already prefilled reads nothing
    token = done[:count, None] + np.arange(piece)[None, :]  # [count, C]: the prompt token of each column
    columns = np.clip(width - job.lengths[:, None] + token, 0, width - 1)
    tokens = np.zeros((job.padded, piece), np.int32)
    tokens[:count] = np.where(
        np.arange(piece)[None, :] < counts[:count, None],
        np.take_along_axis(prompt_tokens[job.firsts], columns, axis=1),
        0,
    )
    tables = np.zeros((job.padded, first_slot_tables.shape[1]), np.int32)
    tables[:count] = first_slot_tables
    ends = (counts[:count] > 0) & (job.done + counts[:count] == job.lengths)
    copies = ends & (job.tail_source >= 0)
    tail_source = np.full(job.padded, scratch_page, np.int32)
    tail_source[:count] = np.where(copies, job.tail_source, scratch_page)
    tail_pages = np.full((job.padded, group - 1), scratch_page, np.int32)
    tail_pages[:count] = np.where(copies[:, None], job.own_tails, scratch_page)
    uniforms = np.zeros(job.padded * group, np.float32)
    uniforms[: len(job.rows)] = token0_uniforms[job.rows]
    return PrefillPiece(tokens, tables, done, counts, tail_source, tail_pages, uniforms), ends

"""Sequence packing's host side against hand-laid rows: units that share a prompt, positions that
restart per unit, the attention mask, the predictor / target / slot arrays, the bucketed shapes,
the rows dealt evenly over devices, and the batches it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from trainers.models.transformer import segment_attention_mask
from trainers.step.packing import PackedShape, _nice_count, pack, pack_micro_batches, packed_shape, row_tokens_for


def batch(prompts: list[list[int]], completions: list[list[int]], prompt_width: int = 3, completion_width: int = 4):
    """Left-padded prompts and right-padded completions (padding token 0)."""
    n = len(prompts)
    prompt_tokens = np.zeros((n, prompt_width), np.int32)
    prompt_valid = np.zeros((n, prompt_width), bool)
    completion_tokens = np.zeros((n, completion_width), np.int32)
    completion_mask = np.zeros((n, completion_width), bool)
    for s, (p, c) in enumerate(zip(prompts, completions)):
        prompt_tokens[s, prompt_width - len(p) :] = p
        prompt_valid[s, prompt_width - len(p) :] = True
        completion_tokens[s, : len(c)] = c
        completion_mask[s, : len(c)] = True
    return prompt_tokens, prompt_valid, completion_tokens, completion_mask


def test_a_group_shares_its_prompt_and_each_completion_restarts_after_it():
    # two sequences of prompt [7, 8]: completions [1, 2] and [3]; then prompt [9] with [4, 5, 6]
    b = batch([[7, 8], [7, 8], [9]], [[1, 2], [3], [4, 5, 6]])
    packed = pack(*b, PackedShape(rows=1, row_tokens=12, row_targets=8))
    # units longest first: [7 8 | 1 2 | 3] (5 tokens) then [9 | 4 5 6] (4 tokens)
    assert packed.tokens.tolist() == [[7, 8, 1, 2, 3, 9, 4, 5, 6, 0, 0, 0]]
    assert packed.positions.tolist() == [[0, 1, 2, 3, 2, 0, 1, 2, 3, 0, 0, 0]]
    assert packed.segments.tolist() == [[1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0]]
    assert packed.members.tolist() == [[0, 0, 1, 1, 2, 0, 1, 1, 1, 0, 0, 0]]
    # token 1 is predicted by the prompt's last token (row position 1), 2 by 1 (position 2), 3 by
    # the prompt's last token again; 4 by 9 (position 5), 5 by 4, 6 by 5
    assert packed.predictor.tolist() == [[1, 2, 1, 5, 6, 7, 0, 0]]
    assert packed.target.tolist() == [[1, 2, 3, 4, 5, 6, 0, 0]]
    pad = 3 * 4  # S * Lc: out of range, dropped
    assert packed.slot.tolist() == [[0, 1, 4, 8, 9, 10, pad, pad]]
    assert packed.real_tokens == 9
    assert packed.tokens.size - packed.real_tokens == 3  # padding positions


def test_the_mask_lets_a_completion_see_its_prompt_and_itself_only():
    b = batch([[7, 8], [7, 8], [9]], [[1, 2], [3], [4, 5, 6]])
    packed = pack(*b, PackedShape(rows=1, row_tokens=12, row_targets=8))
    mask = np.asarray(segment_attention_mask(packed.segments, packed.members))[0]
    seen = {t: [s for s in range(12) if mask[t, s]] for t in range(12)}
    assert seen[1] == [0, 1]  # the prompt: itself, causally
    assert seen[3] == [0, 1, 2, 3]  # completion 1's second token: the prompt and completion 1
    assert seen[4] == [0, 1, 4]  # completion 2 skips completion 1
    assert seen[6] == [5, 6]  # the next unit sees nothing of the first
    assert seen[8] == [5, 6, 7, 8]
    assert seen[10] == []  # padding attends to nothing


def test_a_group_longer_than_a_row_is_split_with_a_copy_of_its_prompt():
    b = batch([[7, 8]] * 3, [[1, 2, 3], [4, 5], [6]])
    packed = pack(*b, PackedShape(rows=2, row_tokens=6, row_targets=4))
    # longest first: [7 8 | 1 2 3] is 5 tokens; [4 5] does not fit in its 1 token of room, so a
    # second unit [7 8 | 4 5]; [6] then fits the first row's room, after its prompt's unit
    assert packed.tokens.tolist() == [[7, 8, 1, 2, 3, 6], [7, 8, 4, 5, 0, 0]]
    assert packed.positions.tolist() == [[0, 1, 2, 3, 4, 2], [0, 1, 2, 3, 0, 0]]
    assert packed.slot[0].tolist() == [0, 1, 2, 8] and packed.slot[1, :2].tolist() == [4, 5]


def test_empty_completions_are_left_out_and_shapes_are_bucketed():
    b = batch([[7, 8], [7, 8], [9]], [[1, 2], [], [4, 5, 6]], prompt_width=4, completion_width=60)
    # the longest sequence is 1 + 3 = 4 tokens; rows are multiples of ceil(64 / 4) = 16 tokens
    shape = packed_shape(*b)
    assert shape == PackedShape(rows=1, row_tokens=16, row_targets=16)
    packed = pack(*b, shape)
    assert packed.target[0, :5].tolist() == [1, 2, 4, 5, 6]
    assert packed.real_tokens == 4 + 4


def test_row_counts_come_in_few_sizes_and_in_multiples_of_the_devices():
    # 9 sequences of 16 tokens each (a prompt of its own each): 9 rows of 16
    b = batch([[s + 1] for s in range(9)], [[1] * 15] * 9, prompt_width=1, completion_width=15)
    assert packed_shape(*b).rows == 9  # exact up to 16, then 18, 20, ..., 32, 36, 40, ...
    assert packed_shape(*b, row_multiple=2).rows == 10  # 2 x 5
    assert packed_shape(*b, row_multiple=4).rows == 12  # 4 x 3
    assert packed_shape(*b, row_multiple=8).rows == 16
    assert [_nice_count(n, 1) for n in (16, 17, 19, 33, 100)] == [16, 18, 20, 36, 104]


def test_rows_are_dealt_so_every_device_gets_about_the_same_tokens():
    # units of 8, 7, 6, 5, 4, 3, 2 tokens (prompt 1 + completion; the last sequence has no completion
    # token and is left out), rows of 8: first-fit gives [8], [7], [6 2], [5 3], [4] -> 5 rows,
    # padded to 6; two devices of 3 rows each: 8 + 7 + 4 and 8 + 8 + 0
    lengths = [8, 7, 6, 5, 4, 3, 2, 1]
    b = batch([[s + 1] for s in range(8)], [[9] * (n - 1) for n in lengths], prompt_width=1, completion_width=7)
    shape = PackedShape(rows=6, row_tokens=8, row_targets=8)
    packed = pack(*b, shape, row_multiple=2)
    per_row = [(packed.segments[r] > 0).sum() for r in range(6)]
    assert sorted(per_row) == [0, 4, 7, 8, 8, 8]
    assert sorted([sum(per_row[:3]), sum(per_row[3:])]) == [16, 19]


def stacked(micro_batches: list[tuple[np.ndarray, ...]], **per_sequence) -> dict[str, np.ndarray]:
    """[A, M, ...] pass inputs from A micro-batches of `batch`, with per-sequence arrays [A, M]."""
    names = ("prompt_tokens", "prompt_valid", "completion_tokens", "completion_mask")
    arrays = {name: np.stack([mb[i] for mb in micro_batches]) for i, name in enumerate(names)}
    return arrays | {k: np.asarray(v) for k, v in per_sequence.items()}


def test_packing_is_chosen_only_where_it_computes_at_most_four_fifths_of_the_positions():
    # 4 sequences of prompt [7, 8] (width 4) with completions of width 12
    def four(lengths):
        return stacked([batch([[7, 8]] * 4, [[1] * n for n in lengths], prompt_width=4, completion_width=12)])

    # short completions: 2 + 3 + 2 + 1 + 1 = 9 tokens (the prompt once) in one row of 16, against
    # 4 x 12 + 4 = 52 unpacked positions with the prompt shared over the 4 rows
    run = pack_micro_batches(four([3, 2, 1, 1]), prompt_group=4)
    assert run.packed and (run.positions, run.tokens) == (16, 9)
    assert run.arrays["packed_tokens"].shape == (1, 1, 16)
    # unshared, the unpacked pass computes 4 x 16 = 64; the packed rows still share the prompt
    assert pack_micro_batches(four([3, 2, 1, 1]), prompt_group=1).packed
    # full completions: 2 + 4 x 12 = 50 tokens against 52 positions: nothing to remove
    run = pack_micro_batches(four([12, 12, 12, 12]), prompt_group=4)
    assert not run.packed and (run.positions, run.tokens) == (52, 50)
    # 2 + 12 + 12 + 12 + 6 = 44 > 0.8 x 52 = 41.6 tokens: still not worth it
    assert not pack_micro_batches(four([12, 12, 12, 6]), prompt_group=4).packed
    assert not pack_micro_batches(four([3, 2, 1, 1]), prompt_group=4, enabled=False).packed


def test_micro_batches_share_their_rows_and_each_holds_about_the_same_tokens():
    # two micro-batches of 2 sequences, one prompt each (width 1), completions of width 15:
    # micro-batch 0 holds sequences of 8 and 7 tokens, micro-batch 1 of 2 and 1 (the last has no
    # completion token); unpacked, 2 x 2 x 16 = 64 positions
    first = batch([[1], [2]], [[9] * 7, [9] * 6], prompt_width=1, completion_width=15)
    second = batch([[3], [4]], [[9] * 1, []], prompt_width=1, completion_width=15)
    arrays = stacked([first, second], advantages=[[1.0, 2.0], [3.0, 4.0]], on_policy=[[True, True], [True, True]])
    run = pack_micro_batches(arrays, prompt_group=1)
    assert run.packed
    # units of 8, 7 and 2 tokens in rows of 16 (the longest sequence, 8, rounded up to the quantum:
    # a quarter of 1 + 15, at least 16): first-fit [8 + 7], [2]; one row for each micro-batch
    tokens = run.arrays["packed_tokens"]
    assert tokens.shape == (2, 1, 16)
    assert tokens[0, 0].tolist() == [1] + [9] * 7 + [2] + [9] * 6 + [0]
    assert tokens[1, 0].tolist() == [3, 9] + [0] * 14
    # the per-sequence arrays follow the rows: micro-batch 1 holds sequence 2 and an empty slot
    # (sequence 3 has no completion token); 2 slots each
    assert run.arrays["advantages"].tolist() == [[1.0, 2.0], [3.0, 0.0]]
    assert run.arrays["on_policy"].tolist() == [[True, True], [True, False]]
    assert run.arrays["completion_mask"][1].sum() == 1
    # sequence 2's one token goes to slot 0 of micro-batch 1: s * Lc + j = 0
    assert run.arrays["packed_slot"][1, 0, 0] == 0
    assert (run.positions, run.tokens) == (32, 17)


def test_rows_of_many_micro_batches_are_dealt_evenly():
    # 8 micro-batches: the first holds 4 sequences of 16 tokens, the others hold 4 of 2 tokens each;
    # laid together, every micro-batch gets rows of about the same tokens
    def mb(n):
        return batch([[s + 1] for s in range(4)], [[9] * (n - 1)] * 4, prompt_width=1, completion_width=15)

    arrays = stacked([mb(16)] + [mb(2)] * 7, advantages=np.ones((8, 4)))
    run = pack_micro_batches(arrays, prompt_group=1)
    assert run.packed
    per_micro_batch = (run.arrays["packed_segments"] > 0).sum(axis=(1, 2))
    # 4 x 16 + 28 x 2 = 120 tokens over 8 micro-batches of one row of 16 each (unpacked: 8 x 4 x 16)
    assert per_micro_batch.sum() == 120 and run.arrays["packed_tokens"].shape == (8, 1, 16)
    assert per_micro_batch.max() - per_micro_batch.min() <= 16
    # every sequence is in exactly one slot: the advantages' sum is kept
    assert run.arrays["advantages"].sum() == 32


def test_micro_batches_by_tokens_are_as_few_as_hold_the_rows():
    # 4 micro-batches of 4 sequences of 2 tokens (prompt 1 + completion 1), completion width 15:
    # 32 tokens in 2 rows of 16; a budget of 64 positions holds 4 rows, so one micro-batch of 2 rows
    def mb(first):
        return batch([[first + s] for s in range(4)], [[9]] * 4, prompt_width=1, completion_width=15)

    arrays = stacked([mb(1), mb(5), mb(9), mb(13)], advantages=np.arange(16.0).reshape(4, 4))
    run = pack_micro_batches(arrays, prompt_group=1, micro_batch_tokens=64)
    assert run.packed and run.arrays["packed_tokens"].shape == (1, 2, 16)
    assert run.arrays["advantages"].shape == (1, 16) and sorted(run.arrays["advantages"][0]) == list(range(16))
    assert (run.positions, run.tokens) == (32, 32)
    # a budget of one row: two micro-batches of one row each
    run = pack_micro_batches(arrays, prompt_group=1, micro_batch_tokens=16)
    assert run.arrays["packed_tokens"].shape == (2, 1, 16) and run.arrays["advantages"].shape == (2, 8)
    # without a budget, the 4 micro-batches stay 4 (one row each, two of them empty)
    assert pack_micro_batches(arrays, prompt_group=1).arrays["packed_tokens"].shape == (4, 1, 16)


def test_rows_are_a_quarter_half_three_quarters_or_all_of_the_padded_row():
    # prompt 48 + completion 256 = 304: rows of 80, 160, 240 or 304 tokens
    assert [row_tokens_for(n, 48, 256) for n in (5, 80, 81, 150, 229, 296, 304)] == [80, 80, 160, 160, 240, 304, 304]
    assert row_tokens_for(5, 4, 60) == 16


def test_what_packing_refuses():
    b = batch([[7, 8]], [[1, 2, 3]])
    with pytest.raises(ValueError, match="a sequence of 5 tokens does not fit in rows of 4"):
        pack(*b, PackedShape(rows=1, row_tokens=4, row_targets=4))
    with pytest.raises(ValueError, match="more than 1 rows of 6 tokens"):
        pack(*batch([[7, 8]] * 2, [[1, 2, 3], [4, 5, 6]]), PackedShape(rows=1, row_tokens=6, row_targets=6))
    with pytest.raises(ValueError, match="more than 2 completion tokens"):
        pack(*b, PackedShape(rows=1, row_tokens=8, row_targets=2))
    holey = list(b)
    holey[3] = np.array([[True, False, True, False]])
    with pytest.raises(ValueError, match="without holes"):
        packed_shape(*holey)
    right_padded_prompt = list(b)
    right_padded_prompt[1] = np.array([[True, True, False]])
    with pytest.raises(ValueError, match="left-padded"):
        pack(*right_padded_prompt, PackedShape(1, 8, 8))

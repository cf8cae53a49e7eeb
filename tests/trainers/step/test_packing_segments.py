"""Packing for segment-id attention (`pack_micro_batches(share_prompts=False)`, what a GPU or a TPU
runs: `segment_attention`): every completion in a segment of its own with its own prompt copy,
laid out by hand here; the default (CPU) keeps sharing the prompt."""

from __future__ import annotations

import numpy as np

from trainers.step.packing import pack_micro_batches


def arrays(prompts, completions, prompt_width=3, completion_width=4):
    """[1, S, ...] pass inputs: left-padded prompts, right-padded completions (padding token 0)."""
    n = len(prompts)
    out = {
        "prompt_tokens": np.zeros((1, n, prompt_width), np.int32),
        "prompt_valid": np.zeros((1, n, prompt_width), bool),
        "completion_tokens": np.zeros((1, n, completion_width), np.int32),
        "completion_mask": np.zeros((1, n, completion_width), bool),
    }
    for s, (p, c) in enumerate(zip(prompts, completions)):
        out["prompt_tokens"][0, s, prompt_width - len(p) :] = p
        out["prompt_valid"][0, s, prompt_width - len(p) :] = True
        out["completion_tokens"][0, s, : len(c)] = c
        out["completion_mask"][0, s, : len(c)] = True
    return out


# three completions of prompt [7, 8] and one of prompt [9], completions of width 4 (prompts of 3)
PROMPTS = [[7, 8], [7, 8], [7, 8], [9]]
COMPLETIONS = [[1, 2], [3], [4, 5, 6, 6], [5]]


def test_without_sharing_each_completion_is_a_segment_with_its_own_prompt_copy():
    run = pack_micro_batches(arrays(PROMPTS, COMPLETIONS), prompt_group=1, share_prompts=False)
    assert run.packed
    rows = {k: v[0] for k, v in run.arrays.items()}
    # one row of 16 (the longest sequence, 2 + 4, rounded up to 16) holds the four sequences
    # (15 tokens), each a unit [prompt | completion] of its own, in the sequences' order
    assert rows["packed_tokens"].tolist() == [[7, 8, 1, 2, 7, 8, 3, 7, 8, 4, 5, 6, 6, 9, 5, 0]]
    assert rows["packed_segments"].tolist() == [[1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 4, 4, 0]]
    assert rows["packed_members"].tolist() == [[0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0]]
    assert rows["packed_positions"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 0]]
    # every completion token's log-prob still goes to its sequence's slot
    width = 4
    slots = {int(s): int(t) for s, t in zip(rows["packed_slot"][0], rows["packed_target"][0]) if s < 4 * width}
    expected = {s * width + j: t for s, c in enumerate(COMPLETIONS) for j, t in enumerate(c)}
    assert slots == expected
    assert run.tokens == sum(len(p) + len(c) for p, c in zip(PROMPTS, COMPLETIONS))


def test_by_default_a_unit_shares_its_prompt():
    run = pack_micro_batches(arrays(PROMPTS, COMPLETIONS), prompt_group=1)
    rows = {k: v[0] for k, v in run.arrays.items()}
    assert rows["packed_tokens"].tolist() == [[7, 8, 1, 2, 3, 4, 5, 6, 6, 9, 5, 0, 0, 0, 0, 0]]
    assert rows["packed_members"].tolist() == [[0, 0, 1, 1, 2, 3, 3, 3, 3, 0, 1, 0, 0, 0, 0, 0]]


def test_a_prompt_repeated_in_one_row_is_never_merged_into_one_unit():
    """Two completions of one prompt in one row without sharing: two segments, two prompt copies."""
    run = pack_micro_batches(arrays([[7], [7]], [[1], [2]], 3, 12), prompt_group=1, share_prompts=False)
    assert run.packed and run.arrays["packed_tokens"][0].tolist() == [[7, 1, 7, 2] + [0] * 12]
    segments, members = run.arrays["packed_segments"][0], run.arrays["packed_members"][0]
    assert int(segments.max()) == 2 and int(members.max()) == 1

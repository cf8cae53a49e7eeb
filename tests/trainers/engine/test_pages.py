"""The paged KV cache: the page pool's bookkeeping (trainers/engine/pages.py) worked through by hand,
and decode attention over pages (trainers/models/paged_attention.py) against attention computed in numpy
over each slot's tokens laid out densely, for the pure-JAX gather and for JAX's Pallas GPU and TPU
kernels in their interpret modes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainers.engine.pages import GroupPages, PagePool, PoolExhausted, decode_slot_count
from trainers.models.paged_attention import default_implementation, paged_decode_attention


def test_a_prompt_takes_the_pages_its_tokens_need():
    pool = PagePool(num_pages=8, page_tokens=4, num_slots=3, max_pages_per_slot=4)
    assert pool.admit_group([0], 10) == GroupPages([0, 1, 2], [])  # 10 tokens: 3 pages of 4, the lowest free first
    assert pool.slot_pages(0) == [0, 1, 2] and pool.lengths[0] == 10
    assert (pool.pages_in_use, pool.free_pages) == (3, 5)
    assert pool.tables[0].tolist() == [0, 1, 2, 0]  # 0 past its pages: masked by its length


def test_several_groups_are_admitted_at_once_group_by_group():
    """Two groups of 2 in one call: 6 tokens (page 0 full and shared, page 1 slot 0's partial
    page, page 2 slot 1's own) in slots 0, 1; then 8 tokens (pages 3, 4, both full and shared)
    in slots 2, 3."""
    pool = PagePool(num_pages=12, page_tokens=4, num_slots=6, max_pages_per_slot=4)
    prompt, tail = pool.admit_groups([[0, 1], [2, 3]], [6, 8])
    assert prompt.tolist() == [[0, 1], [3, 4]] and tail.tolist() == [[2], [-1]]
    assert [pool.slot_pages(s) for s in range(4)] == [[0, 1], [0, 2], [3, 4], [3, 4]]
    assert pool.references[:6].tolist() == [2, 1, 1, 2, 2, 0] and pool.lengths.tolist() == [6, 6, 8, 8, 0, 0]
    assert pool.free_pages == 7
    with pytest.raises(ValueError, match="twice"):
        pool.admit_groups([[4, 4]], [1])


def test_a_group_shares_its_prompts_full_pages_and_each_slot_has_its_own_partial_page():
    """Prompt of 10 tokens (pages 0, 1 full; page 2 holds 2 of 4) for three completions in slots
    0, 1, 2. Each writes its first token at position 10, inside the partly filled page: slots 1 and 2
    get their own page for it (3 and 4) at admission; pages 0 and 1 stay shared by all three."""
    pool = PagePool(num_pages=8, page_tokens=4, num_slots=3, max_pages_per_slot=4)
    assert pool.admit_group([0, 1, 2], 10) == GroupPages(prompt_pages=[0, 1, 2], tail_pages=[3, 4])
    assert [pool.slot_pages(s) for s in range(3)] == [[0, 1, 2], [0, 1, 3], [0, 1, 4]]
    assert pool.references[:6].tolist() == [3, 3, 1, 1, 1, 0] and pool.lengths.tolist() == [10, 10, 10]
    pool.grow([0, 1, 2], 12)  # positions 10, 11: inside each slot's own page, no new page
    assert pool.pages_in_use == 5  # 3 sequences of 12 tokens in 5 pages, not 3 x 3 = 9
    pool.grow([1], 13)  # position 12 starts a 4th page
    assert pool.slot_pages(1) == [0, 1, 3, 5] and pool.pages_in_use == 6


def test_a_prompt_that_fills_its_pages_is_shared_whole():
    pool = PagePool(num_pages=8, page_tokens=4, num_slots=2, max_pages_per_slot=3)
    assert pool.admit_group([1, 0], 8) == GroupPages([0, 1], [])
    assert pool.slot_pages(0) == pool.slot_pages(1) == [0, 1] and pool.references[:2].tolist() == [2, 2]
    pool.grow([1, 0], [10, 9])  # each writes from position 8: a page of its own, in the order named
    assert pool.slot_pages(1) == [0, 1, 2] and pool.slot_pages(0) == [0, 1, 3]


def test_growing_past_a_page_takes_a_new_page_and_release_returns_them():
    pool = PagePool(num_pages=6, page_tokens=4, num_slots=2, max_pages_per_slot=3)
    pool.admit_group([0, 1], 4)  # page 0, full, shared
    pool.grow([1], 5)  # position 4 starts page position 1
    assert pool.slot_pages(1) == [0, 1]
    pool.advance([1], 5)
    pool.grow([1], 8)
    assert pool.slot_pages(1) == [0, 1]  # still inside page 1
    pool.advance([1], 8)
    with pytest.raises(ValueError, match="more than a slot's 3"):
        pool.grow([1], 13)
    with pytest.raises(ValueError, match="slot 1: 9 tokens, but its pages hold 8"):
        pool.advance([1], 9)
    pool.release([0])
    assert pool.references[:2].tolist() == [1, 1] and pool.pages_in_use == 2  # page 0 still slot 1's
    pool.release([1])
    assert pool.pages_in_use == 0 and pool.lengths.tolist() == [0, 0]
    assert pool.admit_group([0], 1) == GroupPages([0], [])  # freed pages come back, lowest first


def test_an_exhausted_pool_refuses_and_changes_nothing():
    pool = PagePool(num_pages=4, page_tokens=2, num_slots=2, max_pages_per_slot=3)
    pool.admit_group([0, 1], 3)  # pages 0 (shared) and 1 (slot 0's tail), 2 (slot 1's tail)
    with pytest.raises(PoolExhausted, match="2 pages asked for, 1 of 4 free"):
        pool.grow([0, 1], 5)  # positions 3, 4: one page more each
    assert pool.slot_pages(0) == [0, 1] and pool.slot_pages(1) == [0, 2] and pool.free_pages == 1
    pool.grow([1], 5)  # one fits
    assert pool.slot_pages(1) == [0, 2, 3] and pool.free_pages == 0
    with pytest.raises(ValueError, match="slot 0 is not free"):
        pool.admit_group([0], 1)


def test_tokens_stored_counts_a_shared_page_once():
    pool = PagePool(num_pages=8, page_tokens=4, num_slots=3, max_pages_per_slot=4)
    pool.admit_group([0, 1], 6)  # page 0 (4 tokens, shared), pages 1 and 2 (2 tokens each)
    pool.grow([1], 8)
    pool.advance([1], 8)
    assert pool.tokens_stored() == 4 + 2 + 4  # page 0 once, slot 0's page 1, slot 1's full page 2


def dense_reference(q, k_pages, v_pages, tables, lengths):
    """numpy: each slot's first `length` tokens read page by page into [S, KVH, D], then softmax
    attention of its NH query heads (head h on KV head h // (NH / KVH)), scaled by 1 / sqrt(D)."""
    q, k_pages, v_pages = (np.asarray(a, np.float64) for a in (q, k_pages, v_pages))
    batch, heads, dim = q.shape
    kv_heads, _, page_tokens, _ = k_pages.shape
    out = np.zeros_like(q)
    for b in range(batch):
        positions = range(int(lengths[b]))
        keys = np.stack([k_pages[:, tables[b][t // page_tokens], t % page_tokens] for t in positions])
        values = np.stack([v_pages[:, tables[b][t // page_tokens], t % page_tokens] for t in positions])
        for h in range(heads):
            kv = h // (heads // kv_heads)
            scores = keys[:, kv] @ q[b, h] / np.sqrt(dim)
            weights = np.exp(scores - scores.max())
            out[b, h] = (weights / weights.sum()) @ values[:, kv]
    return out


def attention_case(seed=0, head_dim=16, page_tokens=4, lengths=(13, 6, 9)):
    """3 slots on a pool of 12 pages of 4 tokens: 13 tokens (4 pages), 6 (2; its table's tail points at
    page 0, never read), 9 (3, the first shared with slot 0). 4 query heads on 2 KV heads of 16."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((3, 4, head_dim)).astype(np.float32)
    k_pages = rng.standard_normal((2, 12, page_tokens, head_dim)).astype(np.float32)
    v_pages = rng.standard_normal((2, 12, page_tokens, head_dim)).astype(np.float32)
    tables = np.array([[5, 1, 2, 3], [4, 9, 0, 0], [5, 7, 8, 0]], np.int32)
    return q, k_pages, v_pages, tables, np.array(lengths, np.int32)


def tpu_tiled_case():
    """`attention_case`'s slots on the TPU kernel's tiles: 3 slots of 29, 9 and 17 tokens on a pool
    of 12 pages of 8; 4 query heads on 2 KV heads of 128."""
    return attention_case(seed=1, head_dim=128, page_tokens=8, lengths=(29, 9, 17))


@pytest.mark.parametrize(
    "implementation, case",
    [
        ("gather", attention_case),
        ("pallas_gpu", attention_case),
        ("gather", tpu_tiled_case),
        ("pallas_tpu", tpu_tiled_case),
    ],
)
def test_paged_attention_matches_dense_attention_over_each_slots_tokens(implementation, case):
    """Each implementation against numpy; the Pallas kernels in their interpret modes (the TPU's
    simulates its memories on the CPU), the TPU's on its tiles (heads of 128, pages of 8). The TPU
    interpreter runs the kernel's float32 dots as the TPU's matrix unit does by default, in bfloat16
    passes: its scores and outputs come within 4e-3 here, so it is held to 1e-2; a token read from a
    wrong page or past a slot's length moves the outputs by tenths (all three slots are checked)."""
    q, k_pages, v_pages, tables, lengths = case()
    expected = dense_reference(q, k_pages, v_pages, tables, lengths)
    got = paged_decode_attention(
        jnp.asarray(q),
        jnp.asarray(k_pages),
        jnp.asarray(v_pages),
        jnp.asarray(tables),
        jnp.asarray(lengths),
        implementation=implementation,
        interpret=True,
    )
    tolerance = 1e-2 if implementation == "pallas_tpu" else 2e-5
    np.testing.assert_allclose(np.asarray(got), expected, rtol=tolerance, atol=tolerance)


def test_what_lies_past_a_slots_length_never_reaches_it():
    q, k_pages, v_pages, tables, lengths = attention_case()
    before = paged_decode_attention(*(jnp.asarray(a) for a in (q, k_pages, v_pages, tables, lengths)))
    k_pages[:, 3, 1:] = 1e4  # slot 0's positions 13..15 (page 3 offsets 1..3): past its 13 tokens
    k_pages[:, 0] = 1e4  # page 0: only in the unused tails of slots 1 and 2
    after = paged_decode_attention(*(jnp.asarray(a) for a in (q, k_pages, v_pages, tables, lengths)))
    np.testing.assert_array_equal(np.asarray(before), np.asarray(after))


def test_a_tpu_uses_its_kernel_only_on_whole_tiles(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert default_implementation(128, 16) == "pallas_tpu"
    assert default_implementation(64, 16) == "gather"  # SmolLM2's heads of 64
    assert default_implementation(128, 4) == "gather"
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert default_implementation(64, 4) == "pallas_gpu"
    assert default_implementation(96, 16) == "gather"  # Triton's arrays: powers of two only
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert default_implementation(128, 16) == "gather"


def test_an_unknown_implementation_is_named():
    q, k_pages, v_pages, tables, lengths = attention_case()
    with pytest.raises(ValueError, match="expected one of gather, pallas_gpu, pallas_tpu"):
        paged_decode_attention(*(jnp.asarray(a) for a in (q, k_pages, v_pages, tables, lengths)), implementation="x")


def test_decode_slot_count_by_hand():
    """The one rule for the decode slots a call starts with (the rollout, the estimate, the lowering lane)."""
    assert decode_slot_count(None, 8, 32, 4) == 8  # unset: the rollout micro-batch
    assert decode_slot_count(16, 8, 32, 4) == 16  # set: as set
    assert decode_slot_count(16, 8, 12, 4) == 12  # never more than the call's sequences
    assert decode_slot_count(2, 8, 32, 4) == 4  # never fewer than one group
    assert decode_slot_count(None, 8, 6, 4) == 6

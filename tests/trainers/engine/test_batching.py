"""Continuous batching over the paged KV cache (trainers/engine/batching.py) against today's static
sampler (`models.generate.generate`), the reference: the same prompts, key and sampling settings
give the same tokens, the same stops and the same log-probs (to float rounding), whether the
slots are fewer than the rows (refilled as sequences end), groups share their prompt's pages or
not, and whatever the chunk length. Tiny random model, CPU."""

import jax
import numpy as np
import pytest

from trainers.engine import batching
from trainers.engine.batching import EngineSettings, generate_paged, memory_slots, micro_batch_uniforms
from trainers.models import transformer
from trainers.models.generate import SamplingParams, generate
from trainers.models.presets import PRESETS

CFG = PRESETS["tiny"]
G = 3
PROMPT_LENGTHS = (7, 3, 5, 1)  # left-padded to 7: the engine stores only the valid tokens


@pytest.fixture(scope="module")
def model():
    return transformer.init_params(CFG, 0)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    width = max(PROMPT_LENGTHS)
    tokens = np.zeros((len(PROMPT_LENGTHS) * G, width), np.int32)
    valid = np.zeros_like(tokens, bool)
    for p, length in enumerate(PROMPT_LENGTHS):
        prompt = rng.integers(3, CFG.vocab_size, length)
        for g in range(G):
            tokens[p * G + g, width - length :], valid[p * G + g, width - length :] = prompt, True
    return tokens, valid


@pytest.fixture(scope="module")
def frequent_token(model, prompts):
    """A token the reference samples early in several rows: as EOS it ends rows at different steps."""
    reference = generate(*model, *prompts, jax.random.key(5), SamplingParams(max_new_tokens=12, prompt_group=G))
    values, counts = np.unique(reference.tokens[:, 1:6], return_counts=True)
    return int(values[np.argmax(counts)])


def compare(model, prompts, sampling, settings, key=5):
    reference = generate(*model, *prompts, jax.random.key(key), sampling)
    got, stats = generate_paged(*model, *prompts, jax.random.key(key), sampling, settings)
    np.testing.assert_array_equal(got.tokens, reference.tokens)
    np.testing.assert_array_equal(got.mask, reference.mask)
    np.testing.assert_array_equal(got.lengths, reference.lengths)
    np.testing.assert_allclose(got.logprobs, reference.logprobs, atol=2e-6)
    return reference, stats


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_samples_as_the_static_sampler_with_fewer_slots_than_rows(model, prompts, temperature):
    """12 rows (4 prompts x G 3) on 6 slots: two groups at a time, the others admitted as slots free."""
    sampling = SamplingParams(max_new_tokens=10, temperature=temperature, prompt_group=G)
    _, stats = compare(model, prompts, sampling, EngineSettings(num_slots=6, page_tokens=4, chunk_tokens=3))
    assert stats.prefills == 2 and stats.decode_tokens == 12 * 9  # token 0 of each row comes from its prefill
    # each group's prompt is stored once: 2 groups of prompts of <= 7 tokens + 3 x 9 new tokens each
    assert stats.peak_pages_in_use < 6 * (-(-(7 + 10) // 4))


@pytest.mark.parametrize("group, slots, chunk", [(G, 6, 3), (G, 4, 5), (1, 5, 2), (1, 12, 16)])
def test_rows_that_stop_early_free_their_slot_for_the_next(model, prompts, frequent_token, group, slots, chunk):
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, eos_id=frequent_token, prompt_group=group)
    reference, stats = compare(
        model, prompts, sampling, EngineSettings(num_slots=slots, page_tokens=4, chunk_tokens=chunk)
    )
    assert reference.lengths.min() < 12  # some rows did stop early
    assert stats.decode_tokens == int(reference.lengths.sum()) - 12  # every useful decode step, no other
    assert 0 < stats.slot_utilisation <= 1


def test_a_chunk_ends_as_soon_as_a_slot_can_be_refilled(model, prompts, frequent_token):
    """Groups of 1 on 2 slots with chunks of 16: while rows wait, a chunk ends at the step a row ends
    and its slot takes the next row at once, so no slot-step idles; once none waits, the last row
    leaves its bucket of 2 for one of 1 only with at least half a chunk (8 steps) to go, so fewer
    than 8 slot-steps idle in all. Without the early end a slot idles until the chunk's end."""
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, eos_id=frequent_token, prompt_group=1)
    reference, stats = compare(model, prompts, sampling, EngineSettings(num_slots=2, page_tokens=4, chunk_tokens=16))
    assert len(set(reference.lengths.tolist())) > 1  # rows end at different steps
    assert stats.decode_tokens == int(reference.lengths.sum()) - 12
    assert stats.decode_tokens <= stats.slot_steps < stats.decode_tokens + 8


def test_micro_batch_uniforms_are_each_micro_batch_keys():
    """10 rows in micro-batches of 4 (4, 4, 2), the k-th drawn from fold_in(key, 5 + 3k)."""
    key = jax.random.key(3)
    expected = []
    for k, size in enumerate((4, 4, 2)):
        step_keys = jax.random.split(jax.random.fold_in(key, 5 + 3 * k), 6)
        expected.append(np.stack([np.asarray(jax.random.uniform(s, (size,))) for s in step_keys]))
    np.testing.assert_array_equal(
        micro_batch_uniforms(key, 5, 10, 4, 6, call_stride=3), np.concatenate(expected, axis=1)
    )


class StopAfter:
    """A gate that admits one group at a time and none once `groups` have ended."""

    def __init__(self, groups):
        self.groups, self.ended_rows, self.seen = groups, [], {}

    def admit_limit(self, in_flight_groups):
        return 0 if len(self.ended_rows) >= self.groups else 1

    def ended(self, first_row, tokens, mask):
        self.ended_rows.append(first_row)
        self.seen[first_row] = (tokens, mask)


def test_a_gate_decides_admission_from_the_groups_that_ended(model, prompts, frequent_token):
    """4 groups of 3 on 6 slots, a gate that lets one group in at a time and closes once 2 have
    ended: the engine generates groups 0 and 1 only (admission in order), exactly as without the
    gate, hands each to the gate with its tokens as it ends, and leaves the others' rows empty."""
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0, eos_id=frequent_token, prompt_group=G)
    settings = EngineSettings(num_slots=6, page_tokens=4, chunk_tokens=3)
    whole, _ = generate_paged(*model, *prompts, jax.random.key(5), sampling, settings)
    gate = StopAfter(2)
    got, stats = generate_paged(*model, *prompts, jax.random.key(5), sampling, settings, gate=gate)
    assert sorted(gate.ended_rows) == [0, G]
    assert stats.prefills == 2  # one group at a time: the gate allowed no more
    np.testing.assert_array_equal(got.tokens[: 2 * G], whole.tokens[: 2 * G])
    np.testing.assert_array_equal(got.mask[: 2 * G], whole.mask[: 2 * G])
    assert not got.mask[2 * G :].any()
    for first, (tokens, mask) in gate.seen.items():
        np.testing.assert_array_equal(tokens, whole.tokens[first : first + G])
        np.testing.assert_array_equal(mask, whole.mask[first : first + G])


def test_memory_slots_by_hand():
    # 1 GiB free, half of it for pages, 16 MiB a slot: 32 slots fit; in groups of 3, 30
    mib = 1 << 20
    assert memory_slots(8, 96, 3, 16 * mib, 1024 * mib, 0.5) == 30
    assert memory_slots(8, 12, 3, 16 * mib, 1024 * mib, 0.5) == 12  # no more than the call's rows
    assert memory_slots(8, 96, 3, 16 * mib, 64 * mib, 0.5) == 8  # 2 fit: never below the setting
    assert memory_slots(8, 96, 3, 16 * mib, None, 0.5) == 8  # the CPU reports no memory
    assert memory_slots(8, 96, 3, 16 * mib, 1024 * mib, 0.0) == 8


def test_free_memory_is_read_from_one_process_s_own_device(monkeypatch):
    """A device that reports 10 GiB, 4 in use: 6 GiB free; none in a run of several processes,
    whose slot counts must agree (and whose mesh holds devices another process owns)."""

    class Device:
        def memory_stats(self):
            return {"bytes_limit": 10 << 30, "bytes_in_use": 4 << 30}

    monkeypatch.setattr(jax, "local_devices", lambda: [Device()])
    assert batching.free_device_bytes() == 6 << 30
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    assert batching.free_device_bytes() is None


def test_slots_grow_to_what_a_device_s_free_memory_holds(model, prompts, monkeypatch):
    """With memory_fraction and a device that reports ample free memory, 6 slots become the call's
    12 rows: one admission of all 4 groups instead of two, and the same tokens."""
    monkeypatch.setattr(batching, "free_device_bytes", lambda mesh=None: 1 << 30)
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0, prompt_group=G)
    settings = EngineSettings(num_slots=6, page_tokens=4, chunk_tokens=3, memory_fraction=0.5)
    reference, stats = compare(model, prompts, sampling, settings)
    assert stats.prefills == 1
    monkeypatch.setattr(batching, "free_device_bytes", lambda mesh=None: None)
    _, stats = compare(model, prompts, sampling, settings)
    assert stats.prefills == 2


def test_bad_batches_are_named(model, prompts):
    tokens, valid = prompts
    with pytest.raises(ValueError, match="LEFT-padded"):
        generate_paged(
            *model,
            tokens,
            valid[:, ::-1],
            jax.random.key(0),
            SamplingParams(max_new_tokens=2),
            EngineSettings(num_slots=2),
        )
    with pytest.raises(ValueError, match="a group must fit the slots"):
        generate_paged(
            *model,
            tokens,
            valid,
            jax.random.key(0),
            SamplingParams(max_new_tokens=2, prompt_group=G),
            EngineSettings(num_slots=2),
        )


def test_slot_buckets_grow_by_at_most_half():
    from trainers.engine.scheduler import slot_bucket

    assert [slot_bucket(n, 64) for n in (1, 2, 3, 5, 8, 9, 17, 25, 33, 49, 64)] == [
        1,
        2,
        4,
        8,
        8,
        16,
        24,
        32,
        48,
        64,
        64,
    ]
    assert slot_bucket(40, 40) == 40 and slot_bucket(3, 2) == 2


def _episode_replies(row, step, so_far):
    """A reply that depends on the row, the step and the tokens so far (so a wrong step or history
    changes it); every third pause ends the row."""
    if (row + step) % 3 == 0:
        return None
    return np.array([3 + (row + int(so_far.sum())) % 7, 4 + step % 5][: 1 + row % 2], np.int32)


@pytest.mark.parametrize("slots, chunk, piece", [(12, 5, 0), (6, 3, 0), (3, 16, 0), (6, 3, 2)])
def test_multi_turn_episodes_are_the_turn_samplers(model, prompts, frequent_token, slots, chunk, piece):
    """Turns end at EOS or at a stop sequence; each reply enters its slot as forced tokens
    while the other slots decode on. However the slots interleave the rows (fewer slots than rows,
    replies arriving mid-chunk, prompts prefilled in pieces), every row gets the tokens, forced/sampled
    marks, log-probs and pause calls (row, step, history) it gets alone in its slot for the whole
    budget (tests/trainers/models/test_generate_turns.py checks that against the static sampler)."""
    from trainers.models.generate import TurnStops

    graphdef, params = model
    tokens, valid = prompts
    sampling = SamplingParams(max_new_tokens=14, temperature=1.0, eos_id=frequent_token, prompt_group=G)
    turns = TurnStops(((41, 42), *((t,) for t in range(20, 40))))  # a turn ends at about one token in six
    calls_reference, calls_engine = [], []

    def recorder(calls):
        def on_turn_end(row, step, so_far):
            calls.append((row, step, tuple(so_far.tolist())))
            return _episode_replies(row, step, so_far)

        return on_turn_end

    reference, _ = generate_paged(
        graphdef,
        params,
        tokens,
        valid,
        jax.random.key(4),
        sampling,
        EngineSettings(num_slots=len(tokens), chunk_tokens=14),
        turns=turns,
        on_turn_end=recorder(calls_reference),
    )
    got, _ = generate_paged(
        graphdef,
        params,
        tokens,
        valid,
        jax.random.key(4),
        sampling,
        EngineSettings(num_slots=slots, page_tokens=4, chunk_tokens=chunk, prefill_chunk_tokens=piece),
        turns=turns,
        on_turn_end=recorder(calls_engine),
    )
    assert len(calls_reference) >= 6  # several pauses, some answered, some ending the row
    assert sorted(calls_engine) == sorted(calls_reference)
    np.testing.assert_array_equal(got.tokens, reference.tokens)
    np.testing.assert_array_equal(got.mask, reference.mask)
    np.testing.assert_array_equal(got.sampled, reference.sampled)
    np.testing.assert_allclose(got.logprobs, reference.logprobs, atol=2e-6)
    assert not got.sampled.all(where=got.mask)  # some forced tokens


def test_in_flight_weights_apply_from_the_next_chunk(model, prompts):
    """Weights fetched before every admission and chunk: with unchanged parameters the samples are
    the static sampler's, and each token carries the version of the weights that sampled it (a
    version per visit of the host, so chunk k's tokens carry a later version than chunk k-1's)."""
    graphdef, params = model
    tokens, valid = prompts
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0, prompt_group=G)
    versions = iter(range(1000))
    reference = generate(graphdef, params, tokens, valid, jax.random.key(3), sampling)
    got, stats = generate_paged(
        graphdef,
        lambda: (params, next(versions)),
        tokens,
        valid,
        jax.random.key(3),
        sampling,
        EngineSettings(num_slots=6, page_tokens=4, chunk_tokens=3),
        in_flight=True,
    )
    np.testing.assert_array_equal(got.tokens, reference.tokens)
    v = got.token_versions
    assert v[0, 0] == 0  # the first admission prefills with the weights taken at the start
    assert (np.diff(v[0, :10]) >= 0).all() and v[0, 9] > v[0, 1] > v[0, 0]
    assert v[0, 1] == v[0, 3] != v[0, 4]  # tokens 1-3 from one chunk, token 4 from the next
    assert v[-1, 0] > v[0, -1] - 4  # the second pair of groups is admitted later, with newer weights
    assert stats.decode_s > 0 and stats.prefill_s > 0


@pytest.mark.parametrize(
    "temperature, group, slots, piece", [(0.0, G, 6, 2), (1.0, G, 6, 3), (1.0, 1, 5, 2), (1.0, G, 12, 4)]
)
def test_long_prompts_are_prefilled_in_pieces_between_decode_chunks(
    model, prompts, frequent_token, monkeypatch, temperature, group, slots, piece
):
    """Prompts of 7, 3, 5 and 1 tokens prefilled `piece` tokens at a time (pages of 4: a piece may end
    mid-page and a prompt's partly filled last page is copied to the group's other slots once its
    last piece has run): the static sampler's samples all the same, and a group whose prompt is
    done decodes while a longer prompt admitted with it still takes pieces."""
    calls = []
    for name in ("prefill_piece", "decode_chunk", "admit_and_decode"):
        original = getattr(batching.programs, name)
        monkeypatch.setattr(
            batching.programs,
            name,
            lambda *args, _name=name, _original=original, **kw: calls.append(_name) or _original(*args, **kw),
        )
    sampling = SamplingParams(max_new_tokens=12, temperature=temperature, eos_id=frequent_token, prompt_group=group)
    _, stats = compare(
        model,
        prompts,
        sampling,
        EngineSettings(num_slots=slots, page_tokens=4, chunk_tokens=3, prefill_chunk_tokens=piece),
    )
    assert "admit_and_decode" not in calls  # prompts longer than a piece are never prefilled whole
    pieces = [i for i, name in enumerate(calls) if name == "prefill_piece"]
    assert len(pieces) >= -(-7 // piece)  # the 7-token prompt alone takes this many
    assert "decode_chunk" in calls[pieces[0] : pieces[-1]]  # decoding went on between pieces


@pytest.mark.parametrize("slots, piece", [(6, 0), (12, 0), (6, 3)])
def test_top_k_top_p_samples_record_the_full_distribution_s_logprobs_too(model, prompts, frequent_token, slots, piece):
    """top-k 40 and top-p 0.9 at temperature 0.7, through each way token 0 is sampled (the admission on
    its own with 6 slots, fused with the first chunk with 12, prefill pieces of 3): the engine samples
    the static sampler's tokens and records the truncated distribution's log-probs as before, and
    beside them the full distribution's: the static sampler's, and the trainer's log-prob pass at the
    same temperature (an independent forward over the whole sequences). The truncated ones are not:
    renormalised over the kept tokens, each is at least the full one."""
    from trainers.loop.update import make_logprob_fn

    graphdef, params = model
    tokens, valid = prompts
    sampling = SamplingParams(
        max_new_tokens=10, temperature=0.7, top_k=40, top_p=0.9, eos_id=frequent_token, prompt_group=G
    )
    assert sampling.truncates and not SamplingParams(max_new_tokens=1, temperature=0.7).truncates
    reference = generate(graphdef, params, tokens, valid, jax.random.key(5), sampling)
    settings = EngineSettings(num_slots=slots, page_tokens=4, chunk_tokens=3, prefill_chunk_tokens=piece)
    got, _ = generate_paged(graphdef, params, tokens, valid, jax.random.key(5), sampling, settings)
    np.testing.assert_array_equal(got.tokens, reference.tokens)
    np.testing.assert_array_equal(got.mask, reference.mask)
    np.testing.assert_allclose(got.logprobs, reference.logprobs, atol=2e-6)
    np.testing.assert_allclose(got.full_logprobs, reference.full_logprobs, atol=2e-6)
    mask = got.mask
    trainer = np.asarray(make_logprob_fn(graphdef, 0.7)(params, tokens, valid, got.tokens, mask))
    for result in (got, reference):
        np.testing.assert_allclose(result.full_logprobs[mask], trainer[mask], atol=1e-5)
        assert (result.full_logprobs[~mask] == 0).all()
    assert (got.logprobs[mask] >= got.full_logprobs[mask] - 1e-6).all()
    assert np.abs(got.logprobs[mask] - trainer[mask]).mean() > 1e-2

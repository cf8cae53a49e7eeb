"""Multi-turn decoding in the engine (`engine.batching.generate_paged` with turns): a row that ends
a turn pauses, gets the host's reply as forced tokens and goes on, while the other rows keep
decoding.

The reference is the plain sampler: greedily, what a row writes after a reply must be exactly what
`generate` writes from a fresh prompt made of the prompt, the row's turn and the reply (the forced
tokens fill the KV cache as a prefill would), and rows that never pause must be `generate`'s own.
"""

import jax
import numpy as np
import pytest

from tests.trainers.models.test_generate import CFG, EOS, PAD, sharpen
from tests.trainers.models.test_generate import random_prompts as _prompts
from trainers.engine.batching import EngineSettings, generate_paged
from trainers.models import transformer as model_lib
from trainers.models.generate import SamplingParams, TurnStops, generate

MAX_NEW = 24


def generate_turns(graphdef, weights, tokens, valid, key, sampling, turns, on_turn_end, chunk_tokens=0):
    """Every row in its own slot; chunk_tokens > 0: the newest weights before each chunk of that many
    decode steps."""
    result, _ = generate_paged(
        graphdef,
        weights,
        tokens,
        valid,
        key,
        sampling,
        EngineSettings(num_slots=len(tokens), chunk_tokens=chunk_tokens or 16),
        in_flight=chunk_tokens > 0,
        turns=turns,
        on_turn_end=on_turn_end,
    )
    return result


@pytest.fixture(scope="module")
def model():
    graphdef, params = model_lib.init_params(CFG, seed=1)
    return graphdef, sharpen(params)


def _left_pad(rows):
    width = max(len(r) for r in rows)
    tokens = np.full((len(rows), width), PAD, np.int32)
    valid = np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        tokens[i, width - len(r) :] = r
        valid[i, width - len(r) :] = True
    return tokens, valid


def test_a_reply_is_prefilled_and_decoding_goes_on_as_from_a_fresh_prompt(model):
    graphdef, params = model
    tokens, valid = _prompts([5, 3, 6])
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, eos_id=EOS, pad_id=PAD)
    key = jax.random.key(0)
    plain = generate(graphdef, params, tokens, valid, key, sampling)
    # Row 0's turn ends where its greedy tokens 2, 3 appear (a two-token stop sequence), if they
    # appear there first; the other rows must not meet it.
    stop = (int(plain.tokens[0, 2]), int(plain.tokens[0, 3]))
    first_hit = next(i for i in range(1, MAX_NEW) if tuple(plain.tokens[0, i - 1 : i + 1]) == stop)
    assert first_hit == 3
    for row in (1, 2):
        assert not any(tuple(plain.tokens[row, i - 1 : i + 1]) == stop for i in range(1, MAX_NEW)), "pick another seed"
    reply = np.array([7, 8, 9, 10], np.int32)
    calls = []

    def on_turn_end(row, step, so_far):
        calls.append((row, step, so_far.copy()))
        return reply if len(calls) == 1 else None

    turns = generate_turns(graphdef, lambda: (params, 0), tokens, valid, key, sampling, TurnStops((stop,)), on_turn_end)
    # One pause: row 0 after token index 3 (step 4), with its 4 tokens so far.
    assert calls[0][0] == 0 and calls[0][1] == 4
    np.testing.assert_array_equal(calls[0][2], plain.tokens[0, :4])
    row = turns.tokens[0]
    np.testing.assert_array_equal(row[:4], plain.tokens[0, :4])
    np.testing.assert_array_equal(row[4:8], reply)
    assert turns.sampled[0, :4].all() and not turns.sampled[0, 4:8].any() and turns.mask[0, 4:8].all()
    np.testing.assert_array_equal(turns.logprobs[0, 4:8], 0.0)
    # After the reply: greedy decoding from prompt + turn + reply, as a fresh prefill gives it.
    context = np.concatenate([tokens[0][valid[0]], plain.tokens[0, :4], reply])
    fresh_tokens, fresh_valid = _left_pad([context])
    fresh = generate(
        graphdef,
        params,
        fresh_tokens,
        fresh_valid,
        key,
        SamplingParams(max_new_tokens=MAX_NEW - 8, temperature=0.0, eos_id=EOS, pad_id=PAD),
    )
    n = int(fresh.lengths[0])
    np.testing.assert_array_equal(row[8 : 8 + n], fresh.tokens[0, :n])
    # float32 on a CPU agrees to ~1e-6; an H100's decode and prefill matmuls round apart by ~1e-3.
    np.testing.assert_allclose(turns.logprobs[0, 8 : 8 + n], fresh.logprobs[0, :n], atol=5e-3)
    # The rows that never paused are the plain sampler's.
    for r in (1, 2):
        np.testing.assert_array_equal(turns.tokens[r], plain.tokens[r])
        np.testing.assert_array_equal(turns.sampled[r], plain.mask[r])


def test_the_training_forward_over_a_whole_episode_gives_the_sampled_logprobs(model):
    """The loss sees the episode as one sequence (prompt, then every token after it): the forward's
    log-probs at the sampled tokens must be those recorded while sampling with the reply in the cache."""
    graphdef, params = model
    tokens, valid = _prompts([4, 6], seed=3)
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS, pad_id=PAD)
    key = jax.random.key(5)
    pauses = []

    def on_turn_end(row, step, so_far):
        pauses.append(row)
        return np.array([11, 12, 13], np.int32) if len(pauses) <= 2 else None

    any_token = tuple((t,) for t in range(3, 40))  # a turn ends at almost any token: several pauses
    result = generate_turns(
        graphdef, lambda: (params, 0), tokens, valid, key, sampling, TurnStops(any_token), on_turn_end
    )
    assert len(pauses) >= 2 and not result.sampled.all(where=result.mask)
    logprobs, _ = model_lib.completion_logprobs(graphdef, params, tokens, valid, result.tokens, result.mask, 1.0)
    logprobs = np.asarray(logprobs)
    np.testing.assert_allclose(logprobs[result.sampled], result.logprobs[result.sampled], atol=2e-4)


def test_a_reply_that_does_not_fit_ends_the_row_and_chunks_take_new_weights(model):
    graphdef, params = model
    tokens, valid = _prompts([3, 3])
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0, eos_id=EOS, pad_id=PAD)
    versions = iter(range(100))

    def weights():
        return params, next(versions)

    result = generate_turns(
        graphdef,
        weights,
        tokens,
        valid,
        jax.random.key(2),
        sampling,
        TurnStops(tuple((t,) for t in range(CFG.vocab_size))),
        lambda row, step, so_far: np.arange(3, 3 + 20, dtype=np.int32),
        chunk_tokens=2,
    )
    # Every row paused at token 0 and got a 20-token reply that cannot fit in 10: ended there.
    assert result.mask.sum(axis=1).tolist() == [1, 1]
    assert result.sampled[:, 0].all()
    assert result.token_versions[0, 0] == 0

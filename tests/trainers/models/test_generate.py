"""Tests for trainers/models/generate.py (CPU, float32, tiny model)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from trainers.engine.batching import EngineSettings, generate_paged
from trainers.models import generate as generate_lib
from trainers.models import transformer as model_lib
from trainers.models.generate import SamplingParams
from trainers.models.presets import PRESETS

CFG = PRESETS["tiny"]
MAX_NEW = 12
PAD, EOS = 0, 2


def sharpen(params, factor: float = 8.0):
    """Scale the LM head so distributions are peaked (clear argmax gaps, varied sampling)."""
    weights = nnx.to_pure_dict(params)
    weights["lm_head"] = weights["lm_head"] * factor
    sharpened = jax.tree.map(lambda x: x, params)
    nnx.replace_by_pure_dict(sharpened, weights)
    return sharpened


def boost_token(params, token: int, strength: float):
    """Params whose next-token logit for `token` is about +strength at every position.

    Every embedding gets a large component along hidden dim 0, so the final normed hidden state
    is ~ +sqrt(H) on dim 0; lm_head[0, token] then sets that token's logit."""
    weights = nnx.to_pure_dict(params)
    weights["embed"] = weights["embed"].at[:, 0].add(100.0)
    weights["lm_head"] = weights["lm_head"].at[0, token].set(strength / np.sqrt(CFG.hidden_size))
    boosted = jax.tree.map(lambda x: x, params)
    nnx.replace_by_pure_dict(boosted, weights)
    return boosted


@pytest.fixture(scope="module")
def model():
    graphdef, params = model_lib.init_params(CFG, seed=0)
    return graphdef, sharpen(params)


def random_prompts(lengths: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random prompts of these lengths (ids 3..vocab), left-padded to the longest: (tokens, valid)."""
    rng = np.random.default_rng(seed)
    prompt_len = max(lengths)
    tokens = np.full((len(lengths), prompt_len), PAD, np.int32)
    valid = np.zeros((len(lengths), prompt_len), bool)
    for row, length in enumerate(lengths):
        tokens[row, prompt_len - length :] = rng.integers(3, CFG.vocab_size, size=length)
        valid[row, prompt_len - length :] = True
    return tokens, valid


@pytest.fixture(scope="module")
def prompts():
    """4 prompts of lengths 5, 2, 7, 4, left-padded to 7."""
    return random_prompts([5, 2, 7, 4])


@pytest.fixture(scope="module")
def logprobs_jit():
    return jax.jit(model_lib.completion_logprobs, static_argnums=(0, 6))


def check_result_invariants(result, sampling: SamplingParams, batch: int):
    assert result.tokens.shape == (batch, sampling.max_new_tokens) and result.tokens.dtype == np.int32
    assert result.logprobs.shape == (batch, sampling.max_new_tokens) and result.logprobs.dtype == np.float32
    assert result.mask.shape == (batch, sampling.max_new_tokens) and result.mask.dtype == np.bool_
    assert result.lengths.shape == (batch,) and result.lengths.dtype == np.int32
    np.testing.assert_array_equal(result.lengths, result.mask.sum(1))
    for row in range(batch):
        length = result.lengths[row]
        assert result.mask[row, :length].all() and not result.mask[row, length:].any()
        assert (result.tokens[row, length:] == sampling.pad_id).all()
        assert (result.logprobs[row, length:] == 0).all()
        if sampling.stop_at_eos:
            # EOS only as the last generated token; a row shorter than max_new_tokens ended with EOS.
            assert not (result.tokens[row, : length - 1] == sampling.eos_id).any()
            if length < sampling.max_new_tokens:
                assert result.tokens[row, length - 1] == sampling.eos_id
    assert result.decode_steps == result.lengths.max()
    assert np.all(result.logprobs[result.mask] <= 0)


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS),
        SamplingParams(max_new_tokens=MAX_NEW, temperature=0.7, top_k=20, top_p=0.9, eos_id=EOS),
        SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, eos_id=EOS),
    ],
    ids=["t1", "t0.7-topk-topp", "greedy"],
)
def test_recorded_logprobs_match_completion_logprobs(model, prompts, logprobs_jit, sampling):
    """Without filters the recorded log-probs are the policy's (what `completion_logprobs` computes);
    with top-k / top-p they are those of the renormalised distribution actually sampled from,
    recomputed here with numpy from the full forward's logits."""
    graphdef, params = model
    tokens, valid = prompts
    result = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(1), sampling)
    check_result_invariants(result, sampling, batch=tokens.shape[0])
    logprobs, _ = logprobs_jit(graphdef, params, tokens, valid, result.tokens, result.mask, sampling.temperature)
    if sampling.top_k == 0 and sampling.top_p == 1.0:
        np.testing.assert_allclose(result.logprobs, np.asarray(logprobs), atol=1e-4)
        return
    full = np.asarray(
        model_lib.forward(
            graphdef,
            params,
            np.concatenate([tokens, result.tokens], axis=1),
            np.concatenate([valid, result.mask], axis=1),
        ),
        np.float64,
    )
    prompt_len = tokens.shape[1]
    expected = np.zeros(result.logprobs.shape)
    for b, j in zip(*np.nonzero(result.mask)):
        scaled = full[b, prompt_len - 1 + j] / sampling.temperature
        keep = scaled >= np.sort(scaled)[-sampling.top_k]  # top-k
        probs = np.where(keep, np.exp(scaled - scaled.max()), 0.0)
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        before = np.cumsum(probs[order]) - probs[order]  # mass of more likely tokens
        nucleus = np.zeros_like(keep)
        nucleus[order[before < sampling.top_p]] = True  # top-p of the top-k
        probs = np.where(nucleus, probs, 0.0)
        expected[b, j] = np.log(probs[result.tokens[b, j]] / probs.sum())
    np.testing.assert_allclose(result.logprobs, expected, atol=1e-4)
    # The truncated distribution is more concentrated than the policy: the recorded log-prob is higher.
    assert (result.logprobs[result.mask] >= np.asarray(logprobs)[result.mask] - 1e-5).all()
    assert (result.logprobs[result.mask] > np.asarray(logprobs)[result.mask] + 1e-3).any()


def test_greedy_is_deterministic_and_matches_full_forward(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, stop_at_eos=False)
    first = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(0), sampling)
    second = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(123), sampling)
    np.testing.assert_array_equal(first.tokens, second.tokens)
    np.testing.assert_array_equal(first.logprobs, second.logprobs)

    # Reference: argmax continuation by repeated full forward passes over a fixed-size buffer.
    batch, prompt_len = tokens.shape
    buffer = np.concatenate([tokens, np.full((batch, MAX_NEW), PAD, np.int32)], axis=1)
    buffer_valid = np.concatenate([valid, np.zeros((batch, MAX_NEW), bool)], axis=1)
    forward = jax.jit(model_lib.forward, static_argnums=0)
    for step in range(MAX_NEW):
        logits = np.asarray(forward(graphdef, params, buffer, buffer_valid))
        buffer[:, prompt_len + step] = logits[:, prompt_len + step - 1].argmax(-1)
        buffer_valid[:, prompt_len + step] = True
    np.testing.assert_array_equal(first.tokens, buffer[:, prompt_len:])
    assert first.mask.all() and first.decode_steps == MAX_NEW


def test_eos_stops_each_sequence(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    free = generate_lib.generate(
        graphdef,
        params,
        tokens,
        valid,
        jax.random.key(0),
        SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, stop_at_eos=False),
    )
    # Use as EOS the first token that greedy decoding of row 0 emits for the first time at step >= 2.
    stop_step = next(step for step in range(2, MAX_NEW) if free.tokens[0, step] not in free.tokens[0, :step])
    eos_id = int(free.tokens[0, stop_step])
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, eos_id=eos_id, pad_id=PAD)
    stopped = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(0), sampling)
    check_result_invariants(stopped, sampling, batch=tokens.shape[0])
    assert stopped.lengths[0] == stop_step + 1
    for row in range(tokens.shape[0]):
        hits = np.flatnonzero(free.tokens[row] == eos_id)
        expected_length = hits[0] + 1 if hits.size else MAX_NEW
        assert stopped.lengths[row] == expected_length
        np.testing.assert_array_equal(stopped.tokens[row, :expected_length], free.tokens[row, :expected_length])
        np.testing.assert_array_equal(stopped.logprobs[row, :expected_length], free.logprobs[row, :expected_length])


def test_early_exit_when_all_sequences_stop(model, prompts, logprobs_jit):
    graphdef, params = model
    tokens, valid = prompts
    # EOS always the argmax: every sequence stops after its first token.
    always_eos = boost_token(params, EOS, strength=40.0)
    greedy = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, eos_id=EOS)
    result = generate_lib.generate(graphdef, always_eos, tokens, valid, jax.random.key(0), greedy)
    check_result_invariants(result, greedy, batch=tokens.shape[0])
    assert result.decode_steps == 1
    np.testing.assert_array_equal(result.lengths, 1)
    assert (result.tokens[:, 0] == EOS).all()

    # EOS likely but not certain: sequences stop at different steps, the loop stops with the last one.
    often_eos = boost_token(params, EOS, strength=6.0)
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS)
    result = generate_lib.generate(graphdef, often_eos, tokens, valid, jax.random.key(2), sampling)
    check_result_invariants(result, sampling, batch=tokens.shape[0])
    assert result.decode_steps < MAX_NEW
    assert len(set(result.lengths.tolist())) > 1
    logprobs, _ = logprobs_jit(graphdef, often_eos, tokens, valid, result.tokens, result.mask, 1.0)
    np.testing.assert_allclose(result.logprobs, np.asarray(logprobs), atol=1e-4)


def test_no_stop_generates_exactly_max_new_tokens(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    always_eos = boost_token(params, EOS, strength=40.0)
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS, stop_at_eos=False)
    result = generate_lib.generate(graphdef, always_eos, tokens, valid, jax.random.key(0), sampling)
    check_result_invariants(result, sampling, batch=tokens.shape[0])
    assert result.decode_steps == MAX_NEW
    assert result.mask.all() and (result.lengths == MAX_NEW).all()
    assert (result.tokens == EOS).all()


def test_top_k_1_and_tiny_top_p_equal_greedy(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    greedy = generate_lib.generate(
        graphdef,
        params,
        tokens,
        valid,
        jax.random.key(0),
        SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, eos_id=EOS),
    )
    top_k_1 = generate_lib.generate(
        graphdef,
        params,
        tokens,
        valid,
        jax.random.key(5),
        SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, top_k=1, eos_id=EOS),
    )
    top_p_tiny = generate_lib.generate(
        graphdef,
        params,
        tokens,
        valid,
        jax.random.key(6),
        SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, top_p=1e-6, eos_id=EOS),
    )
    for result in (top_k_1, top_p_tiny):
        np.testing.assert_array_equal(result.tokens, greedy.tokens)
        np.testing.assert_array_equal(result.mask, greedy.mask)
        # the filters keep one token: it was sampled with probability 1 (greedy records the policy's)
        np.testing.assert_array_equal(result.logprobs, np.zeros_like(result.logprobs))
        assert (greedy.logprobs[greedy.mask] < 0).all()


def test_same_key_same_output_and_no_retrace(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS)
    first = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(7), sampling)
    cache_size = generate_lib._generate_jit._cache_size()
    again = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(7), sampling)
    other = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(8), sampling)
    assert generate_lib._generate_jit._cache_size() == cache_size  # compiled once for these static values
    np.testing.assert_array_equal(first.tokens, again.tokens)
    np.testing.assert_array_equal(first.logprobs, again.logprobs)
    assert not np.array_equal(first.tokens, other.tokens)


def test_filter_logits():
    logits = jnp.log(jnp.array([[0.5, 0.2, 0.15, 0.1, 0.05]], jnp.float32))
    top_2 = generate_lib.filter_logits(logits, top_k=2, top_p=1.0)
    np.testing.assert_array_equal(np.isfinite(np.asarray(top_2)), [[True, True, False, False, False]])
    nucleus = generate_lib.filter_logits(logits, top_k=0, top_p=0.8)  # 0.5 + 0.2 < 0.8 <= 0.85
    np.testing.assert_array_equal(np.isfinite(np.asarray(nucleus)), [[True, True, True, False, False]])
    # top-p acts on the renormalised top-k distribution: mass before the 4th token is 0.85 of the full
    # distribution (kept by top_p=0.87) but 0.85/0.95 = 0.895 of the top-4 one (dropped).
    only_top_p = generate_lib.filter_logits(logits, top_k=0, top_p=0.87)
    np.testing.assert_array_equal(np.isfinite(np.asarray(only_top_p)), [[True, True, True, True, False]])
    both = generate_lib.filter_logits(logits, top_k=4, top_p=0.87)
    np.testing.assert_array_equal(np.isfinite(np.asarray(both)), [[True, True, True, False, False]])
    unchanged = generate_lib.filter_logits(logits, top_k=0, top_p=1.0)
    np.testing.assert_array_equal(np.asarray(unchanged), np.asarray(logits))


def test_sample_token_follows_the_distribution():
    probs = np.array([0.5, 0.0, 0.3, 0.15, 0.05], np.float32)
    num_draws = 20000
    logits = jnp.tile(jnp.log(jnp.asarray(probs))[None], (num_draws, 1))
    uniforms = jax.random.uniform(jax.random.key(0), (num_draws,))
    sampling = SamplingParams(max_new_tokens=1, temperature=1.0)
    tokens, logprobs = jax.jit(generate_lib.sample_token, static_argnums=2)(logits, uniforms, sampling)
    frequencies = np.bincount(np.asarray(tokens), minlength=5) / num_draws
    np.testing.assert_allclose(frequencies, probs, atol=0.015)
    assert frequencies[1] == 0  # zero-probability token never drawn
    np.testing.assert_allclose(np.asarray(logprobs), np.log(probs[np.asarray(tokens)]), atol=1e-5)


def test_sample_token_records_the_logprob_of_the_truncated_distribution_it_samples_from():
    """The recorded log-prob is that of the distribution actually sampled from (after temperature,
    top-k, top-p), so that pi_old / pi_gen is the ratio of the policy to the sampling distribution.
    Logits [2, 1, 0.5, -1, 0] at temperature 0.5 -> scaled [4, 2, 1, -2, 0]."""
    logits = jnp.array([[2.0, 1.0, 0.5, -1.0, 0.0]], jnp.float32)
    e = [math.exp(4.0), math.exp(2.0), math.exp(1.0), math.exp(-2.0), math.exp(0.0)]
    # top_k=3 keeps tokens 0, 1, 2 (scaled 4, 2, 1), renormalised over those three.
    top_k = {0: e[0] / (e[0] + e[1] + e[2]), 1: e[1] / (e[0] + e[1] + e[2]), 2: e[2] / (e[0] + e[1] + e[2])}
    # top_p=0.9 alone: full probabilities 0.829, 0.112, 0.041, 0.015, 0.002; the mass before token 1
    # is 0.829 < 0.9 (kept), before token 2 it is 0.941 (dropped): the nucleus is tokens 0 and 1.
    full = [x / sum(e) for x in e]
    assert full[0] < 0.9 <= full[0] + full[1]
    top_p = {0: e[0] / (e[0] + e[1]), 1: e[1] / (e[0] + e[1])}
    for sampling, kept in [
        (SamplingParams(max_new_tokens=1, temperature=0.5, top_k=3), top_k),
        (SamplingParams(max_new_tokens=1, temperature=0.5, top_p=0.9), top_p),
    ]:
        # one uniform in the middle of each kept token's CDF interval, and one just below 1
        cdf = np.cumsum([kept[t] for t in sorted(kept)])
        lower = np.concatenate([[0.0], cdf[:-1]])
        uniforms = np.concatenate([(lower + cdf) / 2, [0.9999]]).astype(np.float32)
        expected_tokens = sorted(kept) + [max(kept)]
        tokens, logprobs = generate_lib.sample_token(
            jnp.tile(logits, (len(uniforms), 1)), jnp.asarray(uniforms), sampling
        )
        np.testing.assert_array_equal(np.asarray(tokens), expected_tokens)
        np.testing.assert_allclose(np.asarray(logprobs), [math.log(kept[t]) for t in expected_tokens], rtol=1e-5)
    # Greedy keeps its convention: log_softmax of the raw logits (temperature 1).
    token, logprob = generate_lib.sample_token(logits, jnp.zeros(1), SamplingParams(max_new_tokens=1, temperature=0.0))
    raw = [math.exp(x) for x in (2.0, 1.0, 0.5, -1.0, 0.0)]
    assert int(token[0]) == 0 and float(logprob[0]) == pytest.approx(math.log(raw[0] / sum(raw)), rel=1e-6)


def test_sample_token_logprobs_adds_the_full_distribution_s_logprob():
    """Beside the truncated distribution's log-prob, the full one's: log_softmax(logits / temperature)
    of the same token, by hand. Logits [2, 1, 0.5, -1, 0] at temperature 0.5 -> scaled [4, 2, 1, -2, 0];
    top_k=3 keeps tokens 0, 1, 2. Same tokens and truncated log-probs as `sample_token`; without a
    filter, and greedy (log_softmax of the raw logits), the two log-probs are one."""
    logits = jnp.tile(jnp.array([[2.0, 1.0, 0.5, -1.0, 0.0]], jnp.float32), (3, 1))
    uniforms = jnp.array([0.1, 0.95, 0.9999], jnp.float32)
    scaled = [4.0, 2.0, 1.0, -2.0, 0.0]
    full_norm = math.log(sum(math.exp(x) for x in scaled))
    kept_norm = math.log(sum(math.exp(x) for x in scaled[:3]))
    sampling = SamplingParams(max_new_tokens=1, temperature=0.5, top_k=3)
    tokens, logprobs, full = generate_lib.sample_token_logprobs(logits, uniforms, sampling)
    expected_tokens = [0, 1, 2]  # CDF of the kept three: 0.844, 0.958, 1
    np.testing.assert_array_equal(np.asarray(tokens), expected_tokens)
    np.testing.assert_allclose(np.asarray(logprobs), [scaled[t] - kept_norm for t in expected_tokens], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(full), [scaled[t] - full_norm for t in expected_tokens], rtol=1e-5)
    plain_tokens, plain_logprobs = generate_lib.sample_token(logits, uniforms, sampling)
    np.testing.assert_array_equal(np.asarray(plain_tokens), np.asarray(tokens))
    np.testing.assert_array_equal(np.asarray(plain_logprobs), np.asarray(logprobs))
    for unfiltered in (
        SamplingParams(max_new_tokens=1, temperature=0.5),
        SamplingParams(max_new_tokens=1, temperature=0.0),
    ):
        _, logprobs, full = generate_lib.sample_token_logprobs(logits, uniforms, unfiltered)
        np.testing.assert_array_equal(np.asarray(full), np.asarray(logprobs))
        assert not unfiltered.truncates
    raw = [2.0, 1.0, 0.5, -1.0, 0.0]
    assert float(full[0]) == pytest.approx(raw[0] - math.log(sum(math.exp(x) for x in raw)), rel=1e-6)  # greedy


def test_rejects_right_padded_prompts(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    with pytest.raises(ValueError, match="LEFT-padded"):
        generate_lib.generate(
            graphdef, params, tokens[:, ::-1], valid[:, ::-1], jax.random.key(0), SamplingParams(max_new_tokens=MAX_NEW)
        )


def generate_in_flight(graphdef, weights, tokens, valid, key, sampling, chunk_tokens):
    """In-flight weights through the engine: every row in its own slot from the start, the newest
    weights taken before each chunk of `chunk_tokens` decode steps."""
    result, _ = generate_paged(
        graphdef,
        weights,
        tokens,
        valid,
        key,
        sampling,
        EngineSettings(num_slots=len(tokens), chunk_tokens=chunk_tokens),
        in_flight=True,
    )
    return result


class Weights:
    """A `weights()` callback for in-flight generation: (params, version) from `schedule[call]`, the
    last entry repeating; counts its calls."""

    def __init__(self, *schedule):
        self.schedule, self.calls = schedule, 0

    def __call__(self):
        entry = self.schedule[min(self.calls, len(self.schedule) - 1)]
        self.calls += 1
        return entry


@pytest.mark.parametrize("chunk_tokens", [1, 5, MAX_NEW + 3])
def test_in_flight_with_unchanging_weights_equals_generate(model, prompts, chunk_tokens):
    graphdef, params = model
    tokens, valid = prompts
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS)
    whole = generate_lib.generate(graphdef, params, tokens, valid, jax.random.key(3), sampling)
    weights = Weights((params, 7))
    chunked = generate_in_flight(graphdef, weights, tokens, valid, jax.random.key(3), sampling, chunk_tokens)
    check_result_invariants(chunked, sampling, batch=tokens.shape[0])
    np.testing.assert_array_equal(chunked.tokens, whole.tokens)
    np.testing.assert_array_equal(chunked.mask, whole.mask)
    np.testing.assert_allclose(chunked.logprobs, whole.logprobs, atol=1e-5)
    assert chunked.decode_steps == whole.decode_steps
    assert (chunked.token_versions == 7).all()
    # weights are asked for before the prefill and before each chunk of decode steps, none after the end
    assert weights.calls == 1 + -(-(whole.decode_steps - 1) // chunk_tokens)


def test_in_flight_swap_applies_from_the_next_chunk_and_keeps_the_kv_cache(model, prompts, logprobs_jit):
    graphdef, params_a = model
    tokens, valid = prompts
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0, eos_id=EOS, stop_at_eos=False)
    key, chunk = jax.random.key(4), 3
    swap_at = 1 + chunk  # prefill samples token 0, the first chunk tokens 1..3; B samples from token 4
    only_a = generate_lib.generate(graphdef, params_a, tokens, valid, key, sampling)

    def run(params_b):
        result = generate_in_flight(
            graphdef, Weights((params_a, 0), (params_a, 0), (params_b, 1)), tokens, valid, key, sampling, chunk
        )
        check_result_invariants(result, sampling, batch=tokens.shape[0])
        np.testing.assert_array_equal(result.tokens[:, :swap_at], only_a.tokens[:, :swap_at])
        np.testing.assert_allclose(result.logprobs[:, :swap_at], only_a.logprobs[:, :swap_at], atol=1e-5)
        assert (result.token_versions[:, :swap_at] == 0).all() and (result.token_versions[:, swap_at:] == 1).all()
        under_b, _ = logprobs_jit(graphdef, params_b, tokens, valid, result.tokens, result.mask, 1.0)
        return result, np.asarray(under_b)[:, swap_at:]

    # B = A with a sharper LM head: same keys and values, so the kept cache is exactly B's own and
    # the recorded log-probs after the swap are B's full-forward log-probs.
    head_only, under_b = run(sharpen(params_a, 1.5))
    np.testing.assert_allclose(head_only.logprobs[:, swap_at:], under_b, atol=1e-4)
    assert not np.array_equal(head_only.tokens, only_a.tokens)
    # B = another model: its log-probs differ from a full forward of B, because the cache before the
    # swap still holds A's keys and values (kept, not recomputed).
    _, params_other = model_lib.init_params(CFG, seed=1)
    other, under_other = run(sharpen(params_other))
    assert np.abs(other.logprobs[:, swap_at:] - under_other).max() > 1e-2


def test_in_flight_rejects_a_zero_chunk(model, prompts):
    graphdef, params = model
    tokens, valid = prompts
    with pytest.raises(ValueError, match="chunk_tokens"):
        generate_in_flight(
            graphdef, Weights((params, 0)), tokens, valid, jax.random.key(0), SamplingParams(max_new_tokens=MAX_NEW), 0
        )

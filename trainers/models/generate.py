"""Sampling for the transformer in `trainers.models.transformer`: what a generator is given and
returns (`SamplingParams`, `GenerationResult`, `TurnStops`), the sampler every generator draws with
(`sample_token`), and `generate`, the static-batch sampler: the reference the generation engine
(`trainers.engine.batching.generate_paged`, which the trainer generates with) is checked against
token for token, and the benchmarks' baseline.

`generate` runs one prefill over the (left-padded) prompts, filling a KV cache of
Lp + max_new_tokens slots, then a `jax.lax.while_loop` of single-token decode steps that exits
early once every sequence has emitted EOS. Prefill and loop are one jitted function, compiled once
per (graphdef, sampling params, B, Lp) and cached by `jax.jit` (graphdef and sampling are static).

Shape letters: B batch, Lp prompt length, N = max_new_tokens, S = Lp + N cache slots, V vocab.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from trainers.models import transformer as model_lib
from trainers.parallel.host import to_host


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    stop_at_eos: bool = True  # False: always generate exactly max_new_tokens (benchmarks)
    eos_id: int = 2
    pad_id: int = 0
    extra_eos_ids: tuple[int, ...] = ()  # more ids that end a sequence (a chat model's end-of-turn, ...)
    prompt_group: int = 1  # rows come in groups of this many copies of one prompt (GRPO's G): the
    #                        prefill runs once per group and its KV cache is shared by the copies

    @property
    def truncates(self) -> bool:
        """Tokens are drawn from a top-k / top-p truncation of the temperature-scaled distribution
        (not greedy): their recorded log-probs are then those of the truncated distribution, and the
        full distribution's are recorded beside them (`sample_token_logprobs`)."""
        return self.temperature != 0.0 and (self.top_k > 0 or self.top_p < 1.0)


class StaticGraph:
    """A GraphDef as a `jax.jit` static argument whose hash is computed once: jit hashes its static
    arguments at every call, and hashing a model's GraphDef walks the whole graph (about 1.3 ms for a
    4-layer model on a CPU), which the engine's chunked decode would pay at every chunk. One per
    GraphDef object (`static_graph`)."""

    __slots__ = ("graphdef", "_hash")

    def __init__(self, graphdef: nnx.GraphDef) -> None:
        self.graphdef, self._hash = graphdef, hash(graphdef)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticGraph) and (other.graphdef is self.graphdef or other.graphdef == self.graphdef)


_STATIC_GRAPHS: dict[int, StaticGraph] = {}


def static_graph(graphdef: nnx.GraphDef | StaticGraph) -> StaticGraph:
    """The `StaticGraph` of `graphdef` (kept per object: it holds the GraphDef, so the id stays its own)."""
    if isinstance(graphdef, StaticGraph):
        return graphdef
    held = _STATIC_GRAPHS.get(id(graphdef))
    if held is None or held.graphdef is not graphdef:
        held = _STATIC_GRAPHS[id(graphdef)] = StaticGraph(graphdef)
    return held


@dataclasses.dataclass(frozen=True)
class TurnStops:
    """Multi-turn decoding (the engine's `turns`; static, hashable). A row's turn ends at an EOS id or when
    its newest generated tokens spell one of `sequences` (token ids, e.g. those of "</tool_call>");
    the row then pauses for the host, which either ends it or writes the environment's reply into
    it as forced tokens (`forced`: context, not sampled) and lets it go on."""

    sequences: tuple[tuple[int, ...], ...] = ()


def eos_settings(tokenizer) -> dict:
    """SamplingParams fields for a tokenizer's end of sequence: `eos_id` (its primary EOS), `pad_id`
    and `extra_eos_ids` (every other id in its `eos_ids`, e.g. a chat model's end-of-turn)."""
    eos_ids = tuple(getattr(tokenizer, "eos_ids", (tokenizer.eos_id,)))
    return {
        "eos_id": tokenizer.eos_id,
        "pad_id": tokenizer.pad_id,
        "extra_eos_ids": tuple(i for i in eos_ids if i != tokenizer.eos_id),
    }


@dataclasses.dataclass
class GenerationResult:  # numpy arrays
    tokens: np.ndarray  # [B, N] int32; pad_id after a sequence stopped
    logprobs: np.ndarray  # [B, N] float32: log-prob of the sampled token under the distribution it was drawn
    #                       from (temperature, top-k, top-p; greedy: log_softmax(logits)); 0 where mask is False
    mask: np.ndarray  # [B, N] bool: True for generated tokens, including the EOS token itself
    lengths: np.ndarray  # [B] int32 number of generated tokens (incl. EOS)
    decode_steps: int  # token-sampling steps actually run (<= N; < N after an early exit); the prefill
    #                    feeds step 0, each later step is one decode forward
    token_versions: np.ndarray | None = None  # [B, N] int32, the engine only: the version of the
    #                    weights that sampled each token (meaningful where mask is True)
    sampled: np.ndarray | None = None  # [B, N] bool, multi-turn only: True where the model sampled
    #                    the token, False on forced tokens (an environment's reply); None = mask
    full_logprobs: np.ndarray | None = None  # [B, N] float32: log-prob of the sampled token under the
    #                    full distribution, log_softmax(logits / temperature) before top-k / top-p
    #                    (greedy: log_softmax(logits)), as the trainer's log-prob pass scores it; 0 where
    #                    `logprobs` is 0. Both generators set it; without a filter it is `logprobs` itself.


def cast_for_generation(params, dtype) -> nnx.State:
    """The weights a generator reads, with every float32 matrix (>= 2 dims: embeddings, projection
    and LM-head kernels) cast to the compute `dtype` once, instead of at every decode step: the decode
    loop then reads half the bytes with bfloat16. The model casts these matrices to its compute dtype
    where it uses them (`transformer.Linear`, `embed`, `logits`), so the samples and their log-probs
    are exactly those of the float32 weights; vectors (norm scales, biases) stay as they are (norms
    compute in float32). dtype None or float32: `params` itself."""
    if dtype is None or jnp.dtype(dtype) == jnp.float32:
        return params
    return jax.tree.map(lambda x: x.astype(dtype) if x.ndim >= 2 and x.dtype == jnp.float32 else x, params)


def filter_logits(scaled_logits: jax.Array, top_k: int, top_p: float) -> jax.Array:
    """scaled_logits [B,V] float32 (already divided by temperature) -> [B,V] with tokens outside the
    top-k and then outside the top-p nucleus set to -inf. top_k=0 / top_p=1.0 disable the filters.
    The nucleus is the smallest set of most-likely tokens whose probability reaches top_p (the most
    likely token is always kept)."""
    filtered = scaled_logits
    if top_k > 0 and top_k < scaled_logits.shape[-1]:
        kth_largest = jax.lax.top_k(scaled_logits, top_k)[0][:, -1:]  # [B,1]
        filtered = jnp.where(scaled_logits < kth_largest, -jnp.inf, filtered)
    if top_p < 1.0:
        sorted_desc = -jnp.sort(-filtered, axis=-1)  # [B,V]
        sorted_probs = jax.nn.softmax(sorted_desc, axis=-1)
        prob_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs  # mass of strictly more likely tokens
        keep_sorted = prob_before < top_p
        threshold = jnp.min(jnp.where(keep_sorted, sorted_desc, jnp.inf), axis=-1, keepdims=True)  # [B,1]
        filtered = jnp.where(filtered < threshold, -jnp.inf, filtered)
    return filtered


def sample_token(logits: jax.Array, uniform: jax.Array, sampling: SamplingParams) -> tuple[jax.Array, jax.Array]:
    """logits [B,V] float32, uniform [B] float32 in [0, 1) -> (token [B] int32, logprob [B] float32):
    `sample_token_logprobs` without the full distribution's log-prob."""
    token, logprob, _ = sample_token_logprobs(logits, uniform, sampling)
    return token, logprob


def sample_token_logprobs(
    logits: jax.Array, uniform: jax.Array, sampling: SamplingParams
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """logits [B,V] float32, uniform [B] float32 in [0, 1) -> (token [B] int32, logprob [B] float32,
    full_logprob [B] float32).

    Draws from softmax(filter_logits(logits / temperature)) by inverting its CDF at `uniform` (one
    random number per row, so no [B,V] noise is generated inside the decode loop); greedy
    (argmax) when temperature is 0.

    The logprob is that of the chosen token under the distribution it was actually drawn from:
    log_softmax(filter_logits(logits / temperature)), i.e. renormalised over the top-k / top-p set
    (without filters that is the policy's log_softmax(logits / temperature)). This is log pi_gen
    of asynchronous GRPO: the trainer's pi_old is the untruncated log_softmax(logits / temperature)
    of its policy (`model.completion_logprobs`), so the importance weight pi_old / pi_gen is the
    ratio of the policy to the sampling distribution, which corrects both the weights' lag and the
    truncation (see `importance`). Greedy keeps the convention log_softmax(logits) (temperature 1).

    full_logprob is the chosen token's log-prob under the untruncated log_softmax(logits / temperature)
    (greedy: log_softmax(logits)), exactly what the trainer's log-prob pass computes for it
    (`transformer.token_logprobs_and_entropy`): the sampler's side of the sampler/trainer mismatch
    figures (`algo.mismatch`), which measure precision, not the truncation. Without a filter it is
    logprob itself (no extra work); with one it costs one more logsumexp per row.
    """
    filtered = scaled = logits
    if sampling.temperature == 0.0:
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        log_probs = jax.nn.log_softmax(logits, axis=-1)
    else:
        scaled = logits / sampling.temperature
        filtered = filter_logits(scaled, sampling.top_k, sampling.top_p)
        log_probs = jax.nn.log_softmax(filtered, axis=-1)  # -inf off the filter
        probs = jax.nn.softmax(filtered, axis=-1)  # 0 off the filter
        cdf = jnp.cumsum(probs, axis=-1)  # [B,V]
        # First token whose CDF exceeds u * total; a zero-probability token never satisfies this.
        threshold = uniform[:, None] * cdf[:, -1:]
        token = jnp.sum(cdf <= threshold, axis=-1, dtype=jnp.int32)
        token = jnp.minimum(token, logits.shape[-1] - 1)
    token_logprob = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
    if filtered is scaled:  # no filter: the full distribution is the one sampled from
        return token, token_logprob, token_logprob
    full_logprob = jnp.take_along_axis(scaled, token[:, None], axis=-1)[:, 0] - jax.nn.logsumexp(scaled, axis=-1)
    return token, token_logprob, full_logprob


def _prefill(
    model, prompt_tokens: jax.Array, prompt_valid: jax.Array, rng_key: jax.Array, sampling: SamplingParams
) -> dict[str, jax.Array]:
    """Run the prompt through `model`, fill the first Lp cache slots and sample token 0. Returns the
    decode state (a dict of arrays, the while-loop carry) that `_decode` continues.

    With sampling.prompt_group = G > 1, rows b*G .. b*G+G-1 hold one prompt: the prefill runs on
    every G-th row and its cache and last logits are repeated G times (G x less prefill work)."""
    batch, _ = prompt_tokens.shape
    max_new = sampling.max_new_tokens
    # One key per sampling step (split up front), each giving the step's [B] uniforms.
    step_keys = jax.random.split(rng_key, max_new)
    uniforms = jax.vmap(lambda key: jax.random.uniform(key, (batch,), jnp.float32))(step_keys)  # [N,B]

    # Prefill: attention over the prompt only; its keys/values become the first Lp cache slots.
    prompt_valid = prompt_valid.astype(jnp.bool_)
    group = sampling.prompt_group
    unique_tokens, unique_valid = prompt_tokens[::group], prompt_valid[::group]
    hidden, prompt_kv = model(
        unique_tokens, model_lib.positions_from_valid(unique_valid), model_lib.causal_padding_mask(unique_valid)
    )
    last_logits = model.logits(hidden[:, -1, :])  # [B/G, V]
    if group > 1:
        prompt_kv = [(jnp.repeat(keys, group, axis=0), jnp.repeat(values, group, axis=0)) for keys, values in prompt_kv]
        last_logits = jnp.repeat(last_logits, group, axis=0)
    state = dict(
        step=jnp.ones((), jnp.int32),  # index of the token sampled next; token 0 comes from the prefill
        kv_cache=model_lib.extend_kv_cache(prompt_kv, max_new),  # S = Lp + N slots
        slot_valid=jnp.concatenate([prompt_valid, jnp.zeros((batch, max_new), jnp.bool_)], axis=1),  # [B,S]
        prompt_lengths=jnp.sum(prompt_valid, axis=1, dtype=jnp.int32),  # [B] = position of the first new token
        uniforms=uniforms,
        done=jnp.zeros((batch,), jnp.bool_),
        tokens=jnp.full((batch, max_new), sampling.pad_id, jnp.int32),
        logprobs=jnp.zeros((batch, max_new), jnp.float32),
        mask=jnp.zeros((batch, max_new), jnp.bool_),
    )
    if sampling.truncates:  # the full distribution's log-probs, beside the truncated ones
        state["full_logprobs"] = jnp.zeros((batch, max_new), jnp.float32)
    # The last prompt slot is always valid (left padding), so its logits predict token 0.
    return _record(state, 0, last_logits, sampling)


def _record(state: dict[str, jax.Array], step, logits: jax.Array, sampling: SamplingParams) -> dict[str, jax.Array]:
    """Sample token `step` from logits [B,V] and write it into the outputs."""
    token, token_logprob, full_logprob = sample_token_logprobs(logits, state["uniforms"][step], sampling)
    active = ~state["done"]
    token = jnp.where(active, token, sampling.pad_id)
    state = dict(state)
    state["tokens"] = jax.lax.dynamic_update_slice(state["tokens"], token[:, None], (0, step))
    state["logprobs"] = jax.lax.dynamic_update_slice(
        state["logprobs"], jnp.where(active, token_logprob, 0.0)[:, None], (0, step)
    )
    if "full_logprobs" in state:
        state["full_logprobs"] = jax.lax.dynamic_update_slice(
            state["full_logprobs"], jnp.where(active, full_logprob, 0.0)[:, None], (0, step)
        )
    state["mask"] = jax.lax.dynamic_update_slice(state["mask"], active[:, None], (0, step))
    if sampling.stop_at_eos:
        is_eos = token == sampling.eos_id
        for extra_id in sampling.extra_eos_ids:
            is_eos = is_eos | (token == extra_id)
        state["done"] = state["done"] | (active & is_eos)
    return state


def _decode(model, state: dict[str, jax.Array], stop_step, sampling: SamplingParams) -> dict[str, jax.Array]:
    """Decode single tokens with `model` until token index `stop_step` (exclusive, <= N) is reached
    or every row has emitted EOS."""
    batch, prompt_len = state["slot_valid"].shape[0], state["slot_valid"].shape[1] - sampling.max_new_tokens

    def cond(state):
        keep_going = state["step"] < stop_step
        if sampling.stop_at_eos:
            keep_going = keep_going & ~jnp.all(state["done"])
        return keep_going

    def body(state):
        """Feed token step-1 at cache slot Lp+step-1, then sample token `step` from its logits."""
        step = state["step"]
        slot = prompt_len + step - 1
        previous_token = jax.lax.dynamic_slice(state["tokens"], (0, step - 1), (batch, 1))  # [B,1]
        slot_valid = jax.lax.dynamic_update_slice(state["slot_valid"], jnp.ones((batch, 1), jnp.bool_), (0, slot))
        positions = (state["prompt_lengths"] + step - 1)[:, None]  # [B,1]
        hidden, kv_cache = model(previous_token, positions, slot_valid[:, None, :], state["kv_cache"], slot)
        state = dict(state, kv_cache=kv_cache, slot_valid=slot_valid, step=step + 1)
        return _record(state, step, model.logits(hidden[:, 0, :]), sampling)

    return jax.lax.while_loop(cond, body, state)


def _outputs(state: dict[str, jax.Array]):
    lengths = jnp.sum(state["mask"], axis=1, dtype=jnp.int32)
    return state["tokens"], state["logprobs"], state["mask"], lengths, state["step"], state.get("full_logprobs")


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling"))
def _generate_jit(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    rng_key: jax.Array,
    sampling: SamplingParams,
):
    """Prefill + decode loop in one program. Returns (tokens [B,N] int32, logprobs [B,N] f32,
    mask [B,N] bool, lengths [B] int32, decode_steps [] int32, full_logprobs [B,N] f32, None
    unless sampling.truncates: logprobs are then the full distribution's)."""
    model = nnx.merge(graphdef, params)
    state = _prefill(model, prompt_tokens, prompt_valid, rng_key, sampling)
    return _outputs(_decode(model, state, sampling.max_new_tokens, sampling))


def _check_prompts(sampling: SamplingParams, prompt_valid, prompt_tokens=None) -> None:
    if sampling.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    group = sampling.prompt_group
    if group > 1 and prompt_tokens is not None:
        tokens = to_host(prompt_tokens)
        if tokens.shape[0] % group or not np.all(tokens.reshape(-1, group, tokens.shape[1]) == tokens[::group, None]):
            raise ValueError(
                f"prompt_group={group}: the rows must be consecutive groups of {group} copies of one prompt"
            )
    last_column_valid = to_host(prompt_valid)[:, -1]
    if not np.all(last_column_valid):
        raise ValueError(
            "prompts must be LEFT-padded: prompt_valid[:, -1] is False for rows "
            f"{np.flatnonzero(~last_column_valid.astype(bool)).tolist()}"
        )


def generate(
    graphdef: nnx.GraphDef, params: nnx.State, prompt_tokens, prompt_valid, rng_key: jax.Array, sampling: SamplingParams
) -> GenerationResult:
    """Sample up to sampling.max_new_tokens tokens per prompt.

    prompt_tokens [B,Lp] int32 LEFT-padded to the batch's longest prompt, prompt_valid [B,Lp] bool
    (every row needs at least one valid token). New token i of row b gets RoPE position
    (number of valid prompt tokens of b) + i, so `model.completion_logprobs` on
    (prompt, result.tokens, result.mask) reproduces result.logprobs when no top-k / top-p filter is
    set (with one, result.logprobs are the renormalised ones: see `sample_token`; result.full_logprobs
    are the untruncated ones it reproduces). Returns numpy arrays, whole on every process
    (`host.to_host`: gathered when the batch is split over several processes).
    """
    _check_prompts(sampling, prompt_valid, prompt_tokens)
    tokens, logprobs, mask, lengths, decode_steps, full_logprobs = _generate_jit(
        graphdef, params, jnp.asarray(prompt_tokens, jnp.int32), jnp.asarray(prompt_valid, jnp.bool_), rng_key, sampling
    )
    logprobs = to_host(logprobs)
    return GenerationResult(
        tokens=to_host(tokens),
        logprobs=logprobs,
        mask=to_host(mask),
        lengths=to_host(lengths),
        decode_steps=int(to_host(decode_steps)),
        full_logprobs=logprobs if full_logprobs is None else to_host(full_logprobs),
    )


TurnEnd = Callable[[int, int, np.ndarray], "np.ndarray | None"]
"""on_turn_end(row, step, tokens) -> the reply's token ids, or None to end the row. Called on the host
when row `row` has ended a turn at token index step - 1; tokens [step] int32 are the row's tokens so
far (forced and sampled). The reply is written at [step, step + len(reply)) as forced tokens; it
must leave room for one more sampled token (step + len(reply) < max_new_tokens), else the row ends.
An empty reply lets the row go on sampling (the pause was no turn's end)."""

"""Collecting a rollout: prompts -> G completions each -> decoded, scored, group advantages. One function,
`collect_rollout`, used by the synchronous loop, the asynchronous collector and evaluation, and one
result type, `Rollout`.

Sequences are prompt-major (sequence i = completion i % G of prompt i // G). Prompts are left-padded
to the longest prompt of the examples given (a step's prompts, so the collector generating part of
a step pads as the synchronous loop does), and generated in rollout micro-batches; the micro-batch
k sequences into the examples is sampled with key fold_in(key, k), whichever part of the examples
one call generates. So the samples depend only on (key, prompts, weights), never on how a step's
generation is split between calls or threads.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from trainers.algo.advantages import compute_advantages
from trainers.algo.sampling_filters import overlong_penalty, truncated
from trainers.data.encoding import encode_prompts
from trainers.data.rewards import accuracy, score
from trainers.loop.plan import split_sequences
from trainers.models.generate import GenerationResult, generate, generate_in_flight, generate_turns
from trainers.parallel.host import put
from trainers.parallel.mesh import mesh_context
from trainers.parallel.rules import batch_sharding
from trainers.rollout.batch import Rollout
from trainers.rollout.episodes import END_ERROR, END_MAX_TOKENS, Episode, Episodes
from trainers.rollout.prompt_fit import prompts_of
from trainers.rollout.spec import RolloutSpec, Weights


def encode_examples(spec: RolloutSpec, examples: list[dict[str, Any]], first_prompt: int,
                    count: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: the prompts of examples[first_prompt : first_prompt + count], each repeated G times
    (prompt-major), left-padded as all of `examples`: (tokens [N, Lp] int32, valid [N, Lp] bool)."""
    tokens, valid = encode_prompts(spec.tokenizer, prompts_of(spec.env, examples), spec.max_prompt_tokens,
                                   chat=spec.chat, system_prompt=spec.system_prompt,
                                   bucket_tokens=spec.prompt_bucket_tokens, cache=spec.prompt_ids)
    g = spec.num_generations
    return (np.repeat(tokens[first_prompt:first_prompt + count], g, axis=0),
            np.repeat(valid[first_prompt:first_prompt + count], g, axis=0))


def generate_sequences(graphdef: Any, weights: Weights, prompt_tokens: np.ndarray, prompt_valid: np.ndarray,
                       spec: RolloutSpec, key: jax.Array, first_call: int, in_flight_chunk_tokens: int,
                       mesh: Any, chosen: list[dict[str, Any]]) -> tuple[GenerationResult, np.ndarray,
                                                                         list[Episode] | None]:
    """Step 2: generate the sequences in rollout micro-batches, the k-th call (counting from
    `first_call`) sampled with fold_in(key, k). Returns the calls' results joined, [N, Lc] int32 the
    version of the weights that sampled each token, and with a multi-turn environment each
    sequence's episode (None for single-turn: the plain sampler, `generate` / `generate_in_flight`).
    chosen: the prompts' examples (G sequences each), which the episodes play."""
    g, micro = spec.num_generations, spec.rollout_micro_batch_sequences
    # Whole groups in every generation call: the G copies of a prompt share one prefill.
    sampling = dataclasses.replace(spec.sampling, prompt_group=g if micro % g == 0 else 1)
    results, versions, episodes = [], [], []
    for k, s in enumerate(split_sequences(prompt_tokens.shape[0], micro)):
        call_tokens, call_valid = prompt_tokens[s.start:s.stop], prompt_valid[s.start:s.stop]
        if mesh is not None:
            rows = batch_sharding(mesh, call_tokens.shape)
            call_tokens, call_valid = put(call_tokens, rows), put(call_valid, rows)
        call_key = jax.random.fold_in(key, first_call + k)
        with mesh_context(mesh):
            if spec.env is not None:
                played = [chosen[i // g] for i in range(s.start, s.stop)]
                call = Episodes(spec.env, spec.tokenizer, played, prompts_of(spec.env, played), chat=spec.chat,
                                system_prompt=spec.system_prompt, max_turns=spec.max_turns,
                                max_total_tokens=sampling.max_new_tokens)
                result = generate_turns(graphdef, weights, call_tokens, call_valid, call_key, sampling,
                                        spec.turn_stops, call.on_turn_end, in_flight_chunk_tokens)
                call_versions = result.token_versions
                episodes += call.finish(result.tokens, result.mask)
            elif in_flight_chunk_tokens:
                result = generate_in_flight(graphdef, weights, call_tokens, call_valid, call_key, sampling,
                                            in_flight_chunk_tokens)
                call_versions = result.token_versions
            else:
                params, version = weights()
                result = generate(graphdef, params, call_tokens, call_valid, call_key, sampling)
                call_versions = np.full(result.tokens.shape, version, np.int32)
        results.append(result)
        versions.append(call_versions)
    joined = GenerationResult(
        tokens=np.concatenate([r.tokens for r in results]), logprobs=np.concatenate([r.logprobs for r in results]),
        mask=np.concatenate([r.mask for r in results]), lengths=np.concatenate([r.lengths for r in results]),
        decode_steps=max(r.decode_steps for r in results),
        sampled=np.concatenate([r.sampled for r in results]) if spec.env is not None else None)
    return joined, np.concatenate(versions), episodes if spec.env is not None else None


def score_sequences(spec: RolloutSpec, chosen: list[dict[str, Any]], completions: list[str],
                    completion_tokens: np.ndarray, completion_mask: np.ndarray,
                    episodes: list[Episode] | None = None) -> dict[str, Any]:
    """Step 3: score the decoded completions of the prompts `chosen` (G each, prompt-major): the
    rewards (weighted sum plus DAPO's overlong penalty), correctness, truncation, the raw reward
    components and the group advantages, as `Rollout` fields.

    With episodes, the reward functions score each episode's last assistant turn, its environment's
    reward parts (reward/env/<name>) add to the reward, the budget's cut is its end reason, and an
    episode the environment failed leaves the loss."""
    g = spec.num_generations
    per_sequence = [chosen[i // g] for i in range(len(completions))]
    answers = completions if episodes is None else [e.final_text for e in episodes]
    rewards, components = score(answers, per_sequence, list(spec.reward_specs))
    sampling_params = spec.sampling
    if episodes is None:
        cut = truncated(completion_tokens, completion_mask, (sampling_params.eos_id, *sampling_params.extra_eos_ids))
    else:
        cut = np.array([e.end_reason == END_MAX_TOKENS for e in episodes], bool)
        for name in spec.env.reward_parts:
            components[f"env/{name}"] = np.array([e.reward_parts.get(name, 0.0) for e in episodes], np.float32)
            rewards = np.asarray(rewards, np.float32) + components[f"env/{name}"]
    penalties = overlong_penalty(completion_mask.sum(axis=1), sampling_params.max_new_tokens,
                                 spec.overlong_buffer_tokens, spec.overlong_penalty)
    rewards = np.asarray(rewards, np.float32) + penalties
    correct = accuracy(answers, per_sequence, components)
    reward_names = tuple(components)
    reward_values = (np.stack([components[name] for name in reward_names], axis=1).astype(np.float32) if reward_names
                     else np.zeros((len(completions), 0), np.float32))
    if spec.advantage is None:
        advantages = np.zeros(len(completions), np.float32)
    else:
        advantages = compute_advantages(rewards.reshape(len(chosen), g), spec.advantage,
                                        spec.advantage_eps).reshape(-1)
    in_loss = ~cut if spec.overlong_filter else None
    if episodes is not None and any(e.end_reason == END_ERROR for e in episodes):
        failed = np.array([e.end_reason == END_ERROR for e in episodes], bool)
        in_loss = ~failed if in_loss is None else in_loss & ~failed
    return dict(rewards=rewards, correct=correct, advantages=advantages,
                in_loss=in_loss, truncated=cut, overlong_penalties=penalties,
                reward_names=reward_names, reward_values=reward_values)


def collect_rollout(
    graphdef: Any,
    weights: Weights,
    examples: list[dict[str, Any]],
    spec: RolloutSpec,
    key: jax.Array,
    *,
    first_prompt: int = 0,
    prompt_count: int | None = None,
    in_flight_chunk_tokens: int = 0,
    mesh: Any = None,
) -> Rollout:
    """Encode -> generate -> decode -> score -> advantages for prompts
    examples[first_prompt : first_prompt + prompt_count] (default: all), padded as all of `examples`.

    Generation calls take `spec.rollout_micro_batch_sequences` sequences each; the k-th micro-batch
    of `examples` (counting from its first sequence, so first_prompt * G must be a multiple of the
    micro-batch size) is sampled with fold_in(key, k). weights(): see `Weights`; with
    in_flight_chunk_tokens > 0 generation runs in chunks of that many decode steps and takes the
    newest weights before each (`generate.generate_in_flight`). mesh: the device mesh the
    weights live on (`Placement.generation_mesh`): each call's sequences are split over its data
    axes and generation is traced under it; None = the default device.
    `generate_s` is the wall time of this call.
    """
    t0 = time.perf_counter()
    g, micro = spec.num_generations, spec.rollout_micro_batch_sequences
    count = len(examples) - first_prompt if prompt_count is None else prompt_count
    if (first_prompt * g) % micro:
        raise ValueError(f"first_prompt={first_prompt} x G={g} is not a multiple of the rollout micro-batch ({micro})")
    chosen = examples[first_prompt:first_prompt + count]
    prompt_tokens, prompt_valid = encode_examples(spec, examples, first_prompt, count)
    result, token_versions, episodes = generate_sequences(graphdef, weights, prompt_tokens, prompt_valid, spec, key,
                                                          first_prompt * g // micro, in_flight_chunk_tokens, mesh,
                                                          chosen)
    if episodes is None:
        completions = [spec.tokenizer.decode_completion(row[m]) for row, m in zip(result.tokens, result.mask)]
    else:
        completions = [e.text for e in episodes]
    scored = score_sequences(spec, chosen, completions, result.tokens, result.mask, episodes)
    return Rollout(
        examples=list(chosen), num_generations=g, prompt_tokens=prompt_tokens, prompt_valid=prompt_valid,
        completion_tokens=result.tokens, completion_mask=result.mask, sample_logprobs=result.logprobs,
        token_versions=token_versions, completions=completions, generate_s=time.perf_counter() - t0,
        loss_mask=result.sampled, episodes=None if episodes is None else [e.display(spec.env_name) for e in episodes],
        **scored,
    )

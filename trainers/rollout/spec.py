"""`RolloutSpec`: how a run turns prompts into scored completions (sampling, rewards, advantages,
prompt rendering), fixed for the run; `Weights`, the callable that hands a generation its weights;
and the prompt checks done before the first step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from trainers.config import ExperimentConfig
from trainers.config.budgets import completion_token_budget
from trainers.data.encoding import PromptIdCache, prompt_bucket_tokens
from trainers.engine.batching import PREFILL_CHUNK_TOKENS
from trainers.envs.registry import make_environment
from trainers.models.generate import SamplingParams, TurnStops, eos_settings
from trainers.rollout import prompt_fit
from trainers.rollout.judge import load_judge

Weights = Callable[[], tuple[Any, int]]
"""weights() -> (params, version): the weights to generate with and their version (optimizer steps
applied to them). Called before each generation call, and with in-flight updates before each
decode chunk, so a caller can hand newer weights to a generation in progress."""


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """How a run turns prompts into scored completions (fixed for the run).

    advantage: `grpo.advantage` method, or None for no advantages (all 0: evaluation, G = 1).
    """

    tokenizer: Any
    sampling: SamplingParams
    num_generations: int
    rollout_micro_batch_sequences: int
    max_prompt_tokens: int
    reward_specs: tuple[tuple[str, float], ...]
    advantage: str | None
    advantage_eps: float = 1e-6
    chat: bool = False  # render prompts with the tokenizer's chat template
    system_prompt: str | None = None
    prompt_bucket_tokens: int = 1  # prompt lengths are padded up to a bucket of this (fewer compiles)
    overlong_buffer_tokens: int = 0  # DAPO soft overlong punishment (0 = off), see `sampling_filters`
    overlong_penalty: float = 1.0
    overlong_filter: bool = False  # truncated completions leave the loss (Rollout.in_loss)
    # The environment of multi-turn episodes (`trainers.envs`); None = single_turn, one completion per
    # prompt through the plain sampler. turn_stops: the token ids of its stop strings.
    env: Any = None
    env_name: str = "single_turn"
    max_turns: int = 1
    turn_stops: TurnStops | None = None
    # The generation engine: decode slots (None = rollout_micro_batch_sequences:
    # `engine.pages.decode_slot_count`), decode steps per chunk and prompt tokens per prefill piece
    # (`engine.batching.EngineSettings`).
    decode_slots: int | None = None
    decode_chunk_tokens: int = 16
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS
    # Token ids of the prompts already encoded, shared by the copies `for_evaluation` makes.
    prompt_ids: PromptIdCache = dataclasses.field(default_factory=PromptIdCache, compare=False, repr=False)
    # The rewards a loaded model scores, by name (`rewards.score_with_details`' scorers): the judge
    # (`trainers.rollout.judge`) when the rewards list it.
    scorers: Mapping[str, Callable] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: ExperimentConfig, tokenizer: Any, rollout_micro_batch_sequences: int) -> RolloutSpec:
        r, d = config.rollout, config.data
        sampling = SamplingParams(
            max_new_tokens=completion_token_budget(config),
            temperature=r.temperature,
            top_k=r.top_k,
            top_p=r.top_p,
            stop_at_eos=r.stop_at_eos,
            **eos_settings(tokenizer),
        )
        chat = prompt_fit.renders_chat(config, tokenizer)
        env, turn_stops = environment(config, tokenizer)
        specs = config.reward_specs()
        return cls(
            tokenizer=tokenizer,
            sampling=sampling,
            num_generations=config.grpo.num_generations,
            rollout_micro_batch_sequences=rollout_micro_batch_sequences,
            max_prompt_tokens=d.max_prompt_tokens,
            reward_specs=tuple(specs),
            advantage=config.grpo.advantage,
            advantage_eps=config.grpo.advantage_eps,
            chat=chat,
            system_prompt=d.system_prompt,
            prompt_bucket_tokens=prompt_bucket_tokens(bool(config.model.path)),
            overlong_buffer_tokens=r.overlong_buffer_tokens,
            overlong_penalty=r.overlong_penalty,
            overlong_filter=r.overlong_filter,
            env=env,
            env_name=config.env.name,
            max_turns=config.env.max_turns,
            turn_stops=turn_stops,
            decode_slots=r.decode_slots,
            decode_chunk_tokens=r.decode_chunk_tokens,
            prefill_chunk_tokens=r.prefill_chunk_tokens,
            scorers={"judge": load_judge(config)} if any(name == "judge" for name, _ in specs) else {},
        )

    def for_evaluation(self, temperature: float, samples_per_prompt: int = 1) -> RolloutSpec:
        """`samples_per_prompt` completions per prompt at `temperature` (0 = greedy), no advantages and no
        length shaping (eval rewards are the task's own)."""
        return dataclasses.replace(
            self,
            sampling=dataclasses.replace(self.sampling, temperature=temperature),
            num_generations=samples_per_prompt,
            advantage=None,
            overlong_buffer_tokens=0,
            overlong_filter=False,
        )


def environment(config: ExperimentConfig, tokenizer: Any) -> tuple[Any, TurnStops | None]:
    """The run's multi-turn environment and the token ids of its stop strings, or (None, None) for a
    single-turn one (`env.name` single_turn: the plain sampler, exactly as without environments)."""

    env = make_environment(config.env.name, config.env.settings)
    if not env.multi_turn:
        return None, None
    # The sampler pauses a row when its newest tokens are the last two of a stop string's own
    # tokenization ("call", ">" of "</tool_call>"): what comes before may merge differently ("}}</"),
    # so the turn loop checks the text and lets a false alarm go on (`Episodes.on_turn_end`).
    stops = tuple(tuple(tokenizer.encode(text, add_bos=False)[-2:]) for text in env.stop_strings)
    return env, TurnStops(tuple(s for s in stops if s))


def check_prompts_fit(spec: RolloutSpec, examples: list[dict[str, Any]], dataset: str) -> int:
    """`prompt_fit.check_prompts_fit` with the spec's tokenizer, environment and rendering, so a prompt
    over data.max_prompt_tokens (as its episode starts) stops the run before its first step, not at
    the step that meets it. Raises DataError naming the dataset and the field to change; returns the
    longest prompt's tokens."""
    return prompt_fit.check_prompts_fit(
        spec.tokenizer,
        spec.env,
        examples,
        dataset,
        max_prompt_tokens=spec.max_prompt_tokens,
        chat=spec.chat,
        system_prompt=spec.system_prompt,
        cache=spec.prompt_ids,
    )

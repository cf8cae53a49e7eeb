"""Does every prompt fit `data.max_prompt_tokens` as its episode starts? Checked before a run's first
step (the trainer, `evaluate`) and by `validate`, so a config that would fail at start is refused
beforehand. JAX-free: `validate` never loads JAX.

An episode starts with the environment's `reset` (the calculator's worked example, a game's rules),
which can be much longer than the dataset example's own prompt; that is what is counted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainers.config import ExperimentConfig
from trainers.data.encoding import PromptIdCache, encode_prompts
from trainers.data.examples import DataError
from trainers.data.tokenizer import model_tokenizer
from trainers.envs.registry import make_environment


def prompts_of(env: Any, examples: list[dict[str, Any]]) -> list[Any]:
    """The prompt each example starts its episode with: the environment's `reset` (`env`, a multi-turn
    environment), or its "prompt" (env None: single-turn)."""
    return [env.reset(e) for e in examples] if env is not None else [e["prompt"] for e in examples]


def renders_chat(config: ExperimentConfig, tokenizer: Any) -> bool:
    """Whether prompts go through the tokenizer's chat template: data.chat_template, or when unset
    whether the tokenizer has one."""
    return tokenizer.has_chat_template if config.data.chat_template is None else config.data.chat_template


def check_prompts_fit(
    tokenizer: Any,
    env: Any,
    examples: list[dict[str, Any]],
    dataset: str,
    *,
    max_prompt_tokens: int,
    chat: bool,
    system_prompt: str | None,
    cache: PromptIdCache | None = None,
) -> int:
    """Encode every example's episode prompt once (into `cache`) and return the longest one's token
    count. Raises DataError naming the dataset ("training", "eval") and the field to change when one
    is over `max_prompt_tokens` (or the tokenizer cannot take it)."""
    try:
        tokens, _ = encode_prompts(
            tokenizer, prompts_of(env, examples), max_prompt_tokens, chat=chat, system_prompt=system_prompt, cache=cache
        )
    except DataError as error:
        raise DataError(f"{dataset} data: {error} (data.max_prompt_tokens sets the limit)") from None
    return int(tokens.shape[1])  # no bucket: the width is the longest prompt


@dataclasses.dataclass(frozen=True)
class PromptFit:
    """What `config_prompt_fit` found: `problem`, why a prompt does not fit (None: they all do), and
    `longest_training_tokens`, the longest training prompt as its episode starts (None with a problem)."""

    problem: str | None
    longest_training_tokens: int | None


def config_prompt_fit(
    config: ExperimentConfig, train_examples: list[dict[str, Any]], eval_examples: list[dict[str, Any]]
) -> PromptFit:
    """Whether every prompt of the run's data fits as its episode starts (what the trainer would
    refuse at start), with the run's tokenizer and environment, over the training prompts and the
    eval prompts it evaluates; and the longest training prompt (what a step's memory depends on)."""

    tokenizer = model_tokenizer(config.model.path, config.data.tokenizer)
    env = make_environment(config.env.name, config.env.settings)
    env = env if env.multi_turn else None
    fit = dict(
        max_prompt_tokens=config.data.max_prompt_tokens,
        chat=renders_chat(config, tokenizer),
        system_prompt=config.data.system_prompt,
        cache=PromptIdCache(),
    )
    try:
        longest = check_prompts_fit(tokenizer, env, train_examples, "training", **fit)
        if eval_examples:
            check_prompts_fit(tokenizer, env, eval_examples[: config.eval.prompts or None], "eval", **fit)
    except DataError as error:
        return PromptFit(str(error), None)
    return PromptFit(None, longest)

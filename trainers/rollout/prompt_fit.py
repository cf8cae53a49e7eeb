"""Does every prompt fit `data.max_prompt_tokens` as its episode starts? Checked before a run's first
step (the trainer, `evaluate`) and by `validate`, so a config that would fail at start is refused
beforehand. JAX-free: `validate` never loads JAX.

An episode starts with the environment's `reset` (the calculator's worked example, a game's rules),
which can be much longer than the dataset example's own prompt; that is what is counted.
"""

from __future__ import annotations

from typing import Any

from trainers.config import ExperimentConfig
from trainers.data.encoding import PromptIdCache, encode_prompts
from trainers.data.examples import DataError


def prompts_of(env: Any, examples: list[dict[str, Any]]) -> list[Any]:
    """The prompt each example starts its episode with: the environment's `reset` (`env`, a multi-turn
    environment), or its "prompt" (env None: single-turn)."""
    return [env.reset(e) for e in examples] if env is not None else [e["prompt"] for e in examples]


def renders_chat(config: ExperimentConfig, tokenizer: Any) -> bool:
    """Whether prompts go through the tokenizer's chat template: data.chat_template, or when unset
    whether the tokenizer has one."""
    return tokenizer.has_chat_template if config.data.chat_template is None else config.data.chat_template


def check_prompts_fit(tokenizer: Any, env: Any, examples: list[dict[str, Any]], dataset: str, *,
                      max_prompt_tokens: int, chat: bool, system_prompt: str | None,
                      cache: PromptIdCache | None = None) -> None:
    """Encode every example's episode prompt once (into `cache`). Raises DataError naming the dataset
    ("training", "eval") and the field to change when one is over `max_prompt_tokens` (or the
    tokenizer cannot take it)."""
    try:
        encode_prompts(tokenizer, prompts_of(env, examples), max_prompt_tokens, chat=chat,
                       system_prompt=system_prompt, cache=cache)
    except DataError as error:
        raise DataError(f"{dataset} data: {error} (data.max_prompt_tokens sets the limit)") from None


def config_prompt_problem(config: ExperimentConfig, train_examples: list[dict[str, Any]],
                          eval_examples: list[dict[str, Any]]) -> str | None:
    """Why a prompt of the run's data does not fit as its episode starts (what the trainer would
    refuse at start), or None: the run's tokenizer and environment, the training prompts and the
    eval prompts it evaluates."""
    from trainers.envs.registry import make_environment
    from trainers.loop.policy import tokenizer_for

    tokenizer = tokenizer_for(config)
    env = make_environment(config.env.name, config.env.settings)
    env = env if env.multi_turn else None
    fit = dict(max_prompt_tokens=config.data.max_prompt_tokens, chat=renders_chat(config, tokenizer),
               system_prompt=config.data.system_prompt, cache=PromptIdCache())
    try:
        check_prompts_fit(tokenizer, env, train_examples, "training", **fit)
        if eval_examples:
            check_prompts_fit(tokenizer, env, eval_examples[: config.eval.prompts or None], "eval", **fit)
    except DataError as error:
        return str(error)
    return None

"""The environment protocol: what a rollout's episodes talk to.

An episode starts from one dataset example. `reset(example)` gives the prompt the model sees (a
string, or a list of chat messages); then the model writes an assistant turn, and
`step(state, assistant_message)` answers it with new messages (a tool's result, a game's reply),
named reward parts and whether the episode is done. The rollout's turn loop
(`trainers.rollout.episodes`) renders the reply with the model's chat template, prefills it into
that sequence's KV cache and lets the model go on, while the other sequences keep decoding.

An environment is a class with a `name`, a pydantic `Settings` model (the config's `env.settings`,
checked before a run starts) and the two methods. It is JAX-free and must not keep state between
episodes on `self` (one instance serves a whole batch): per-episode state lives in
`EpisodeState.data`. It may raise: the turn loop then ends that episode with the reason
`env_error` and the message, and the run goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class NoSettings(BaseModel):
    """An environment without settings: `env.settings` must be empty."""

    model_config = ConfigDict(extra="forbid")


@dataclasses.dataclass
class StepResult:
    """An environment's answer to one assistant turn.

    messages: the reply, [{"role": "tool" | "user", "content": str}, ...]; ignored when done.
    reward_parts: named parts added to the episode's reward (each part summed over the turns).
    done: the episode ends after this turn (the model writes no more).
    tool_calls / tool_errors: how many tool calls this turn made, and how many of them failed
    (malformed call, unknown tool, refused arguments): the env/* metrics count them.
    """

    messages: list[dict[str, str]] = dataclasses.field(default_factory=list)
    reward_parts: dict[str, float] = dataclasses.field(default_factory=dict)
    done: bool = False
    tool_calls: int = 0
    tool_errors: int = 0


@dataclasses.dataclass
class EpisodeState:
    """One episode as the environment sees it: the example, the turns so far and its own scratch space."""

    example: dict[str, Any]
    turn: int = 0  # assistant turns answered so far (this one included, inside `step`)
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


class Environment:
    """Base class of environments (see the module docstring). `multi_turn` False means the episode is
    one completion and `step` is never called (`single_turn`); `stop_strings` end an assistant turn
    besides the model's end-of-turn token (the calculator's "</tool_call>"); `reward_parts` names
    the parts `step` may return."""

    name: ClassVar[str] = ""
    multi_turn: ClassVar[bool] = True
    Settings: ClassVar[type[BaseModel]] = NoSettings
    stop_strings: ClassVar[tuple[str, ...]] = ()
    # The names of the reward parts `step` may return: each is a column of the rollout's reward
    # values (reported as reward/env/<name>); a part not named here fails its episode.
    reward_parts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, settings: BaseModel | None = None) -> None:
        self.settings = settings if settings is not None else self.Settings()

    def reset(self, example: dict[str, Any]) -> str | list[dict[str, str]]:
        """The prompt of the episode (a string, or chat messages): by default the example's own "prompt"."""
        return example["prompt"]

    def step(self, state: EpisodeState, assistant_message: str) -> StepResult:
        """Answer one assistant turn (the text the model wrote in it, end-of-turn token excluded)."""
        raise NotImplementedError

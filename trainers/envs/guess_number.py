"""A multi-turn feedback game: guess the secret whole number, told "higher" or "lower" each turn.

Each example's "answer" is the secret (a whole number as text) and its prompt says the range; an
example may carry that range as "low" and "high" (the `guess_number` task's do), else the range is
settings.low..settings.high. The secret must lie in the range: an example whose secret does not
(or is not a whole number) raises, and the turn loop ends that episode with `env_error`.

Each turn, `step` reads the last integer the model wrote and replies as the user: "higher" (the
secret is larger), "lower", or "correct"; a turn without a number gets "no number found: answer with
one integer". None of the replies contains a digit, so the episode text's last number is always the
model's last guess (what numeric_match reads). The episode ends when the guess is correct, with the
reward part

    solved = 1 - (turn - 1) / settings.max_guesses       (1.0 in one turn, 1/8 in the 8th of 8)

or after settings.max_guesses turns without it, with solved = 0.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from trainers.envs.base import Environment, EpisodeState, StepResult

_INTEGER_RE = re.compile(r"-?\d+")
NO_NUMBER = "no number found: answer with one integer"
_BOUND = 10**9


class GuessNumberSettings(BaseModel):
    """The game's `env.settings`."""

    model_config = ConfigDict(extra="forbid")

    low: int = Field(1, ge=-_BOUND, le=_BOUND, description="Smallest secret, for examples without their own \"low\".")
    high: int = Field(
        100, ge=-_BOUND, le=_BOUND, description="Largest secret, for examples without their own \"high\"; above low."
    )
    max_guesses: int = Field(8, ge=1, le=100, description="Turns the model has; the episode ends unsolved after them.")

    @field_validator("high")
    @classmethod
    def _above_low(cls, high: int, info: ValidationInfo) -> int:
        low = info.data.get("low")
        if low is not None and high <= low:
            raise ValueError(f"high={high} must be above low={low}")
        return high


def last_integer(text: str) -> int | None:
    """The last integer written in `text` ("I guess 42." -> 42, "-3" -> -3), or None."""
    matches = _INTEGER_RE.findall(text)
    return int(matches[-1]) if matches else None


def solved_reward(turn: int, max_guesses: int) -> float:
    """The reward part of a game solved in `turn` (1-based) of `max_guesses` turns."""
    return 1.0 - (turn - 1) / max_guesses


class GuessNumber(Environment):
    """The higher/lower guessing game (see the module docstring)."""

    name = "guess_number"
    multi_turn = True
    Settings = GuessNumberSettings
    reward_parts = ("solved",)

    def secret(self, example: dict[str, Any]) -> int:
        """The example's secret, checked against its range; ValueError naming what is wrong."""
        answer = str(example.get("answer", "")).strip()
        if not re.fullmatch(r"-?\d+", answer):
            raise ValueError(f"guess_number: the example's answer {answer[:40]!r} is not a whole number")
        low = int(example.get("low", self.settings.low))
        high = int(example.get("high", self.settings.high))
        secret = int(answer)
        if not low <= secret <= high:
            raise ValueError(f"guess_number: the secret {secret} is outside the range {low} to {high}")
        return secret

    def step(self, state: EpisodeState, assistant_message: str) -> StepResult:
        secret = self.secret(state.example)
        guess = last_integer(assistant_message)
        last_turn = state.turn >= self.settings.max_guesses
        if guess == secret:
            return StepResult(
                messages=[{"role": "user", "content": "correct"}],
                done=True,
                reward_parts={"solved": solved_reward(state.turn, self.settings.max_guesses)},
            )
        reply = NO_NUMBER if guess is None else "higher" if guess < secret else "lower"
        return StepResult(
            messages=[{"role": "user", "content": reply}],
            done=last_turn,
            reward_parts={"solved": 0.0} if last_turn else {},
        )

"""The default environment: one prompt, one completion, scored by the run's reward functions.

`single_turn` is today's rollout: the turn loop never calls `step` (the episode ends with the
completion), so a run under it gives exactly the results it gave before environments existed.
"""

from __future__ import annotations

from trainers.envs.base import Environment, EpisodeState, StepResult


class SingleTurn(Environment):
    """One completion per prompt; `step` is never called, and raises if it is."""

    name = "single_turn"
    multi_turn = False

    def step(self, state: EpisodeState, assistant_message: str) -> StepResult:
        raise RuntimeError("single_turn episodes are one completion: step is never called (multi_turn is False)")

"""Prompt selection: skip the prompts whose last groups taught nothing, before generating them.

A group whose G completions are all right or all wrong (flat: `rollout.dynamic_sampling_metric` says
what flat means) has advantage 0 everywhere and adds nothing to the policy gradient. A prompt that
gave flat groups the last few times it came round is likely to again, so its next visit is skipped
with a probability that grows with that streak (the selective rollout of GRESO, "Act Only When It
Pays", 2025), and a
skipped prompt costs no generation. Pure Python and numpy, no JAX:

- `PromptHistory`: per prompt (its index in the training set) how many of its groups were all right,
  all wrong or mixed, and its flat streak (flat groups since its last mixed one), as JSON for the
  checkpoint (`state` / `from_state`).
- `SkipRule.skip_probability(streak)` = min(max_skip, 1 - (1 - base)^streak): 0 for a prompt never
  seen or whose last group was mixed, `base` after one flat group, then towards 1, capped at
  `max_skip` so that every prompt keeps at least 1 - max_skip chance to come back (exploration).
- `skip_draw(seed, position)`: the uniform number the decision at a data position compares with that
  probability, from (seed, position) alone, so a resumed run (same seed, position and history) makes
  the same decisions.
- `walk`: the data positions a step takes from its position on, skipping as the rule says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

OUTCOMES = ("all_right", "all_wrong", "mixed")
"""A group's outcome: flat with every answer right, flat otherwise, or mixed (informative)."""

_DRAW_STREAM = 0x5E1EC7  # tells the selection's draws apart from any other use of (seed, position)


def group_outcome(informative: bool, correct: Sequence[bool]) -> str:
    """The outcome of a group: "mixed" when informative (its values are not all equal), else
    "all_right" when every completion is correct, else "all_wrong"."""
    if informative:
        return "mixed"
    return "all_right" if all(bool(c) for c in correct) else "all_wrong"


@dataclasses.dataclass(frozen=True)
class SkipRule:
    """p_skip(streak) = min(max_skip_probability, 1 - (1 - base_skip_probability)^streak)."""

    base_skip_probability: float
    max_skip_probability: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.base_skip_probability <= 1.0 or not 0.0 <= self.max_skip_probability < 1.0:
            raise ValueError(
                f"need 0 <= base_skip_probability <= 1 and 0 <= max_skip_probability < 1, got "
                f"{self.base_skip_probability}, {self.max_skip_probability}"
            )

    def skip_probability(self, flat_streak: int) -> float:
        if flat_streak <= 0:
            return 0.0
        return min(self.max_skip_probability, 1.0 - (1.0 - self.base_skip_probability) ** flat_streak)


def skip_draw(seed: int, position: int) -> float:
    """A uniform number in [0, 1) that depends only on (seed, data position)."""
    return float(np.random.default_rng([_DRAW_STREAM, seed, position]).random())


class PromptHistory:
    """Per training-set index: [all_right, all_wrong, mixed, flat_streak] counts of its groups."""

    def __init__(self, records: dict[int, list[int]] | None = None):
        self.records: dict[int, list[int]] = {int(k): list(v) for k, v in (records or {}).items()}

    def record(self, index: int, outcome: str) -> None:
        """One more group of prompt `index`: its outcome's count + 1, and its flat streak + 1 (flat)
        or back to 0 (mixed)."""
        counts = self.records.setdefault(int(index), [0, 0, 0, 0])
        counts[OUTCOMES.index(outcome)] += 1
        counts[3] = 0 if outcome == "mixed" else counts[3] + 1

    def flat_streak(self, index: int) -> int:
        return self.records.get(int(index), [0, 0, 0, 0])[3]

    def counts(self) -> dict[str, int]:
        """Groups recorded by outcome, over every prompt."""
        return {name: sum(r[i] for r in self.records.values()) for i, name in enumerate(OUTCOMES)}

    def state(self) -> dict[str, Any]:
        """JSON for a checkpoint: {"<index>": [all_right, all_wrong, mixed, flat_streak]}."""
        return {str(index): list(counts) for index, counts in sorted(self.records.items())}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PromptHistory:
        return cls({int(index): [int(c) for c in counts] for index, counts in state.items()})


@dataclasses.dataclass(frozen=True)
class Walk:
    """The positions a step walked from `start`: `kept` (to generate, in data order) and their
    training-set `indices`; the positions between them were skipped."""

    start: int
    kept: tuple[int, ...]
    indices: tuple[int, ...]

    def consumed(self, used: int) -> int:
        """How far the data position moves when the step generates the first `used` kept prompts:
        past the last of them (the skipped prompts before it are consumed too; those after it are
        not, and are decided again by the next step)."""
        return 0 if used == 0 else self.kept[used - 1] + 1 - self.start

    def skipped(self, used: int) -> int:
        """Prompts skipped among those `consumed(used)` consumed."""
        return self.consumed(used) - used


def walk(
    start: int,
    count: int,
    index_at: Callable[[int, int], Sequence[int]],
    skip_probability: Callable[[int], float],
    draw: Callable[[int], float],
    max_skipped: int,
) -> Walk:
    """The first `count` prompts kept from data position `start` on: the prompt at position p, of
    training-set index i, is skipped iff draw(p) < skip_probability(i), and at most `max_skipped` are
    skipped (the prompts after that many skips are kept whatever their streak), so a walk always ends.
    index_at(position, n): the indices of n positions from `position` on (`PromptStream.indices`); the
    run's draw is `skip_draw(seed, p)` and its skip probability `SkipRule.skip_probability` of the
    prompt's `PromptHistory.flat_streak` (`history_walk`)."""
    kept: list[int] = []
    indices: list[int] = []
    skipped = 0
    position = start
    while len(kept) < count:
        chunk = index_at(position, count - len(kept))
        for offset, index in enumerate(chunk):
            p = position + offset
            if skipped < max_skipped and draw(p) < skip_probability(index):
                skipped += 1
            else:
                kept.append(p)
                indices.append(int(index))
        position += len(chunk)
    return Walk(start, tuple(kept), tuple(indices))


def history_walk(
    start: int,
    count: int,
    index_at: Callable[[int, int], Sequence[int]],
    history: PromptHistory,
    rule: SkipRule,
    seed: int,
    max_skipped: int,
) -> Walk:
    """`walk` with a run's decisions: skip_draw(seed, p) against rule.skip_probability(flat streak)."""
    return walk(
        start,
        count,
        index_at,
        lambda index: rule.skip_probability(history.flat_streak(index)),
        lambda position: skip_draw(seed, position),
        max_skipped,
    )

"""DAPO dynamic sampling: a step's rollout made of informative groups only.

A group whose G rewards are all equal has advantage 0 for every completion, so it adds nothing to the
policy gradient (`sampling_filters.informative_groups`). A step walks prompt groups in data order,
consuming each: informative groups are kept, flat ones dropped, until it holds `prompts` informative
groups or has consumed `max_prompts` = prompts x (1 + max_rounds) groups; then the step is completed
with the first dropped groups, left out of the loss (`Rollout.in_loss` False), so every step keeps
its planned shape. `select_informative` is that walk (pure; shared by the synchronous source, which
samples the groups in rounds of one step's prompts via `fill_informative`, and by the asynchronous
one, which takes them from its replay buffer), `assemble` builds the step's rollout from it and
`step_metrics` its metrics.

Data position: groups are consumed in data order; once the step is full, the groups after it are not
consumed (the next step samples them again), so `prompts_consumed` counts exactly the prompts the step
used or dropped, and a resumed run (same seed, same position) draws the same groups. In the
synchronous loop round 0 samples with the step's own key: a step in which no group is flat is the
plain step, bit for bit.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from trainers.algo.sampling_filters import dynamic_sampling_values, informative_groups
from trainers.rollout.batch import Rollout, join_generation, reward_metrics

ROUND_KEY_OFFSET = 1 << 21
"""Round k >= 1 of step s samples with fold_in(fold_in(key(seed), s), ROUND_KEY_OFFSET + k): apart from
the step's generation calls (fold_in(step key, call)) and from evaluation (fold_in(step key, 2**20))."""


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which groups of a run (positions 0, 1, ... in data order) a step consumes and trains.

    kept: positions of the informative groups the step trains, ascending.
    dropped: positions of the flat groups it consumed, ascending.
    left_out: the first `prompts - len(kept)` of `dropped` once the step is complete (the groups that
      complete a capped step, out of the loss); () while incomplete.
    complete: the step holds `prompts` informative groups, or consumed `max_prompts` groups. False:
      the run ended first, and the step needs the groups after it.
    """

    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    left_out: tuple[int, ...]
    complete: bool

    @property
    def consumed(self) -> int:
        """Groups consumed: positions 0 .. consumed - 1 (how far the data position moves)."""
        return len(self.kept) + len(self.dropped)

    @property
    def order(self) -> tuple[int, ...]:
        """The step's groups, as trained: the kept ones, then the left-out ones."""
        return self.kept + self.left_out


def select_informative(informative: Sequence[bool], prompts: int, max_prompts: int) -> Selection:
    """The walk over a run of groups in data order (informative[j]: group j's rewards are not all
    equal): group j is consumed iff fewer than `prompts` informative groups come before it and
    j < max_prompts. The step is complete once `prompts` are kept or `max_prompts` consumed; a longer
    run gives the same selection (the groups after the step are not consumed)."""
    if prompts < 1 or max_prompts < prompts:
        raise ValueError(f"need 1 <= prompts <= max_prompts, got prompts={prompts}, max_prompts={max_prompts}")
    kept: list[int] = []
    dropped: list[int] = []
    for j, ok in enumerate(informative):
        if len(kept) == prompts or j == max_prompts:
            break
        (kept if ok else dropped).append(j)
    complete = len(kept) == prompts or len(kept) + len(dropped) == max_prompts
    left_out = tuple(dropped[: prompts - len(kept)]) if complete else ()
    return Selection(tuple(kept), tuple(dropped), left_out, complete)


def assemble(groups: Sequence[Rollout], selection: Selection, pad_id: int) -> Rollout:
    """The step's rollout from its consumed groups (groups[j] = the group at position j, one prompt
    each): the kept groups in data order, then the left-out ones with in_loss False, prompts
    left-padded with `pad_id` to the widest; `prompts_consumed` = selection.consumed."""
    if not selection.complete:
        raise ValueError("assemble needs a complete selection")
    step = Rollout.concat([groups[j] for j in selection.kept] + [_left_out(groups[j]) for j in selection.left_out],
                          pad_id=pad_id)
    step.prompts_consumed = selection.consumed
    return step


def step_metrics(selection: Selection, refill_rounds: float, prompts_sampled: int, rewards: np.ndarray,
                 correct: np.ndarray, sampled: Sequence[Rollout] = ()) -> dict[str, float]:
    """dynamic/dropped_group_fraction = len(dropped) / consumed, dynamic/refill_rounds,
    dynamic/prompts_consumed, dynamic/prompts_sampled (generated for the step), and reward/mean,
    reward/std, accuracy over the completions given (`rewards`, `correct`: the caller says which);
    with `sampled` (the rollouts those completions come from), reward/<name> per reward function
    over them too (`rollout.reward_metrics`)."""
    components = {}
    if sampled:
        components = reward_metrics(sampled[0].reward_names, np.concatenate([r.reward_values for r in sampled]))
    return {
        "dynamic/dropped_group_fraction": len(selection.dropped) / selection.consumed,
        "dynamic/refill_rounds": float(refill_rounds),
        "dynamic/prompts_consumed": float(selection.consumed),
        "dynamic/prompts_sampled": float(prompts_sampled),
        "reward/mean": float(np.mean(rewards)),
        "reward/std": float(np.std(rewards)),
        "accuracy": float(np.mean(correct)),
        **components,
    }


def fill_informative(sample_round: Callable[[int, int], Rollout], prompts: int, max_rounds: int,
                     pad_id: int, metric: str = "reward") -> tuple[Rollout, dict[str, float]]:
    """(the step's rollout, its metrics): the synchronous loop's dynamic sampling, in rounds.

    sample_round(round, offset) -> the rollout of `prompts` prompts starting `offset` prompts past the
    step's data position (round 0 at offset 0; round k at the groups consumed so far, k x prompts).
    Rounds are sampled until `select_informative` (max_prompts = prompts x (1 + max_rounds)) is
    complete; a group is informative when its values of `metric` differ
    (`sampling_filters.dynamic_sampling_values`). The result holds `prompts` groups: the informative ones in data order, then, if the
    rounds ran out, the first dropped ones with in_loss False. `prompts_consumed` is how far the
    data position moves.

    Metrics (`step_metrics`): dynamic/refill_rounds = extra rounds sampled; dynamic/prompts_sampled
    = generated, the unconsumed rest of the last round included (what the step cost); reward/mean,
    reward/std and accuracy over every completion sampled (the policy's own scores, not the kept
    groups')."""
    rounds: list[Rollout] = []
    groups: list[Rollout] = []
    flags: list[bool] = []
    max_prompts = prompts * (1 + max_rounds)
    for round_index in range(max_rounds + 1):
        r = sample_round(round_index, len(flags))
        rounds.append(r)
        values = dynamic_sampling_values(r.rewards, r.correct, metric)
        flags.extend(informative_groups(values.reshape(r.prompts, r.num_generations)).tolist())
        groups.extend(r.group(j) for j in range(r.prompts))
        selection = select_informative(flags, prompts, max_prompts)
        if selection.complete:
            break
    step = assemble(groups, selection, pad_id)
    step.generate_s = sum(r.generate_s for r in rounds)
    step.generation = join_generation([r.generation for r in rounds])
    metrics = step_metrics(selection, len(rounds) - 1, sum(r.prompts for r in rounds),
                           np.concatenate([r.rewards for r in rounds]), np.concatenate([r.correct for r in rounds]),
                           rounds)
    return step, metrics


def _left_out(group: Rollout) -> Rollout:
    """The group, out of the loss (a copy: the caller's group is not changed)."""
    return dataclasses.replace(group, in_loss=np.zeros_like(group.in_loss))

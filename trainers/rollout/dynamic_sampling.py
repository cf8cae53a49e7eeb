"""DAPO dynamic sampling: a step's rollout made of informative groups only.

A group whose G rewards are all equal has advantage 0 for every completion, so it adds nothing to the
policy gradient (`sampling_filters.informative_groups`). Groups are consumed in data order:
informative groups are kept, flat ones dropped, until the step holds `prompts` informative groups or
has consumed `max_prompts` = prompts x (1 + max_rounds) groups; then the step is completed with the
first dropped groups, left out of the loss (`Rollout.in_loss` False), so every step keeps its planned
shape. `select_informative` is that walk (pure), `assemble` builds the step's rollout from it and
`step_metrics` its metrics.

Synchronous runs sample without rounds (`fill_informative`): the step's candidate prompts go to the
generation engine as one queue, and each group is scored as it ends (`InformativeGate`), so the
engine keeps admitting prompts while fewer than the step needs have proved informative, and stops
as soon as enough have: no round waits for its slowest group. Groups still generating at that moment
finish; the informative ones among them carry over to the next step, trained there first (sampled
by the weights one step older, so the trainer weighs them by pi_old / pi_gen like asynchronous
groups, `SyncRolloutSource.importance`), and at most `prompts` of them, so none is more than one step
stale. The carried groups are part of the checkpoint (`carry_state`), so a resumed run trains what
the uninterrupted one would.

Data position: every group the engine admitted is consumed (the data position moves past the last
one; the carried groups are consumed by the step that sampled them), so a resumed run (same seed,
same position, same carried groups) draws the same groups. Asynchronous runs walk their buffered
groups with `select_informative` and leave the groups after a complete step in the buffer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trainers.algo.sampling_filters import dynamic_sampling_values, informative_groups
from trainers.rollout.batch import Rollout, reward_metrics


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which groups of a run (positions 0, 1, ... in data order) a step consumes and trains.

    kept: positions of the informative groups the step trains, ascending.
    dropped: positions of the flat groups it consumed, ascending.
    left_out: the first `prompts - len(kept)` of `dropped` once the step is complete (the groups that
      complete a capped step, out of the loss); () while incomplete.
    complete: the step holds `prompts` informative groups, or consumed `max_prompts` groups. False:
      the run ended first, and the step needs the groups after it.
    carried: positions of the informative groups consumed past the step's last kept one, trained by
      the next step (`select_admitted`); () for a walk that stops at the step's end.
    """

    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    left_out: tuple[int, ...]
    complete: bool
    carried: tuple[int, ...] = ()

    @property
    def consumed(self) -> int:
        """Groups consumed: positions 0 .. consumed - 1 (how far the data position moves)."""
        return len(self.kept) + len(self.dropped) + len(self.carried)

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


def select_admitted(informative: Sequence[bool], prompts: int, max_prompts: int) -> Selection:
    """The selection of a synchronous step over every group the engine admitted (informative[j]: group
    j, in data order): the walk of `select_informative`, then every group after the step's last kept
    one consumed too, its informative ones `carried` to the next step and its flat ones dropped.
    The admitted groups must complete the step (the gate admits until they do)."""
    walk = select_informative(informative, prompts, max_prompts)
    if not walk.complete:
        raise ValueError(
            f"{len(informative)} groups admitted hold {len(walk.kept)} informative ones of the {prompts} "
            f"a step needs, and the cap of {max_prompts} is not reached"
        )
    rest = range(walk.consumed, len(informative))
    return dataclasses.replace(
        walk,
        dropped=walk.dropped + tuple(j for j in rest if not informative[j]),
        carried=tuple(j for j in rest if informative[j]),
    )


def assemble(
    groups: Sequence[Rollout], selection: Selection, pad_id: int, carried_in: Sequence[Rollout] = ()
) -> Rollout:
    """The step's rollout from its consumed groups (groups[j] = the group at position j, one prompt
    each): the groups carried in from the step before (`carried_in`, trained first), the kept groups
    in data order, then the left-out ones with in_loss False, prompts left-padded with `pad_id` to the
    widest; `prompts_consumed` = selection.consumed (the carried-in groups were consumed before)."""
    if not selection.complete:
        raise ValueError("assemble needs a complete selection")
    step = Rollout.concat(
        list(carried_in) + [groups[j] for j in selection.kept] + [_left_out(groups[j]) for j in selection.left_out],
        pad_id=pad_id,
    )
    step.prompts_consumed = selection.consumed
    return step


def step_metrics(
    selection: Selection,
    refill_rounds: float,
    prompts_sampled: int,
    rewards: np.ndarray,
    correct: np.ndarray,
    sampled: Sequence[Rollout] = (),
) -> dict[str, float]:
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


class InformativeGate:
    """The engine's admission for one synchronous dynamic-sampling step (`collect_rollout(gate=...)`):
    groups enter while fewer than `need` have proved informative, and only while the informative
    groups found plus those in flight stay within need + `surplus`, so at most `surplus` informative
    groups are left over for the next step. metric: what makes a group flat
    (`sampling_filters.dynamic_sampling_values`)."""

    def __init__(self, need: int, surplus: int, metric: str = "reward"):
        if need < 1 or surplus < 0:
            raise ValueError(f"need >= 1 and surplus >= 0, got need={need}, surplus={surplus}")
        self.need, self.surplus, self.metric = need, surplus, metric
        self.found = 0

    def admit_limit(self, in_flight_groups: int) -> int:
        if self.found >= self.need:
            return 0
        return max(self.need + self.surplus - self.found - in_flight_groups, 0)

    def scored(self, group: Rollout) -> None:
        self.found += int(is_informative(group, self.metric))


def is_informative(group: Rollout, metric: str) -> bool:
    """The one-prompt rollout's G values of `metric` are not all equal."""
    values = dynamic_sampling_values(group.rewards, group.correct, metric)
    return bool(informative_groups(values.reshape(1, -1))[0])


def fill_informative(
    generate: Callable[[InformativeGate], Rollout],
    carried_in: Sequence[Rollout],
    prompts: int,
    max_prompts: int,
    pad_id: int,
    prompt_width: Callable[[Rollout], Rollout],
    metric: str = "reward",
) -> tuple[Rollout, list[Rollout], dict[str, float]]:
    """(the step's rollout, the groups it carries to the next step, its metrics): the synchronous
    loop's dynamic sampling, without rounds (the module docstring).

    generate(gate) -> the rollout of the groups the engine admitted under `gate` (the step's
    candidates from its data position on, in data order, at most max_prompts). The step holds the
    `carried_in` groups first, then `prompts - len(carried_in)` informative groups in data order (or,
    once max_prompts are consumed, the first dropped ones with in_loss False). prompt_width(step):
    the step with its prompts cut to the width its own prompts need (the candidates were padded
    together).

    Metrics (`step_metrics`): dynamic/refill_rounds = prompts generated beyond those the step
    needed, in steps' worth; dynamic/prompts_sampled = dynamic/prompts_consumed = the groups
    generated; dynamic/groups_carried = carried_in; reward/mean, reward/std and accuracy over every
    completion generated (the policy's own scores, not the kept groups')."""
    need = prompts - len(carried_in)
    if need == 0:  # the last step's surplus fills this one
        step = Rollout.concat(list(carried_in), pad_id=pad_id)
        step.prompts_consumed, step.generate_s, step.reward_s, step.generation = 0, 0.0, 0.0, None
        selection = Selection((), (), (), True)
        metrics = {
            "dynamic/dropped_group_fraction": 0.0,
            "dynamic/refill_rounds": 0.0,
            "dynamic/prompts_consumed": 0.0,
            "dynamic/prompts_sampled": 0.0,
        }
        return prompt_width(step), [], {**metrics, "dynamic/groups_carried": float(len(carried_in))}
    admitted = generate(InformativeGate(need, prompts, metric))
    groups = [admitted.group(j) for j in range(admitted.prompts)]
    selection = select_admitted([is_informative(group, metric) for group in groups], need, max_prompts)
    step = prompt_width(assemble(groups, selection, pad_id, carried_in))
    step.generate_s, step.reward_s, step.generation = admitted.generate_s, admitted.reward_s, admitted.generation
    metrics = step_metrics(
        selection, (admitted.prompts - need) / prompts, admitted.prompts, admitted.rewards, admitted.correct, [admitted]
    )
    carried_out = [groups[j] for j in selection.carried]
    return step, carried_out, {**metrics, "dynamic/groups_carried": float(len(carried_in))}


def carry_state(groups: Sequence[Rollout]) -> list[dict[str, Any]]:
    """The carried groups as JSON values (a checkpoint's meta): each `Rollout` field, arrays as
    {"dtype", "shape", "values"} (float32 values survive JSON exactly: a double holds them)."""
    return [
        {field.name: _to_json(getattr(group, field.name)) for field in dataclasses.fields(Rollout)} for group in groups
    ]


def groups_from_carry_state(state: Sequence[dict[str, Any]]) -> list[Rollout]:
    """`carry_state`'s groups back."""
    return [Rollout(**{name: _from_json(value) for name, value in group.items()}) for group in state]


def _to_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.reshape(-1).tolist()}
    if isinstance(value, tuple):
        return {"tuple": list(value)}
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"dtype", "shape", "values"}:
        return np.asarray(value["values"], value["dtype"]).reshape(value["shape"])
    if isinstance(value, dict) and set(value) == {"tuple"}:
        return tuple(value["tuple"])
    return value


def _left_out(group: Rollout) -> Rollout:
    """The group, out of the loss (a copy: the caller's group is not changed)."""
    return dataclasses.replace(group, in_loss=np.zeros_like(group.in_loss))

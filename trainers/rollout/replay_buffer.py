"""The versioned replay buffer of asynchronous GRPO, pure Python (no JAX, no threads).

A collector generates prompt groups (one prompt's G completions) with the newest weights it has and
`put`s them here stamped with that weight version; each training step `take`s exactly
`batch.prompts_per_step` groups. Vocabulary, with units in the names:

- weight version v: the number of optimizer steps applied to a set of weights. Step s trains the
  weights of version s and produces version s + 1; a group sampled by version v is stamped v.
- age of a group at step s: `s - v`, in steps. Step s may train a group iff 0 <= age <= max_age_steps
  (weights v may train steps v .. v + max age). max age 0 is on-policy: synchronous GRPO.
- prompt index: the prompt's global data position (prompts consumed since the run began, across
  epochs: see `data.PromptStream`), so the end of an epoch needs no special case here.

Data order is strict. Steps train a contiguous run of the prompt stream: the step that follows a
take of prompts [p, p + n) trains exactly prompts [p + n, p + n + count). So the prompts trained so
far are always exactly [start, next_prompt_index), no prompt is skipped or repeated, and a checkpoint
needs one integer: `next_prompt_index`, the first prompt not yet trained. A take waits (returns None) until every group
of its window is here and fresh; groups that arrive out of order (several generation workers, or a
re-generated stale group) simply wait in the buffer for their turn.

Staleness. At each take every buffered group older than max_age_steps is dropped (steps only grow,
so it could never be trained), counted in `dropped_stale`, and its prompt index is queued for the
collector (`pop_dropped`): the collector must regenerate those prompts, with newer weights, before
anything after them can be trained. The collector avoids producing groups that would be dropped by
asking `target_step` which step will train a prompt: generating prompt i with weights v is useful
only if `target_step(i) - v <= max_age_steps`; otherwise it waits for newer weights.

Capacity is a window on the prompt stream: a group is accepted iff its prompt index lies in
[next_prompt_index, next_prompt_index + capacity_groups). That bounds the buffer's size by
capacity_groups, bounds how far ahead of training the collector runs, and never refuses a group that
the next take needs (the window always holds the next step's prompts when capacity >= count), so a
full buffer cannot deadlock against a missing early group. `put` returns False for a group beyond
the window (retry after the next take; `has_room_for` asks before generating), and raises ValueError
for a group that would repeat a prompt (already trained, or already buffered).

Checkpoint and resume: buffered groups are NOT persisted. The checkpoint's data position is
`next_prompt_index`, the first prompt not yet trained; on resume the buffer starts empty at that
position (`ReplayBuffer(..., next_prompt_index=data position, next_step=step)`) and the collector regenerates every
buffered-but-untrained prompt with the restored weights. No prompt is skipped or repeated; the regenerated groups are
sampled by the restored (newer) weights, so an async run resumed mid-way is not bitwise equal to an
uninterrupted one (a synchronous run, or max age 0, is).

Dynamic sampling (rollout.dynamic_sampling) takes a step in runs instead: `peek_run` shows the
groups the step could consume next (the contiguous buffered run from next_prompt_index, fresh at the
step), `take_run` consumes the first of them (the window advances by each run; the step stays open)
and, with `step_done`, closes the step. Data order and staleness hold as above, run by run: the
prompts consumed are still exactly [start, next_prompt_index), and every group consumed at step s
has age in [0, max_age_steps]. A step then consumes at least prompts_per_step prompts, so
`target_step` (which counts prompts_per_step a step) is the latest step a prompt can be trained at
from a step boundary, an estimate inside an open step.

Not thread-safe by itself: the async loop guards it with one lock / condition variable (put
notifies; take waits on it with a timeout, so that a collector failure ends the wait).
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class TrajectoryGroup:
    """One prompt's G completions, stamped with the weights that generated them.

    prompt_index: the prompt's global data position.
    weight_version: the version of the weights that sampled it (optimizer steps applied to them).
      With in-flight weight updates a group may span versions: stamp the OLDEST one, so its age
      is never under-estimated.
    payload: whatever the trainer needs for the group, opaque here (token arrays, generator
      log-probs, rewards, advantages, ...).
    """

    prompt_index: int
    weight_version: int
    payload: Any = None


def age_steps(step: int, weight_version: int) -> int:
    """Age in steps of a group generated by weights `weight_version` when trained at `step`."""
    return step - weight_version


def default_capacity(prompts_per_step: int, max_age_steps: int) -> int:
    """Default `async.buffer_capacity_groups`: prompts_per_step x max(1, max_age_steps) x 2 groups.

    This is NeMo-RL's formula (prompts_per_step x max age x 2) with max age 0 counted as 1: at max
    age 0 (on-policy, synchronous) it still holds two steps of prompts instead of none, though only
    the current step's can be used. For every max age m it covers the (m + 1) x prompts_per_step
    groups a collector can usefully have ready (weights v serve steps v .. v + m).
    """
    if prompts_per_step < 1 or max_age_steps < 0:
        raise ValueError(f"need prompts_per_step >= 1 and max_age_steps >= 0, got {prompts_per_step}, {max_age_steps}")
    return prompts_per_step * max(1, max_age_steps) * 2


def target_step(prompt_index: int, next_prompt_index: int, next_step: int, prompts_per_step: int) -> int:
    """The step that will train `prompt_index` (>= next_prompt_index) when each step from `next_step`
    on trains the next `prompts_per_step` prompts in data order."""
    if prompt_index < next_prompt_index:
        raise ValueError(f"prompt {prompt_index} is before the next untrained prompt {next_prompt_index}")
    return next_step + (prompt_index - next_prompt_index) // prompts_per_step


class ReplayBuffer:
    """Groups waiting to be trained, keyed by prompt index. See the module docstring for the rules.

    capacity_groups: the window of prompt indices accepted ahead of training (also the most groups
      held at once); must be >= the count of every take.
    max_age_steps: the oldest a group may be when trained, in steps.
    next_prompt_index: the first prompt not yet trained (the resumed data position; 0 for a new run).
    next_step: the step the next take is for (the resumed step; 0 for a new run).
    """

    def __init__(self, capacity_groups: int, max_age_steps: int, next_prompt_index: int = 0, next_step: int = 0):
        if capacity_groups < 1:
            raise ValueError(f"capacity_groups must be >= 1, got {capacity_groups}")
        if max_age_steps < 0:
            raise ValueError(f"max_age_steps must be >= 0, got {max_age_steps}")
        if next_prompt_index < 0 or next_step < 0:
            raise ValueError(f"next_prompt_index and next_step must be >= 0, got {next_prompt_index}, {next_step}")
        self.capacity_groups = capacity_groups
        self.max_age_steps = max_age_steps
        self.next_prompt_index = next_prompt_index
        self.next_step = next_step
        self._groups: dict[int, TrajectoryGroup] = {}
        self._dropped_pending: list[int] = []
        self.dropped_stale = 0  # groups dropped as too old, over the buffer's life
        self.last_take_dropped_stale = 0  # ... since the take before the last successful one
        self.last_take_age_mean_steps = 0.0  # mean age of the groups of the last successful take
        self._dropped_since_take = 0
        self._open_step_ages: list[int] = []  # ages of the groups consumed so far by the open step (runs)

    # --- sizes -----------------------------------------------------------------------------------

    @property
    def size_groups(self) -> int:
        """Groups held now."""
        return len(self._groups)

    def buffered_prompt_indices(self) -> list[int]:
        """Prompt indices held now, ascending."""
        return sorted(self._groups)

    def has_room_for(self, prompt_index: int) -> bool:
        """True iff `put` would accept a (new) group for this prompt now: it lies in the window
        [next_prompt_index, next_prompt_index + capacity_groups). Ask before generating it."""
        return self.next_prompt_index <= prompt_index < self.next_prompt_index + self.capacity_groups

    def target_step(self, prompt_index: int, prompts_per_step: int) -> int:
        """The step that will train `prompt_index` (see the module function `target_step`)."""
        return target_step(prompt_index, self.next_prompt_index, self.next_step, prompts_per_step)

    # --- put / take ------------------------------------------------------------------------------

    def put(self, group: TrajectoryGroup) -> bool:
        """Store a group. Returns False, storing nothing, when its prompt lies beyond the window
        (the buffer is "full" for it: retry after the next take). Raises ValueError for a group that
        would repeat a prompt (already trained, or already buffered) or has a negative index/version."""
        index, version = group.prompt_index, group.weight_version
        if index < 0 or version < 0:
            raise ValueError(f"prompt_index and weight_version must be >= 0, got {index}, {version}")
        if index < self.next_prompt_index:
            raise ValueError(
                f"prompt {index} was already trained (the next untrained prompt is {self.next_prompt_index}); "
                "putting it again would repeat it"
            )
        if index in self._groups:
            raise ValueError(f"prompt {index} is already buffered; putting it again would repeat it")
        if not self.has_room_for(index):
            return False
        self._groups[index] = group
        return True

    def take(self, step: int, count: int) -> list[TrajectoryGroup] | None:
        """The groups step `step` trains: exactly prompts [next_prompt_index, next_prompt_index + count),
        ascending, every one with age step - weight_version in [0, max_age_steps]; None if one of
        them is not here yet (nothing is removed then, except stale groups).

        First, every buffered group older than max_age_steps at `step` is dropped and counted, and its
        prompt index queued for regeneration (`pop_dropped`). On success the window advances by
        `count` and the next take is for a later step.

        Raises ValueError for a step earlier than `next_step` (a step trained twice), a count outside
        [1, capacity_groups] (it could never be satisfied), or a group stamped with a version newer
        than `step` (the trainer has no such weights yet: a version-stamping bug, which would
        otherwise wait forever).
        """
        if step < self.next_step:
            raise ValueError(f"step {step} was already taken for (the next step is {self.next_step})")
        if not 1 <= count <= self.capacity_groups:
            raise ValueError(f"count must be in [1, capacity_groups={self.capacity_groups}], got {count}")
        self._drop_stale(step)

        window = range(self.next_prompt_index, self.next_prompt_index + count)
        if any(i not in self._groups for i in window):
            return None
        taken = [self._groups.pop(i) for i in window]
        self.next_prompt_index += count
        self.next_step = step + 1
        self.last_take_age_mean_steps = sum(age_steps(step, g.weight_version) for g in taken) / count
        self.last_take_dropped_stale, self._dropped_since_take = self._dropped_since_take, 0
        return taken

    def peek_run(self, step: int, limit: int) -> list[TrajectoryGroup]:
        """Dynamic sampling: the groups step `step` could consume next, nothing removed: prompts
        [next_prompt_index, next_prompt_index + k), ascending, for the largest k <= limit such that all
        of them are buffered (each then has age in [0, max_age_steps]: stale groups are dropped
        first, exactly as in `take`, which also gives `take`'s ValueErrors)."""
        self._drop_stale(step)
        run = []
        for index in range(self.next_prompt_index, self.next_prompt_index + max(limit, 0)):
            group = self._groups.get(index)
            if group is None:
                break
            run.append(group)
        return run

    def take_run(self, step: int, count: int, step_done: bool) -> list[TrajectoryGroup]:
        """Dynamic sampling: remove and return the first `count` groups of `peek_run(step, count)`
        (prompts [next_prompt_index, next_prompt_index + count); the window advances by count). With
        step_done the step ends (the next take is for a later step) and the metrics describe the
        groups consumed by its runs. Raises ValueError if one of them is not buffered and fresh."""
        run = self.peek_run(step, count)
        if len(run) != count:
            raise ValueError(
                f"prompts {self.next_prompt_index}..{self.next_prompt_index + count - 1} are not all "
                f"buffered and fresh at step {step}"
            )
        for group in run:
            del self._groups[group.prompt_index]
        self.next_prompt_index += count
        self._open_step_ages.extend(age_steps(step, g.weight_version) for g in run)
        if step_done:
            self.next_step = step + 1
            ages, self._open_step_ages = self._open_step_ages, []
            self.last_take_age_mean_steps = sum(ages) / len(ages) if ages else 0.0
            self.last_take_dropped_stale, self._dropped_since_take = self._dropped_since_take, 0
        return run

    def _drop_stale(self, step: int) -> None:
        """Drop (count, queue for regeneration) every group older than max_age_steps at `step`; raise
        for a step already taken or a group stamped newer than `step` (see `take`)."""
        if step < self.next_step:
            raise ValueError(f"step {step} was already taken for (the next step is {self.next_step})")
        future = [g for g in self._groups.values() if g.weight_version > step]
        if future:
            g = min(future, key=lambda g: g.prompt_index)
            raise ValueError(
                f"prompt {g.prompt_index} is stamped with weight version {g.weight_version}, newer than step "
                f"{step}'s weights (version {step}); the collector stamps versions wrongly"
            )
        stale = sorted(i for i, g in self._groups.items() if age_steps(step, g.weight_version) > self.max_age_steps)
        for index in stale:
            del self._groups[index]
        self._dropped_pending.extend(stale)
        self.dropped_stale += len(stale)
        self._dropped_since_take += len(stale)

    def pop_dropped(self) -> list[int]:
        """Prompt indices dropped as stale since the last call, ascending; the caller regenerates
        them (training cannot pass them otherwise). Each index is returned once."""
        out, self._dropped_pending = sorted(self._dropped_pending), []
        return out

    # --- metrics ---------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Per-step metrics, read right after a successful take:
        async/buffer_size: groups held after the take (how far the collector is ahead);
        async/trajectory_age_mean: mean age in steps of the groups just taken;
        async/dropped_stale: groups dropped as too old since the previous successful take."""
        return {
            "async/buffer_size": float(self.size_groups),
            "async/trajectory_age_mean": float(self.last_take_age_mean_steps),
            "async/dropped_stale": float(self.last_take_dropped_stale),
        }

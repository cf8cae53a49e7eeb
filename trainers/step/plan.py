"""The batch plan: the one value that says how a step's prompts become generation calls,
log-prob passes and optimizer updates. The training loop walks it; `validate` prints it.

Within a step, sequences are laid out prompt-major: sequence `i` is completion `i % G` of the
step's prompt `i // G`, so a group of G is contiguous and a mini-batch of `mini_batch_prompts`
prompts is a contiguous block of `mini_batch_prompts * G` sequences.

Accumulation is always derived (mini-batch sequences / train micro-batch sequences), never set by
hand, and the rollout and log-prob micro-batches are independent of the train micro-batch.

Devices: every micro-batch is split over the devices of its mesh's data and fsdp axes (the rollout
micro-batch over the rollout mesh's data axis when generation has devices of its own); the tensor
axis splits the model, so the devices of one tensor group share their sequences. `describe` shows
the meshes and the sequences each device gets per micro-batch.

Token budgets: a sequence holds at most `data.max_prompt_tokens` prompt tokens (prompts are padded to
the longest of a step, never beyond) and `completion_token_budget(config)` completion tokens, so a
step holds at most `tokens_per_step` = sequences x (prompt + completion budget) token positions.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from trainers.config import ExperimentConfig
from trainers.config.budgets import DEFAULT_MAX_NEW_TOKENS, completion_token_budget  # noqa: F401 (re-exported)
from trainers.parallel.sizes import resolve_axis_sizes


@dataclasses.dataclass(frozen=True)
class SequenceSlice:
    """Sequences [start, stop) of a step's prompt-major layout."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class OptimizerUpdate:
    """One optimizer update: pass `iteration` (0..mu-1) over mini-batch `mini_batch`, made of
    `micro_batches` whose gradients are summed before the update."""

    iteration: int
    mini_batch: int
    sequences: SequenceSlice
    micro_batches: tuple[SequenceSlice, ...]


def split_sequences(total: int, size: int, offset: int = 0) -> tuple[SequenceSlice, ...]:
    """[0, total) in consecutive slices of at most `size`, shifted by `offset`."""
    return tuple(SequenceSlice(offset + s, offset + min(s + size, total)) for s in range(0, total, size))


def shared_prompt_group(prompt_tokens: np.ndarray, prompt_valid: np.ndarray, group: int) -> int:
    """`group` when the rows (axis -2) of prompt_tokens / prompt_valid [..., rows, Lp] come as whole
    runs of `group` rows that share one prompt (tokens and padding), in every leading index; else 1.

    A batch laid out prompt-major in whole groups passes (also one that `informative_first` reordered
    by whole groups); a micro-batch that splits a group does not. The log-prob passes and updates
    run a passing batch's prompts once per group (`completion_logprobs(prompt_group=...)`)."""
    rows, width = prompt_tokens.shape[-2], prompt_tokens.shape[-1]
    if group <= 1 or rows % group:
        return 1
    for array in (prompt_tokens, prompt_valid):
        runs = np.asarray(array).reshape(-1, rows // group, group, width)
        if not np.array_equal(runs, np.broadcast_to(runs[:, :, :1], runs.shape)):
            return 1
    return group


def informative_first(informative: np.ndarray, update: OptimizerUpdate) -> tuple[np.ndarray, int]:
    """(rows, micro_batches): the update's sequence rows with the rows of informative groups first
    (each part in its original order), and how many of the update's micro-batches those rows fill,
    rounded up to a power of two so the update compiles for few shapes (0, 1, 2, 4, ..., all).

    informative: [N] bool for the step's N sequences, the same for every row of a group (a group
    whose rewards are not all equal, `sampling_filters.informative_groups`), so whole groups move
    together and micro-batches of whole groups still share their prompts (`shared_prompt_group`),
    even when a row inside an informative group has advantage 0 (partial credit). Without a KL term
    or an entropy bonus a flat group adds exactly nothing to the gradient (its advantages are all 0),
    so training only the first `micro_batches` micro-batches of `rows` gives the same update with
    less compute; 0 means no informative group at all (the gradient is 0)."""
    rows = np.arange(update.sequences.start, update.sequences.stop)
    chosen = np.asarray(informative, bool)[rows]
    ordered = np.concatenate([rows[chosen], rows[~chosen]])
    size = update.micro_batches[0].size
    needed = -(-int(chosen.sum()) // size)
    if needed == 0:
        return ordered, 0
    return ordered, min(1 << (needed - 1).bit_length(), len(update.micro_batches))


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    prompts_per_step: int
    num_generations: int
    sequences_per_step: int
    mini_batch_prompts: int
    mini_batch_sequences: int
    mini_batches_per_iteration: int
    num_iterations: int
    optimizer_updates_per_step: int
    train_micro_batch_sequences: int
    accumulation_steps: int
    rollout_micro_batch_sequences: int
    rollout_passes_per_step: int
    logprob_micro_batch_sequences: int
    needs_old_logprobs: bool
    old_logprob_passes_per_step: int
    needs_reference: bool
    reference_logprob_passes_per_step: int
    max_steps: int
    dataset_prompts: int | None
    prompt_token_budget: int  # data.max_prompt_tokens
    completion_token_budget: int  # rollout.max_new_tokens, or the task's own budget
    # the train mesh (mesh.*, a -1 resolved when mesh.train_devices says how many devices; else it
    # stays -1, the rest of the devices, known when the run starts) and the rollout mesh's devices
    mesh_data: int = 1
    mesh_fsdp: int = 1
    mesh_tensor: int = 1
    train_devices: tuple[int, ...] = ()
    rollout_devices: tuple[int, ...] = ()  # empty: generation runs on the train mesh
    rollout_tensor: int = 1
    packed_micro_batch_tokens: int | None = None  # batch.train_micro_batch_tokens (None: derived)
    packed_logprob_micro_batch_tokens: int | None = None  # batch.logprob_micro_batch_tokens (None: derived)

    # -- devices -------------------------------------------------------------------------------

    @property
    def batch_split(self) -> int | None:
        """Devices a train or log-prob micro-batch is split over (data x fsdp); None while a -1 is unresolved."""
        if -1 in (self.mesh_data, self.mesh_fsdp):
            return None
        return self.mesh_data * self.mesh_fsdp

    @property
    def rollout_split(self) -> int | None:
        """Devices a rollout micro-batch is split over: the rollout mesh's data axis, else the train mesh's."""
        if self.rollout_devices:
            return len(self.rollout_devices) // self.rollout_tensor
        return self.batch_split

    @property
    def mesh_text(self) -> str:
        """The train mesh, e.g. "data 2 x fsdp 4 x tensor 1 (8 devices)"; "one device (no mesh)"."""
        sizes = (("data", self.mesh_data), ("fsdp", self.mesh_fsdp), ("tensor", self.mesh_tensor))
        if all(n == 1 for _, n in sizes) and not self.train_devices and not self.rollout_devices:
            return "one device (no mesh)"
        axes = " x ".join(f"{name} {n}" for name, n in sizes)
        if -1 in (n for _, n in sizes):
            return f"{axes} (-1: the rest of the devices, known when the run starts)"
        devices = self.mesh_data * self.mesh_fsdp * self.mesh_tensor
        listed = f": mesh.train_devices {list(self.train_devices)}" if self.train_devices else ""
        return f"{axes} ({devices} device{'s' * (devices != 1)}{listed})"

    @property
    def rollout_mesh_text(self) -> str:
        """The rollout mesh, e.g. "data 2 x tensor 2 (4 devices: mesh.rollout_devices [4, 5, 6, 7])"."""
        if not self.rollout_devices:
            return "the train mesh"
        return (
            f"data {self.rollout_split} x tensor {self.rollout_tensor} ({len(self.rollout_devices)} devices: "
            f"mesh.rollout_devices {list(self.rollout_devices)})"
        )

    @property
    def train_sequences_per_device(self) -> int | None:
        """Sequences each device trains per train micro-batch; None while the mesh's size is unknown."""
        return None if self.batch_split is None else self.train_micro_batch_sequences // self.batch_split

    def _per_device(self, sequences: int, split: int | None, axes: str = "data x fsdp") -> str:
        """ "16 sequences = 2 per device (split over data x fsdp = 8)"."""
        if split is None:
            return f"{sequences} sequences (split over {axes} when the run starts)"
        if split == 1 and self.mesh_text == "one device (no mesh)":
            return f"{sequences} sequences"
        return f"{sequences} sequences = {sequences // split} per device (split over {axes} = {split})"

    @property
    def train_micro_batch_tokens(self) -> int:
        """Token positions a train micro-batch holds at most: batch.train_micro_batch_tokens when set
        (packed micro-batches), else its sequences x (prompt + completion budget)."""
        if self.packed_micro_batch_tokens is not None:
            return self.packed_micro_batch_tokens
        return self.train_micro_batch_sequences * (self.prompt_token_budget + self.completion_token_budget)

    @property
    def logprob_micro_batch_tokens(self) -> int:
        """Token positions a log-prob micro-batch holds at most: batch.logprob_micro_batch_tokens when
        set (packed micro-batches), else its sequences x (prompt + completion budget)."""
        if self.packed_logprob_micro_batch_tokens is not None:
            return self.packed_logprob_micro_batch_tokens
        return self.logprob_micro_batch_sequences * (self.prompt_token_budget + self.completion_token_budget)

    @property
    def tokens_per_step(self) -> int:
        """Token positions a step holds at most: sequences x (prompt + completion budget)."""
        return self.sequences_per_step * (self.prompt_token_budget + self.completion_token_budget)

    # -- the walk ------------------------------------------------------------------------------

    def rollout_slices(self) -> tuple[SequenceSlice, ...]:
        """Generation calls of one step, in order."""
        return split_sequences(self.sequences_per_step, self.rollout_micro_batch_sequences)

    def logprob_slices(self) -> tuple[SequenceSlice, ...]:
        """Old-policy / reference log-prob passes of one step, in order."""
        return split_sequences(self.sequences_per_step, self.logprob_micro_batch_sequences)

    def updates(self) -> tuple[OptimizerUpdate, ...]:
        """Every optimizer update of one step, in order: mu passes, each over all mini-batches."""
        out = []
        for iteration in range(self.num_iterations):
            for mini_batch in range(self.mini_batches_per_iteration):
                start = mini_batch * self.mini_batch_sequences
                sequences = SequenceSlice(start, start + self.mini_batch_sequences)
                micro = split_sequences(self.mini_batch_sequences, self.train_micro_batch_sequences, offset=start)
                out.append(OptimizerUpdate(iteration, mini_batch, sequences, micro))
        return tuple(out)

    # -- data ----------------------------------------------------------------------------------

    def data_position_at(self, step: int) -> int:
        """Prompts consumed before `step` (0-based): the data position saved with a checkpoint."""
        return step * self.prompts_per_step

    @property
    def total_prompts(self) -> int:
        return self.max_steps * self.prompts_per_step

    @property
    def epochs(self) -> float | None:
        return None if not self.dataset_prompts else self.total_prompts / self.dataset_prompts

    @property
    def total_optimizer_updates(self) -> int:
        return self.max_steps * self.optimizer_updates_per_step

    def describe(self) -> str:
        """Human-readable plan, printed by `python -m trainers validate`."""
        g = self.num_generations
        lines = [
            "Batch plan (per step)",
            f"  prompts per step              {self.prompts_per_step}",
            f"  sequences per step            {self.sequences_per_step}  ({self.prompts_per_step} prompts x G={g})",
            f"  rollout passes                {self.rollout_passes_per_step}  "
            f"(of {self.rollout_micro_batch_sequences} sequences)",
            f"  old-policy log-prob passes    {self.old_logprob_passes_per_step}  "
            + (
                f"(of {self.logprob_micro_batch_sequences} sequences)"
                if self.needs_old_logprobs
                else "(not needed: mu=1 and one mini-batch, so the current log-probs stand in)"
            ),
            f"  reference log-prob passes     {self.reference_logprob_passes_per_step}  "
            + (
                f"(of {self.logprob_micro_batch_sequences} sequences)"
                if self.needs_reference
                else "(grpo.beta=0: no reference model is loaded)"
            ),
            f"  mini-batches per pass         {self.mini_batches_per_iteration}  "
            f"(of {self.mini_batch_prompts} prompts = {self.mini_batch_sequences} sequences)",
            f"  passes (mu)                   {self.num_iterations}",
            f"  optimizer updates per step    {self.optimizer_updates_per_step}  "
            f"(mu={self.num_iterations} x {self.prompts_per_step}/{self.mini_batch_prompts})",
            f"  train micro-batch             {self.train_micro_batch_sequences} sequences  "
            f"(at most {self.train_micro_batch_tokens} token positions)",
            f"  accumulation steps            {self.accumulation_steps}  "
            f"({self.mini_batch_sequences}/{self.train_micro_batch_sequences}, derived)",
            f"  tokens per step (at most)     {self.tokens_per_step}  ({self.sequences_per_step} sequences x "
            f"({self.prompt_token_budget} prompt + {self.completion_token_budget} completion tokens))",
            "Devices",
            f"  train mesh                    {self.mesh_text}",
            f"  rollout mesh                  {self.rollout_mesh_text}",
        ]
        if self.mesh_tensor != 1 or self.rollout_tensor != 1:
            lines.append(
                "                                (tensor splits the model, not the sequences: the "
                "devices of one tensor group share theirs)"
            )
        rollout_axes = "the rollout mesh's data axis" if self.rollout_devices else "data x fsdp"
        lines += [
            f"  train micro-batch             {self._per_device(self.train_micro_batch_sequences, self.batch_split)}",
        ]
        if self.needs_old_logprobs or self.needs_reference:
            lines.append(
                f"  log-prob micro-batch          "
                f"{self._per_device(self.logprob_micro_batch_sequences, self.batch_split)}  "
                f"(at most {self.logprob_micro_batch_tokens} token positions)"
            )
        lines += [
            f"  rollout micro-batch           "
            f"{self._per_device(self.rollout_micro_batch_sequences, self.rollout_split, rollout_axes)}",
            "Run",
            f"  steps                         {self.max_steps}",
            f"  optimizer updates             {self.total_optimizer_updates}",
            f"  prompts consumed              {self.total_prompts}",
        ]
        if self.dataset_prompts:
            steps_per_epoch = self.dataset_prompts / self.prompts_per_step
            lines += [
                f"  dataset                       {self.dataset_prompts} prompts per epoch "
                f"({steps_per_epoch:.2f} steps per epoch, {self.epochs:.2f} epochs)",
                "  epoch ends                    every prompt is used once per epoch, reshuffled per epoch from "
                "the seed;",
                "                                a step that reaches the end of an epoch completes itself from "
                "the next epoch",
                "                                (no partial batch is dropped).",
            ]
        return "\n".join(lines)


def make_plan(
    config: ExperimentConfig, dataset_prompts: int | None = None, train_micro_batch_sequences: int | None = None
) -> BatchPlan:
    """Derive the plan from a validated config (see `config.check_config` for the divisibility rules).
    train_micro_batch_sequences: the micro-batch chosen for a null batch.train_micro_batch_sequences
    (`memory_estimate.fit_step`: a divisor of the mini-batch); None: the config's, or the mini-batch."""
    b, g = config.batch, config.grpo
    prompts = b.prompts_per_step
    mini_prompts = b.mini_batch_prompts or prompts
    sequences = prompts * g.num_generations
    mini_sequences = mini_prompts * g.num_generations
    train_micro = b.train_micro_batch_sequences or train_micro_batch_sequences or mini_sequences
    rollout_micro = b.rollout_micro_batch_sequences or sequences
    logprob_micro = b.logprob_micro_batch_sequences or train_micro
    mini_batches = prompts // mini_prompts
    needs_old = g.num_iterations > 1 or mini_batches > 1
    needs_ref = g.beta > 0
    logprob_passes = math.ceil(sequences / logprob_micro)
    m = config.mesh
    sizes = {"data": m.data, "fsdp": m.fsdp, "tensor": m.tensor}
    if m.train_devices:
        sizes = resolve_axis_sizes(sizes, len(m.train_devices), devices_field="mesh.train_devices")
    return BatchPlan(
        prompts_per_step=prompts,
        num_generations=g.num_generations,
        sequences_per_step=sequences,
        mini_batch_prompts=mini_prompts,
        mini_batch_sequences=mini_sequences,
        mini_batches_per_iteration=mini_batches,
        num_iterations=g.num_iterations,
        optimizer_updates_per_step=g.num_iterations * mini_batches,
        train_micro_batch_sequences=train_micro,
        accumulation_steps=mini_sequences // train_micro,
        rollout_micro_batch_sequences=rollout_micro,
        rollout_passes_per_step=math.ceil(sequences / rollout_micro),
        logprob_micro_batch_sequences=logprob_micro,
        needs_old_logprobs=needs_old,
        old_logprob_passes_per_step=logprob_passes if needs_old else 0,
        needs_reference=needs_ref,
        reference_logprob_passes_per_step=logprob_passes if needs_ref else 0,
        max_steps=config.train.max_steps,
        dataset_prompts=dataset_prompts,
        prompt_token_budget=config.data.max_prompt_tokens,
        completion_token_budget=completion_token_budget(config),
        mesh_data=sizes["data"],
        mesh_fsdp=sizes["fsdp"],
        mesh_tensor=sizes["tensor"],
        train_devices=tuple(m.train_devices),
        rollout_devices=tuple(m.rollout_devices),
        packed_micro_batch_tokens=b.train_micro_batch_tokens,
        packed_logprob_micro_batch_tokens=b.logprob_micro_batch_tokens,
        rollout_tensor=m.rollout_tensor,
    )

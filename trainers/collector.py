"""The trajectory collector of asynchronous GRPO: a background thread that generates prompt groups
with the newest weights it has and puts them in the `ReplayBuffer`, stamped with their weight version.

Units of work. The collector generates in *units*: the smallest run of whole prompt groups that is
also a run of whole rollout micro-batches (`lcm(G, batch.rollout_micro_batch_sequences) / G`
prompts; it divides `batch.prompts_per_step`, so units never straddle a step).

Weight swaps. By default new weights are picked up at unit boundaries ("group-boundary swap"): each
unit is generated entirely by one weight version, and every generation call builds its KV cache
from scratch with those weights. With `async.in_flight_weight_updates` the collector instead asks
for the newest published weights before every `async.in_flight_chunk_tokens` decode steps
(`generate.generate_in_flight`), so a long generation switches to new weights mid-sequence instead
of finishing on old ones. The KV cache is kept across such a swap (keys and values of tokens
already processed stay as the older weights computed them; nothing is recomputed), and each
token's recorded log-prob pi_gen is the one it was actually sampled with, so the trainer's
importance weights stay exact per token. A group is stamped with the OLDEST version that sampled
any of its tokens, so its age (and the staleness bound) is never under-estimated;
`GroupPayload.token_versions` keeps the per-token versions (`async/token_age_mean`).

Determinism. Prompt i belongs to step t = i // prompts_per_step (steps always consume whole
batches from position 0, and a resume starts at a step boundary). Its unit is generated exactly as
the synchronous loop generates that part of step t: prompts left-padded to step t's longest
prompt, rollout slice k of the step sampled with key fold_in(fold_in(key(seed), t), k). So the
samples depend only on (seed, prompt index, weights used), never on thread timing; with max age 0
the weights used are the trainer's own and the async run is the sync run (tests check the digest).

Scheduling (all under the one `threading.Condition` that guards the buffer):
  1. stale groups dropped by a take (`pop_dropped`) are regenerated first (their whole unit, minus
     groups still buffered);
  2. otherwise the next unit in data order, up to the last prompt the run will train
     (train.max_steps x prompts_per_step);
  3. a unit is generated only when (a) all its prompts lie in the buffer's capacity window
     (`has_room_for`) and (b) the newest weights are fresh enough for the step that will train it
     (`target_step - version <= max_age_steps`), so the collector never produces groups that would
     be dropped; otherwise it waits for the next take / weight publish (both notify).
The window always contains the next step's prompts (capacity >= prompts_per_step) and takes are in
data order, so a slow group delays only its own step, never deadlocks one (NeMo-RL #3238); the end
of the dataset or an epoch needs no case here since prompt indices are `PromptStream` global
positions (#2899).

Failures. Any exception in the thread is stored in `error` and every waiter is woken; the trainer's
wait loop checks `error` on every wake-up (at most `poll_s` apart) and re-raises that exception, so
a broken collector fails the run within seconds instead of leaving the trainer waiting (#3488).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
import time
from typing import Any, Callable

import jax
import numpy as np

from trainers.advantages import compute_advantages
from trainers.data import PromptStream, encode_prompts
from trainers.generate import SamplingParams, generate, generate_in_flight
from trainers.replay_buffer import ReplayBuffer, TrajectoryGroup
from trainers.rewards import is_correct, score


def unit_prompts(num_generations: int, rollout_micro_batch_sequences: int) -> int:
    """Prompts per collector unit: the smallest whole-group run that is also whole rollout calls."""
    return math.lcm(num_generations, rollout_micro_batch_sequences) // num_generations


@dataclasses.dataclass
class GroupPayload:
    """One prompt's G completions, as the trainer needs them (numpy, host memory).

    Shapes: G completions, Lp the prompt length of the group's step (left-padded to that step's
    longest prompt), Lc = max_new_tokens.
    """

    example: dict[str, Any]
    prompt_tokens: np.ndarray       # [G, Lp] int32
    prompt_valid: np.ndarray        # [G, Lp] bool
    completion_tokens: np.ndarray   # [G, Lc] int32
    completion_mask: np.ndarray     # [G, Lc] bool
    sample_logprobs: np.ndarray     # [G, Lc] float32, log pi_gen recorded when sampling
    token_versions: np.ndarray      # [G, Lc] int32, the weight version that sampled each token
    completions: list[str]          # [G]
    rewards: np.ndarray             # [G] float32
    correct: np.ndarray             # [G] bool
    advantages: np.ndarray          # [G] float32
    generate_s: float               # seconds the group's unit spent generating, shared by its groups


class Collector(threading.Thread):
    """Generates units into `buffer` (guarded by `cond`) until `stop()`; see the module docstring.

    params / version: the weights it generates with; `publish(params, version)` replaces them.
    end_prompt: the first prompt index the run will not train (nothing at or after it is generated).
    in_flight_chunk_tokens: > 0 = in-flight weight updates, taking the newest weights every this
      many decode steps; 0 = swap at unit boundaries only.
    prompt_sharding: where each generation call's prompts go (split over the rollout devices along
      the batch axis); None = as they are, with the params.
    decode: callable(ids) -> str for completions (the tokenizer's, with PAD/BOS made visible).
    """

    def __init__(
        self,
        *,
        buffer: ReplayBuffer,
        cond: threading.Condition,
        stream: PromptStream,
        graphdef: Any,
        params: Any,
        version: int,
        tokenizer: Any,
        decode: Callable[[np.ndarray], str],
        sampling: SamplingParams,
        max_prompt_tokens: int,
        reward_specs: list[tuple[str, float]],
        advantage: str,
        advantage_eps: float,
        prompts_per_step: int,
        num_generations: int,
        rollout_micro_batch_sequences: int,
        max_age_steps: int,
        end_prompt: int,
        base_key: jax.Array,
        in_flight_chunk_tokens: int = 0,
        prompt_sharding: Any = None,
        poll_s: float = 0.2,
    ):
        super().__init__(name="grpo-collector", daemon=True)
        self.buffer, self.cond, self.stream = buffer, cond, stream
        self.graphdef, self.tokenizer, self.decode, self.sampling = graphdef, tokenizer, decode, sampling
        self.max_prompt_tokens, self.reward_specs = max_prompt_tokens, reward_specs
        self.advantage, self.advantage_eps = advantage, advantage_eps
        self.prompts_per_step, self.num_generations = prompts_per_step, num_generations
        self.rollout_micro = rollout_micro_batch_sequences
        self.unit = unit_prompts(num_generations, rollout_micro_batch_sequences)
        if prompts_per_step % self.unit:
            raise ValueError(f"unit of {self.unit} prompts does not divide prompts_per_step={prompts_per_step}")
        self.max_age_steps, self.end_prompt, self.base_key, self.poll_s = max_age_steps, end_prompt, base_key, poll_s
        self.params, self.version = params, version
        self.in_flight_chunk_tokens = in_flight_chunk_tokens
        self.prompt_sharding = prompt_sharding
        self.in_flight_swaps = 0                               # chunks that started on newer weights
        self.next_unit_start = buffer.next_prompt_index       # next never-generated unit (data order)
        self._regenerate: set[int] = set()                     # unit starts to regenerate first
        self.error: BaseException | None = None
        self._stopping = False
        self.units_generated = 0
        # (unit start, weight version) of the most recent units, for tests and logs
        self.versions_used: collections.deque[tuple[int, int]] = collections.deque(maxlen=4096)

    # -- called by the trainer (any thread) ------------------------------------------------------

    def publish(self, params: Any, version: int) -> None:
        """New weights (already on the rollout device, not donated by anyone); used from the next unit,
        or from the next decode chunk with in-flight updates."""
        with self.cond:
            self.params, self.version = params, version
            self.cond.notify_all()

    def newest_weights(self) -> tuple[Any, int]:
        """(params, version) most recently published."""
        with self.cond:
            return self.params, self.version

    def stop(self, timeout_s: float = 60.0) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)

    # -- the thread ---------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                with self.cond:
                    job = self._next_job_locked()
                    while job is None and not self._stopping:
                        self.cond.wait(self.poll_s)
                        job = self._next_job_locked()
                    if self._stopping:
                        return
                    start, params, version = job
                groups = self.generate_unit(start, params, version)
                with self.cond:
                    buffered = set(self.buffer.buffered_prompt_indices())
                    for group in groups:
                        # A prompt can only be missing from the buffer here, never trained: the trainer
                        # cannot take past a prompt that is not buffered.
                        if group.prompt_index not in buffered:
                            if not self.buffer.put(group):
                                raise RuntimeError(f"replay buffer refused prompt {group.prompt_index} inside its window")
                    self.units_generated += 1
                    self.versions_used.append((start, version))
                    self.cond.notify_all()
        except BaseException as error:  # noqa: BLE001 - stored and re-raised by the trainer's thread
            with self.cond:
                self.error = error
                self.cond.notify_all()

    def _next_job_locked(self) -> tuple[int, Any, int] | None:
        """(unit start, params, version) to generate now, or None to wait. Caller holds `cond`."""
        for index in self.buffer.pop_dropped():
            self._regenerate.add(index - index % self.unit)
        candidates = sorted(self._regenerate)
        if self.next_unit_start < self.end_prompt:
            candidates.append(self.next_unit_start)
        for start in candidates:
            last = start + self.unit - 1
            if start < self.buffer.next_prompt_index:       # already trained (cannot happen; be safe)
                self._regenerate.discard(start)
                continue
            if not self.buffer.has_room_for(last):
                return None                                 # later units are further out of the window
            target = self.buffer.target_step(start, self.prompts_per_step)
            if target - self.version > self.max_age_steps:
                return None                                 # would be stale when trained: wait for weights
            if start in self._regenerate:
                self._regenerate.discard(start)
            else:
                self.next_unit_start += self.unit
            return start, self.params, self.version
        return None

    def _weights_from(self, version: int) -> Callable[[], tuple[Any, int]]:
        """The in-flight `weights()` callback: the newest published weights, never older than `version`
        (the unit's scheduled version) and counting swaps to newer ones."""
        seen = [version]

        def weights() -> tuple[Any, int]:
            params, newest = self.newest_weights()
            if newest > seen[0]:
                self.in_flight_swaps += 1
                seen[0] = newest
            return params, newest

        return weights

    def generate_unit(self, start: int, params: Any, version: int) -> list[TrajectoryGroup]:
        """Generate prompts [start, start + unit) exactly as the synchronous loop generates that part of
        their step (same padding, same per-slice keys)."""
        t0 = time.perf_counter()
        g, p = self.num_generations, self.prompts_per_step
        step, offset = divmod(start, p)
        step_examples = self.stream.take(step * p, p)
        tokens, valid = encode_prompts(self.tokenizer, [e["prompt"] for e in step_examples], self.max_prompt_tokens)
        examples = step_examples[offset:offset + self.unit]
        prompt_tokens = np.repeat(tokens[offset:offset + self.unit], g, axis=0)
        prompt_valid = np.repeat(valid[offset:offset + self.unit], g, axis=0)
        step_key = jax.random.fold_in(self.base_key, step)
        first_slice = offset * g // self.rollout_micro
        out_tokens, out_mask, out_logprobs, out_versions = [], [], [], []
        for k, s in enumerate(range(0, self.unit * g, self.rollout_micro)):
            rows = slice(s, s + self.rollout_micro)
            key = jax.random.fold_in(step_key, first_slice + k)
            call_tokens, call_valid = prompt_tokens[rows], prompt_valid[rows]
            if self.prompt_sharding is not None:
                call_tokens, call_valid = jax.device_put((call_tokens, call_valid), self.prompt_sharding)
            if self.in_flight_chunk_tokens:
                result = generate_in_flight(self.graphdef, self._weights_from(version), call_tokens, call_valid,
                                            key, self.sampling, self.in_flight_chunk_tokens)
                versions = result.token_versions
            else:
                result = generate(self.graphdef, params, call_tokens, call_valid, key, self.sampling)
                versions = np.full(result.tokens.shape, version, np.int32)
            out_tokens.append(result.tokens)
            out_mask.append(result.mask)
            out_logprobs.append(result.logprobs)
            out_versions.append(versions)
        completion_tokens = np.concatenate(out_tokens)
        completion_mask = np.concatenate(out_mask)
        sample_logprobs = np.concatenate(out_logprobs)
        token_versions = np.concatenate(out_versions)
        completions = [self.decode(row[m]) for row, m in zip(completion_tokens, completion_mask)]
        per_sequence = [examples[i // g] for i in range(len(completions))]
        rewards, _ = score(completions, per_sequence, self.reward_specs)
        rewards = np.asarray(rewards, np.float32)
        correct = np.array([is_correct(c, e) for c, e in zip(completions, per_sequence)], dtype=bool)
        advantages = compute_advantages(rewards.reshape(self.unit, g), self.advantage, self.advantage_eps).reshape(-1)
        elapsed = time.perf_counter() - t0
        groups = []
        for j in range(self.unit):
            rows = slice(j * g, (j + 1) * g)
            # Every completion has at least one token, so the masked minimum exists.
            oldest = int(token_versions[rows][completion_mask[rows]].min())
            groups.append(TrajectoryGroup(start + j, oldest, GroupPayload(
                example=examples[j],
                prompt_tokens=prompt_tokens[rows], prompt_valid=prompt_valid[rows],
                completion_tokens=completion_tokens[rows], completion_mask=completion_mask[rows],
                sample_logprobs=sample_logprobs[rows], token_versions=token_versions[rows],
                completions=completions[rows],
                rewards=rewards[rows], correct=correct[rows], advantages=advantages[rows],
                generate_s=elapsed,
            )))
        return groups

"""The decode slots' host state (no JAX): which row each slot holds, its cache length, the token it
sampled and has not fed yet, whether it is active or paused at a turn's end, how many tokens it
emitted, and a multi-turn slot's reply tokens not fed yet. A chunk's bucket is packed from it once
(`Slots.batch`: `programs.SlotBatch`) and the chunk's results are unpacked into it once
(`Slots.took_chunk`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from trainers.engine.outputs import Outputs
from trainers.engine.programs import SlotBatch
from trainers.engine.scheduler import ChunkPlan


@dataclasses.dataclass
class Slots:
    row: np.ndarray  # [S] int64: the row a slot holds, -1 when free
    lengths: np.ndarray  # [S] int32: tokens in its cache
    last_token: np.ndarray  # [S] int32: sampled, not yet fed
    active: np.ndarray  # [S] bool
    paused: np.ndarray  # [S] bool: at a turn's end, waiting for the host's reply
    generated: np.ndarray  # [S] int32: tokens emitted so far
    pending: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # slot -> reply tokens not yet fed

    @classmethod
    def empty(cls, count: int) -> Slots:
        zeros = lambda dtype: np.zeros(count, dtype)  # noqa: E731
        return cls(
            np.full(count, -1, np.int64), zeros(np.int32), zeros(np.int32), zeros(bool), zeros(bool), zeros(np.int32)
        )

    def free(self) -> np.ndarray:
        return np.flatnonzero(self.row < 0)

    def start(self, slots: np.ndarray, rows: np.ndarray, prompt_lengths: np.ndarray) -> None:
        """The slots hold their rows, each with its prompt in the cache and token 0 taken (active
        until token 0 says otherwise)."""
        self.row[slots], self.lengths[slots] = rows, prompt_lengths
        self.generated[slots], self.active[slots] = 1, True

    def release(self, slots: np.ndarray) -> None:
        self.row[slots], self.active[slots], self.paused[slots] = -1, False, False
        for slot in slots if self.pending else ():
            self.pending.pop(int(slot), None)

    def batch(
        self,
        plan: ChunkPlan,
        tables: np.ndarray,
        uniforms: np.ndarray,
        out: Outputs,
        window: int,
        pad_id: int,
        multi_turn: bool,
    ) -> SlotBatch:
        """The chunk's bucket as the program takes it: the running slots first, then empty ones.
        tables [S, max_pages]: the pool's block tables; uniforms [max_new, rows]: the call's draws;
        with turns (`multi_turn`) the pending replies as forced tokens and each slot's last `window`
        tokens (from `out`) for the stop sequences."""
        running, bucket, chunk = plan.running, plan.bucket, plan.chunk_tokens
        n, max_new = len(running), uniforms.shape[0]
        rows, starts = self.row[running], self.generated[running]
        steps = starts[:, None] + np.arange(chunk)[None, :]  # [n, K]: the token index each step samples
        draws = np.zeros((bucket, chunk), np.float32)
        draws[:n] = np.where(steps < max_new, uniforms[np.minimum(steps, max_new - 1), rows[:, None]], 0.0)
        forced_width = chunk if multi_turn else 0
        forced_tokens, forced = np.zeros((bucket, forced_width), np.int32), np.zeros((bucket, forced_width), bool)
        recent_tokens = np.full((bucket, window), pad_id, np.int32)
        recent_sampled = np.zeros((bucket, window), bool)
        for i in range(n) if multi_turn else ():
            reply = self.pending.get(int(running[i]))
            if reply is not None:
                forced_tokens[i, : len(reply[:chunk])], forced[i, : len(reply[:chunk])] = reply[:chunk], True
            if window:
                row, start = rows[i], starts[i]
                first = max(start - window, 0)
                recent_tokens[i, window - (start - first) :] = out.tokens[row, first:start]
                recent_sampled[i, window - (start - first) :] = out.sampled[row, first:start]
        picked = np.zeros(bucket, np.int64)
        picked[:n] = running
        return SlotBatch(
            tables=tables[picked],
            lengths=self.lengths[picked],
            last_token=self.last_token[picked],
            active=np.arange(bucket) < n,
            generated=self.generated[picked],
            uniforms=draws,
            forced_tokens=forced_tokens,
            forced=forced,
            recent_tokens=recent_tokens,
            recent_sampled=recent_sampled,
            exit_active=np.int32(plan.exit_active),
            exit_steps_left=np.int32(plan.exit_steps_left),
        )

    def took_chunk(self, running: np.ndarray, counts: np.ndarray, host: dict[str, np.ndarray]) -> np.ndarray:
        """The chunk's results (`programs.decode_chunk`'s dict, on the host) for the `running` slots,
        each of which took counts[i] tokens; returns [n] which are still active (not yet applied)."""
        n = len(running)
        for i, slot in enumerate(running if self.pending else ()):
            reply = self.pending.get(int(slot))
            if reply is not None:
                if counts[i] >= len(reply):
                    del self.pending[int(slot)]
                else:
                    self.pending[int(slot)] = reply[counts[i] :]
        self.lengths[running] = host["lengths"][:n]
        self.last_token[running] = host["last_token"][:n]
        self.generated[running] = host["generated"][:n]
        self.paused[running] = host["paused"][:n]
        return host["active"][:n]

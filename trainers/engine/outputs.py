"""What a `generate_paged` call returns, filled in as its slots emit tokens: per row and token
index, the token, its log-probs, whether it was taken (`mask`) and sampled (not an environment's
forced reply), and the version of the weights that sampled it. Host NumPy arrays, no JAX."""

from __future__ import annotations

import dataclasses

import numpy as np

from trainers.models.generate import GenerationResult


@dataclasses.dataclass
class Outputs:
    """[rows, max_new_tokens] each; full_logprobs (under the distribution before top-k / top-p)
    only when the sampling truncates, else None (they are `logprobs`)."""

    tokens: np.ndarray
    logprobs: np.ndarray
    full_logprobs: np.ndarray | None
    mask: np.ndarray
    sampled: np.ndarray
    versions: np.ndarray

    @classmethod
    def empty(cls, rows: int, max_new_tokens: int, pad_id: int, truncates: bool) -> Outputs:
        shape = (rows, max_new_tokens)
        return cls(
            tokens=np.full(shape, pad_id, np.int32),
            logprobs=np.zeros(shape, np.float32),
            full_logprobs=np.zeros(shape, np.float32) if truncates else None,
            mask=np.zeros(shape, bool),
            sampled=np.zeros(shape, bool),
            versions=np.zeros(shape, np.int32),
        )

    def take(
        self,
        rows: np.ndarray,
        columns: np.ndarray | int,
        tokens: np.ndarray,
        logprobs: np.ndarray,
        full_logprobs: np.ndarray | None,
        sampled: np.ndarray | bool,
        version: int,
    ) -> None:
        """Tokens emitted at (rows, columns), sampled by weights `version`."""
        self.tokens[rows, columns], self.logprobs[rows, columns], self.mask[rows, columns] = tokens, logprobs, True
        self.sampled[rows, columns], self.versions[rows, columns] = sampled, version
        if self.full_logprobs is not None:
            self.full_logprobs[rows, columns] = full_logprobs

    def result(self, multi_turn: bool) -> GenerationResult:
        lengths = self.mask.sum(axis=1).astype(np.int32)
        return GenerationResult(
            tokens=self.tokens,
            logprobs=self.logprobs,
            mask=self.mask,
            lengths=lengths,
            decode_steps=int(lengths.max()) if len(lengths) else 0,
            token_versions=self.versions,
            sampled=self.sampled if multi_turn else None,
            full_logprobs=self.logprobs if self.full_logprobs is None else self.full_logprobs,
        )

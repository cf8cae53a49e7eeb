"""Which sampled groups and completions reach the loss, and DAPO's length shaping. Pure NumPy on
host arrays (a rollout's rewards and completion masks), each tested against hand-computed values.

  informative_groups  DAPO dynamic sampling: a group whose G rewards are all equal has advantage 0
                      for every completion (any estimator), so it teaches nothing
  dynamic_sampling_values  what dynamic sampling tests for flat groups: the rewards, or correctness
  truncated           completions cut off by the token budget (no end of sequence in it)
  overlong_penalty    DAPO's soft overlong punishment, a reward term by length

DAPO: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2503.14476),
sections 3.2 (dynamic sampling) and 3.4 (overlong filtering and soft overlong punishment).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np


def informative_groups(rewards: np.ndarray) -> np.ndarray:
    """rewards [P, G] -> [P] bool: True where the group's rewards are not all equal (exactly, as
    floats: a group of rewards 1.0, 1.0, 1.0 is flat; 1.0, 1.0, 0.5 is not)."""
    rewards = np.asarray(rewards)
    return np.any(rewards != rewards[:, :1], axis=1)


def dynamic_sampling_values(rewards: np.ndarray, correct: np.ndarray, metric: str) -> np.ndarray:
    """The per-completion values whose groups `informative_groups` tests (same shape as rewards):
    metric "reward", the rewards; "correct", 1.0 for a correct answer and 0.0 otherwise, so a group
    whose answers are all right or all wrong is flat even when other reward terms (an overlong
    penalty, a format reward) set its rewards apart. DAPO (2503.14476, eq. 11) keeps a group only
    when 0 < |correct answers| < G, and verl's DAPO recipe filters on accuracy by default."""
    if metric == "reward":
        return np.asarray(rewards)
    if metric == "correct":
        return np.asarray(correct, bool).astype(np.float32)
    raise ValueError(f"unknown dynamic sampling metric {metric!r}; known: reward, correct")


def truncated(completion_tokens: np.ndarray, completion_mask: np.ndarray, eos_ids: Collection[int]) -> np.ndarray:
    """[N] bool: the completion filled its whole budget (every column of the mask valid) and its last
    token is not an end of sequence, i.e. generation was cut off rather than finished."""
    mask = np.asarray(completion_mask, bool)
    full = mask.all(axis=1)
    last = np.asarray(completion_tokens)[:, -1]
    return full & ~np.isin(last, np.fromiter(eos_ids, np.int64))


def overlong_penalty(length_tokens: np.ndarray, max_tokens: int, buffer_tokens: int, penalty: float) -> np.ndarray:
    """DAPO's soft overlong punishment per completion, a reward term <= 0 (float32 [N]):

        0                                          if L <= L_max - L_buffer
        -penalty * (L - (L_max - L_buffer)) / L_buffer   if L_max - L_buffer < L <= L_max

    L = length_tokens (generated tokens, end of sequence included), L_max = max_tokens (the budget),
    L_buffer = buffer_tokens > 0. The term reaches -penalty at L = L_max. buffer_tokens = 0: all 0."""
    length = np.asarray(length_tokens, np.float64)
    if buffer_tokens <= 0:
        return np.zeros(length.shape, np.float32)
    over = np.clip(length - (max_tokens - buffer_tokens), 0.0, buffer_tokens)
    return (-penalty * over / buffer_tokens).astype(np.float32)

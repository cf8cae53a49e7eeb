"""Group-relative advantages. Pure NumPy: rewards live on the host after scoring.

All functions take rewards shaped [prompts, G] (one row per prompt group) and return advantages of
the same shape, float32. Every token of a completion gets its sequence's advantage.
"""

from __future__ import annotations

import numpy as np


def grpo_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """(r - group mean) / (group std + eps), std with Bessel's correction (ddof=1, as verl and TRL).

    A group whose rewards are all equal gets advantage 0 for every completion (no signal).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    centred = rewards - rewards.mean(axis=1, keepdims=True)
    std = rewards.std(axis=1, ddof=1, keepdims=True)
    return (centred / (std + eps)).astype(np.float32)


def rloo_advantages(rewards: np.ndarray) -> np.ndarray:
    """Leave-one-out baseline: r_i - mean_{j != i} r_j  =  G/(G-1) * (r_i - group mean)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    g = rewards.shape[1]
    others_mean = (rewards.sum(axis=1, keepdims=True) - rewards) / (g - 1)
    return (rewards - others_mean).astype(np.float32)


def drgrpo_advantages(rewards: np.ndarray) -> np.ndarray:
    """Dr. GRPO: r - group mean, no division by the std (removes the difficulty bias)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    return (rewards - rewards.mean(axis=1, keepdims=True)).astype(np.float32)


def compute_advantages(rewards: np.ndarray, method: str, eps: float = 1e-6) -> np.ndarray:
    """Dispatch by `grpo.advantage` name; rewards [prompts, G] -> advantages [prompts, G]."""
    if method == "grpo":
        return grpo_advantages(rewards, eps)
    if method == "rloo":
        return rloo_advantages(rewards)
    if method == "drgrpo":
        return drgrpo_advantages(rewards)
    raise ValueError(f"unknown advantage method {method!r}")

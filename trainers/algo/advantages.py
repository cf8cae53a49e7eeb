"""Group-relative advantages, one registered function per estimator. Pure NumPy: rewards live on the
host after scoring.

Every estimator has the signature fn(rewards [prompts, G], eps) -> advantages [prompts, G] float32
(one row per prompt group; estimators without a std ignore eps). Every token of a completion gets its
sequence's advantage. `compute_advantages` dispatches by the `grpo.advantage` name.
"""

from __future__ import annotations

import numpy as np

from trainers.algo.names import ADVANTAGES


@ADVANTAGES.register("grpo")
def grpo_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO (DeepSeekMath, arXiv 2402.03300, outcome supervision):
    A_i = (r_i - mean_j r_j) / (std_j r_j + eps), std with Bessel's correction (ddof=1, as verl and TRL).

    A group whose rewards are all equal gets advantage 0 for every completion (no signal).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    centred = rewards - rewards.mean(axis=1, keepdims=True)
    std = rewards.std(axis=1, ddof=1, keepdims=True)
    return (centred / (std + eps)).astype(np.float32)


@ADVANTAGES.register("drgrpo")
def drgrpo_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Dr. GRPO (Liu et al., "Understanding R1-Zero-Like Training", arXiv 2503.20783):
    A_i = r_i - mean_j r_j, no division by the std (which up-weights too-easy and too-hard groups).
    eps is unused. Pair it with the "seq-mean-token-sum-norm" aggregation for the paper's loss.
    """
    del eps
    rewards = np.asarray(rewards, dtype=np.float64)
    return (rewards - rewards.mean(axis=1, keepdims=True)).astype(np.float32)


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RLOO (Ahmadian et al., "Back to Basics", arXiv 2402.14740): leave-one-out baseline
    A_i = r_i - 1/(G-1) sum_{j != i} r_j  =  G/(G-1) * (r_i - mean_j r_j).  eps is unused.
    """
    del eps
    rewards = np.asarray(rewards, dtype=np.float64)
    g = rewards.shape[1]
    others_mean = (rewards.sum(axis=1, keepdims=True) - rewards) / (g - 1)
    return (rewards - others_mean).astype(np.float32)


def compute_advantages(rewards: np.ndarray, method: str, eps: float = 1e-6) -> np.ndarray:
    """Dispatch by `grpo.advantage` name; rewards [prompts, G] -> advantages [prompts, G] float32.
    An unknown name raises ValueError listing the known ones."""
    return ADVANTAGES[method](rewards, eps)

"""The registries of the algorithm's pieces, declared with their names, and the clip ranges each
policy loss starts from.

Pure Python on purpose (no JAX, no NumPy): the config schema, the web form and the API list the
choices from these registries' names without importing the modules that register the functions
(`trainers.registry`: a declared registry imports its home module on the first `get`, and a name
registered there but not declared here, or declared here but not registered there, is an error).
Adding an algorithm is one decorated function in its module plus its name here.
"""

from __future__ import annotations

from trainers.registry import Registry

ADVANTAGES = Registry("advantage estimator", names=("grpo", "drgrpo", "rloo"), home="trainers.algo.advantages")
POLICY_LOSSES = Registry("policy loss", names=("grpo", "gspo", "gspo-token", "cispo"), home="trainers.algo.loss")
AGGREGATIONS = Registry(
    "loss aggregation",
    names=("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
    home="trainers.algo.loss",
)
KL_ESTIMATORS = Registry("KL estimator", names=("k1", "k2", "k3"), home="trainers.algo.loss")
MISMATCH_CORRECTIONS = Registry(
    "mismatch correction", names=("none", "tis", "mis", "icepop", "geo-mask"), home="trainers.algo.mismatch"
)
OPTIMIZERS = Registry("optimizer", names=("adamw", "adam", "sgd"), home="trainers.algo.optim")
SCHEDULES = Registry("learning-rate schedule", names=("constant", "cosine", "linear"), home="trainers.algo.optim")

DYNAMIC_SAMPLING_METRICS: tuple[str, ...] = ("reward", "correct")
"""What dynamic sampling tests for a flat group (`sampling_filters.dynamic_sampling_values`): the
rewards, or only whether each answer is correct (DAPO's own filter, on accuracy)."""

CLIP_DEFAULTS: dict[str, tuple[float, float]] = {
    "grpo": (0.2, 0.2),
    "gspo": (3e-4, 4e-4),
    "gspo-token": (3e-4, 4e-4),
    "cispo": (1.0, 4.0),
}
"""Default (epsilon_low, epsilon_high) per policy loss; the ratio is clipped to [1 - low, 1 + high].

grpo:             (0.2, 0.2), PPO's and DeepSeekMath's (arXiv 2402.03300) symmetric range.
gspo, gspo-token: (3e-4, 4e-4), GSPO paper v2 section 5.1 (arXiv 2507.18071); the sequence ratio is a
                  geometric mean over tokens, so its range is orders of magnitude narrower.
cispo:            (1.0, 4.0): the importance weight is clipped to [0, 5], i.e. only from above.
                  MiniMax-M1 (arXiv 2506.13585, section 3.1) writes clip(r, 1 - eps_IS_low, 1 + eps_IS_high)
                  but sets eps_IS_low large so there is no lower bound and tunes eps_IS_high only (no
                  value given); 1 - 1.0 = 0 is never active since a ratio is positive. The upper bound 5
                  is TRL's recommended `epsilon_high=5.0` for `loss_type="cispo"` (huggingface/trl
                  trl/trainer/grpo_config.py, the eps_max of ScaleRL, arXiv 2510.13786), which TRL uses
                  as the absolute cap `clamp(ratio, max=epsilon_high)`; here the same cap is 1 + 4.0.
"""

SEQUENCE_LEVEL_LOSSES: tuple[str, ...] = ("gspo", "gspo-token")
"""Losses whose ratio is per sequence (length-normalised): a token-sum aggregation would weight each
sequence by its length again, which the GSPO objective does not do, so validation refuses it."""

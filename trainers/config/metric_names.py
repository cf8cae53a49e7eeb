"""Metric names reported per step. The dashboard, CLI and benchmarks rely on these exact strings."""

TRAIN_METRICS = (
    "reward/mean",
    "reward/std",
    "accuracy",
    "loss/policy",
    "loss/kl",
    "kl",
    "clip_fraction",
    "entropy",
    "response_length/mean",
    "grad_norm",
    "learning_rate",
    "timing/step_s",
    "timing/rollout_s",
    "timing/train_s",
    "throughput/tokens_per_s",
    "train/trained_sequence_fraction",
)
ASYNC_METRICS = (
    "async/trajectory_age_mean",
    "async/token_age_mean",
    "async/buffer_size",
    "async/wait_s",
    "async/dropped_stale",
    "is/weight_mean",
    "is/weight_max",
    "is/truncated_fraction",
)
EVAL_METRICS = ("eval/reward_mean", "eval/accuracy", "eval/pass@k")

METRIC_NAMES = TRAIN_METRICS + ASYNC_METRICS + EVAL_METRICS

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
    "param_norm",
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
ALGORITHM_METRICS = (
    "loss/entropy_bonus",
    "dynamic/dropped_group_fraction",
    "dynamic/refill_rounds",
    "dynamic/prompts_consumed",
    "dynamic/prompts_sampled",
    "dynamic/groups_carried",
    "rollout/truncated_fraction",
    "rollout/overlong_penalty_mean",
)
"""Reported only when their feature is on: grpo.entropy_coef, rollout.dynamic_sampling (with it a
synchronous run also reports is/*: the groups carried from the step before are weighed),
rollout.overlong_buffer_tokens / overlong_filter (the truncated fraction is always reported)."""
GENERATION_METRICS = (
    "generation/slot_utilisation",
    "generation/kv_pages_peak_fraction",
    "generation/tokens_per_s",
    "timing/generation_prefill_s",
    "timing/generation_decode_s",
)
"""The generation engine's (trainers.rollout.batch.generation_metrics): useful decode tokens / decode
slot-steps, the most KV pages in use / the pool, decode tokens per second of prefill and decode, and
the seconds spent in prefills and in decode chunks (on the timing chart)."""
EVAL_METRICS = ("eval/reward_mean", "eval/accuracy", "eval/pass@1")
PASS_AT_K_PATTERN = r"eval/pass@[1-9][0-9]*"
"""eval/pass@k carries its k in the name (eval.pass_k): every such name is a metric."""

REWARD_FUNCTION_PATTERN = r"reward/[a-z][a-z0-9_]*"
"""reward/<name>: the mean raw score of each reward function of the run's spec (data.rewards), one per
name of trainers.data.rewards.REWARD_NAMES that the spec lists (reward/mean and reward/std are the total's)."""

SYSTEM_METRICS = (
    "system/cpu_percent",
    "system/host_memory_used_bytes",
    "system/process_rss_bytes",
    "system/device_memory_bytes",
    "system/device_memory_peak_bytes",
    "system/gpu_utilization",
)
"""Host and accelerator use (trainers.loop.system_metrics), every train.system_metrics_every_s seconds;
the device memory ones only where JAX reports memory stats (not on CPU), gpu_utilization only with a GPU."""

ENV_METRICS = (
    "env/turns_mean",
    "env/tool_calls_mean",
    "env/tool_errors_mean",
    "env/tool_use_fraction",
    "env/max_turns_fraction",
    "env/max_total_tokens_fraction",
    "env/error_fraction",
)
"""Multi-turn episodes (env.name other than single_turn; trainers.rollout.episodes.episode_metrics): per
step, and per evaluation as eval/env/<...>. An environment's reward parts are reward/env/<part>."""
ENV_REWARD_PART_PATTERN = r"reward/env/[A-Za-z0-9_]+"

METRIC_NAMES = (TRAIN_METRICS + ASYNC_METRICS + ALGORITHM_METRICS + GENERATION_METRICS + EVAL_METRICS + SYSTEM_METRICS + ENV_METRICS
                + tuple(f"eval/{name}" for name in ENV_METRICS))


def is_metric_name(name: str) -> bool:
    """A name the trainer reports: one of METRIC_NAMES, eval/pass@<k>, reward/<a reward function> or
    reward/env/<an environment's reward part>."""
    import re

    from trainers.data.rewards import REWARD_NAMES

    if name in METRIC_NAMES or re.fullmatch(PASS_AT_K_PATTERN, name) is not None:
        return True
    if re.fullmatch(ENV_REWARD_PART_PATTERN, name) is not None:
        return True
    return re.fullmatch(REWARD_FUNCTION_PATTERN, name) is not None and name.split("/", 1)[1] in REWARD_NAMES

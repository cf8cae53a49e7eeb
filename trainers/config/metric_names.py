"""Metric names reported per step. The dashboard, CLI and benchmarks rely on these exact strings.

Each group is one mapping, name -> the line the docs' metric reference gives it; the group's names
(`TRAIN_METRICS`, ...) are its keys, in the order the dashboard shows them."""

import re

from trainers.data.rewards import REWARDS

TRAIN_METRIC_DESCRIPTIONS = {
    "reward/mean": "mean total reward of the step's completions (with dynamic sampling: over "
    "every completion sampled, not only the groups kept)",
    "reward/std": "standard deviation of those rewards",
    "accuracy": "share of completions whose answer is right (the task's check)",
    "loss/policy": "the policy loss, mean over the step's updates",
    "loss/kl": "the KL term of the loss (grpo.beta x kl)",
    "kl": "KL estimate between the policy and the reference model",
    "clip_fraction": "share of tokens whose ratio was clipped",
    "entropy": "mean token entropy of the policy on the completions",
    "response_length/mean": "mean completion length, tokens",
    "grad_norm": "global gradient norm before clipping",
    "param_norm": "norm of the trained parameters after the step's updates",
    "learning_rate": "the optimizer's rate at the step",
    "timing/step_s": "the whole step, seconds (async: includes async/wait_s)",
    "timing/rollout_s": "encoding, generating, decoding and scoring the step's sequences, seconds"
    " (async: the collector's time, overlapping training)",
    "timing/train_s": "from the rollout in hand to the new weights published: log-prob passes and updates, seconds",
    "timing/reward_s": "scoring the step's completions with the reward functions, seconds (part "
    "of timing/rollout_s: a judge model's passes, the sandbox's programs)",
    "throughput/tokens_per_s": "tokens (prompt and completion) of the step per second of the step",
    "train/trained_sequence_fraction": "share of the step's sequences the updates trained "
    "(without a KL term the sequences of all-equal groups are "
    "skipped)",
    "train/padding_fraction": "share of the token positions the step's updates computed that held"
    " no token (padding of rows; batch.packing packs sequences end to "
    "end where that removes much of it)",
    "mismatch/logprob_diff_mean": "mean |log pi_trainer - log pi_sampler| of the sampled tokens "
    "(the generation copy against the trained weights, both of the "
    "full distribution, before top-k / top-p; async: over the rows "
    "the current weights sampled, absent when there are none)",
    "mismatch/logprob_diff_max": "largest such difference over the step's updates",
    "mismatch/kl": "KL(sampler || trainer) of the sampled tokens, k3 estimate",
}
TRAIN_METRICS = tuple(TRAIN_METRIC_DESCRIPTIONS)
ASYNC_METRIC_DESCRIPTIONS = {
    "async/trajectory_age_mean": "mean age of the step's groups, in steps",
    "async/token_age_mean": "mean age of the step's tokens, in steps (lower than the groups' with in-flight updates)",
    "async/buffer_size": "groups waiting in the buffer",
    "async/wait_s": "seconds the step waited for its groups",
    "async/dropped_stale": "groups dropped as older than async.max_staleness",
    "is/weight_mean": "mean importance weight pi_old / pi_generator",
    "is/weight_max": "largest importance weight over the step's updates",
    "is/truncated_fraction": "share of weights truncated or masked",
}
ASYNC_METRICS = tuple(ASYNC_METRIC_DESCRIPTIONS)
ALGORITHM_METRIC_DESCRIPTIONS = {
    "loss/entropy_bonus": "the entropy bonus term (grpo.entropy_coef)",
    "dynamic/dropped_group_fraction": "flat groups among the prompts consumed (dynamic sampling)",
    "dynamic/refill_rounds": "prompts generated beyond those the step needed, in steps' worth",
    "dynamic/prompts_consumed": "how far the data position moved",
    "dynamic/prompts_sampled": "prompts the step generated",
    "dynamic/groups_carried": "informative groups the step before generated, trained by this one",
    "selection/prompts_skipped": "prompts prompt selection skipped (their last groups were flat):"
    " consumed, not generated",
    "selection/completions_saved": "completions not sampled thanks to the skips: prompts skipped x G",
    "selection/flat_group_fraction": "flat groups (all right or all wrong) among the groups the step generated",
    "rollout/truncated_fraction": "completions cut off by the budget (no end of sequence)",
    "rollout/overlong_penalty_mean": "mean DAPO overlong penalty (rollout.overlong_buffer_tokens)",
    "mismatch/corrected_fraction": "share of those tokens whose weight grpo.mismatch.correction capped or dropped",
}
ALGORITHM_METRICS = tuple(ALGORITHM_METRIC_DESCRIPTIONS)
"""Reported only when their feature is on: grpo.entropy_coef, grpo.mismatch.correction,
rollout.dynamic_sampling (with it a synchronous run also reports is/*: the groups carried from the
step before are weighed), rollout.prompt_selection,
rollout.overlong_buffer_tokens / overlong_filter (the truncated fraction is always reported)."""
GENERATION_METRIC_DESCRIPTIONS = {
    "generation/slot_utilisation": "useful decode tokens / decode slot-steps run",
    "generation/kv_pages_peak_fraction": "the most KV pages in use at once / the pool",
    "generation/tokens_per_s": "decode tokens per second of prefill and decode",
    "timing/generation_prefill_s": "seconds spent in prefills",
    "timing/generation_decode_s": "seconds spent in decode chunks",
}
GENERATION_METRICS = tuple(GENERATION_METRIC_DESCRIPTIONS)
"""The generation engine's (trainers.rollout.batch.generation_metrics): useful decode tokens / decode
slot-steps, the most KV pages in use / the pool, decode tokens per second of prefill and decode, and
the seconds spent in prefills and in decode chunks (on the timing chart)."""
EVAL_METRIC_DESCRIPTIONS = {
    "eval/reward_mean": "mean reward on the held-out prompts",
    "eval/accuracy": "held-out accuracy at eval.temperature (greedy by default)",
    "eval/pass@1": "with eval.samples_per_prompt n > 1: pass@1 from n samples (unbiased estimator)",
}
EVAL_METRICS = tuple(EVAL_METRIC_DESCRIPTIONS)
PASS_AT_K_PATTERN = r"eval/pass@[1-9][0-9]*"
"""eval/pass@k carries its k in the name (eval.pass_k): every such name is a metric."""

REWARD_FUNCTION_PATTERN = r"reward/[a-z][a-z0-9_]*"
"""reward/<name>: the mean raw score of each reward function of the run's spec (data.rewards), one per
name of trainers.data.rewards.REWARDS that the spec lists (reward/mean and reward/std are the total's)."""

SYSTEM_METRIC_DESCRIPTIONS = {
    "system/cpu_percent": "the host's CPU use since the previous sample",
    "system/host_memory_used_bytes": "the host's memory in use",
    "system/process_rss_bytes": "the trainer process's resident memory",
    "system/device_memory_bytes": "device memory in use, summed over the process's devices (not on CPU)",
    "system/device_memory_peak_bytes": "peak device memory, summed likewise (not on CPU)",
    "system/gpu_utilization": "mean GPU utilisation, percent (with a GPU and nvidia-ml-py)",
}
SYSTEM_METRICS = tuple(SYSTEM_METRIC_DESCRIPTIONS)
"""Host and accelerator use (trainers.loop.system_metrics), every train.system_metrics_every_s seconds;
the device memory ones only where JAX reports memory stats (not on CPU), gpu_utilization only with a GPU."""

ENV_METRIC_DESCRIPTIONS = {
    "env/turns_mean": "assistant turns per episode",
    "env/tool_calls_mean": "tool calls per episode",
    "env/tool_errors_mean": "tool errors per episode",
    "env/tool_use_fraction": "episodes with a tool call",
    "env/max_turns_fraction": "episodes ended by env.max_turns",
    "env/max_total_tokens_fraction": "episodes ended by env.max_total_tokens",
    "env/error_fraction": "episodes ended by an environment error",
}
ENV_METRICS = tuple(ENV_METRIC_DESCRIPTIONS)
"""Multi-turn episodes (env.name other than single_turn; trainers.rollout.episodes.episode_metrics): per
step, and per evaluation as eval/env/<...>. An environment's reward parts are reward/env/<part>."""
ENV_REWARD_PART_PATTERN = r"reward/env/[A-Za-z0-9_]+"

METRIC_NAMES = (
    TRAIN_METRICS
    + ASYNC_METRICS
    + ALGORITHM_METRICS
    + GENERATION_METRICS
    + EVAL_METRICS
    + SYSTEM_METRICS
    + ENV_METRICS
    + tuple(f"eval/{name}" for name in ENV_METRICS)
)


def is_metric_name(name: str) -> bool:
    """A name the trainer reports: one of METRIC_NAMES, eval/pass@<k>, reward/<a reward function> or
    reward/env/<an environment's reward part>."""

    if name in METRIC_NAMES or re.fullmatch(PASS_AT_K_PATTERN, name) is not None:
        return True
    if re.fullmatch(ENV_REWARD_PART_PATTERN, name) is not None:
        return True
    return re.fullmatch(REWARD_FUNCTION_PATTERN, name) is not None and name.split("/", 1)[1] in REWARDS


METRIC_GROUPS = (
    ("Every step", TRAIN_METRICS),
    ("Async runs (and synchronous dynamic sampling's is/*)", ASYNC_METRICS),
    ("With an algorithm feature on", ALGORITHM_METRICS),
    ("The generation engine", GENERATION_METRICS),
    ("Evaluation", EVAL_METRICS),
    ("System", SYSTEM_METRICS),
    ("Multi-turn episodes (also as eval/env/...)", ENV_METRICS),
)
"""The metric names in the groups the docs' metric reference lists them by."""

METRIC_DESCRIPTIONS = {
    **TRAIN_METRIC_DESCRIPTIONS,
    **ASYNC_METRIC_DESCRIPTIONS,
    **ALGORITHM_METRIC_DESCRIPTIONS,
    **GENERATION_METRIC_DESCRIPTIONS,
    **EVAL_METRIC_DESCRIPTIONS,
    **SYSTEM_METRIC_DESCRIPTIONS,
    **ENV_METRIC_DESCRIPTIONS,
}
"""Every group's lines together (eval/env/<x> means what env/<x> means, for the evaluation's
episodes): the docs' metric reference is generated from these."""

METRIC_PATTERNS = (
    ("eval/pass@<k>", PASS_AT_K_PATTERN, "pass@k from eval.samples_per_prompt samples, k = eval.pass_k"),
    ("reward/<name>", REWARD_FUNCTION_PATTERN, "mean raw score of each reward function the run lists (rewards)"),
    ("reward/env/<part>", ENV_REWARD_PART_PATTERN, "mean of each reward part of a multi-turn environment"),
)
"""Families of names, each with its pattern and a line for the docs."""

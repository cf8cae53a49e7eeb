"""reward/<name>: each reward function's mean raw score per step, checked by hand on tiny rollouts:
the rollout's own metrics, its groups cut and put back, dynamic sampling's metrics over every
completion sampled, and the metric names the platform accepts (checkpoint.keep_best_metric)."""

import numpy as np
import pytest

from trainers.config.metric_names import is_metric_name
from trainers.data.rewards import score
from trainers.rollout.batch import Rollout, reward_metrics
from trainers.rollout.dynamic_sampling import fill_informative


def scored_rollout(completions: list[str], answers: list[str], first_prompt: int = 0) -> Rollout:
    """len(answers) prompts x G = len(completions) / len(answers), scored by exact_match (weight 1)
    and char_overlap (weight 0.5) the way collect_rollout scores them."""
    g = len(completions) // len(answers)
    examples = [{"prompt": f"p{first_prompt + i}", "answer": a} for i, a in enumerate(answers)]
    per_sequence = [examples[i // g] for i in range(len(completions))]
    rewards, components = score(completions, per_sequence, [("exact_match", 1.0), ("char_overlap", 0.5)])
    n = len(completions)
    return Rollout(
        examples=examples,
        num_generations=g,
        prompt_tokens=np.zeros((n, 2), np.int32),
        prompt_valid=np.ones((n, 2), bool),
        completion_tokens=np.zeros((n, 3), np.int32),
        completion_mask=np.ones((n, 3), bool),
        sample_logprobs=np.zeros((n, 3), np.float32),
        token_versions=np.zeros((n, 3), np.int32),
        completions=completions,
        rewards=rewards,
        correct=components["exact_match"] == 1.0,
        advantages=np.zeros(n, np.float32),
        generate_s=1.0,
        reward_names=tuple(components),
        reward_values=np.stack([components[k] for k in components], axis=1),
    )


def test_reward_metrics_by_hand():
    values = np.array([[1, 0.5], [0, 0.25], [0, 0.0], [1, 1.0]], np.float32)
    assert reward_metrics(("exact_match", "char_overlap"), values) == {
        "reward/exact_match": 0.5,
        "reward/char_overlap": pytest.approx(1.75 / 4),
    }
    assert reward_metrics(("exact_match",), np.zeros((0, 1), np.float32)) == {}


def test_a_rollout_reports_each_reward_function_mean():
    # answers "12" and "7"; exact_match: 1, 0 | 0, 1 -> mean 0.5; char_overlap is 1 for an exact
    # answer, so the total is 1.5 for both exact ones.
    r = scored_rollout(["12", "21", "9", "7"], ["12", "7"])
    m = r.metrics()
    assert m["reward/exact_match"] == 0.5
    overlap = r.reward_values[:, 1]
    assert overlap[0] == 1.0 and overlap[3] == 1.0
    assert m["reward/char_overlap"] == pytest.approx(float(overlap.mean()))
    # the total is the weighted sum: reward/mean = exact + 0.5 * overlap, averaged
    assert m["reward/mean"] == pytest.approx(0.5 + 0.5 * float(overlap.mean()))
    # groups keep their rows, and put back together report the same numbers
    first = r.group(0)
    assert first.reward_names == ("exact_match", "char_overlap")
    assert first.metrics()["reward/exact_match"] == 0.5
    np.testing.assert_array_equal(Rollout.concat([r.group(0), r.group(1)]).reward_values, r.reward_values)


def test_a_rollout_without_recorded_rewards_reports_none():
    r = scored_rollout(["12", "7"], ["12", "7"])
    bare = Rollout(
        examples=r.examples,
        num_generations=1,
        prompt_tokens=r.prompt_tokens,
        prompt_valid=r.prompt_valid,
        completion_tokens=r.completion_tokens,
        completion_mask=r.completion_mask,
        sample_logprobs=r.sample_logprobs,
        token_versions=r.token_versions,
        completions=r.completions,
        rewards=r.rewards,
        correct=r.correct,
        advantages=r.advantages,
        generate_s=1.0,
    )
    assert not [k for k in bare.metrics() if k not in ("reward/mean", "reward/std") and k.startswith("reward/")]
    with pytest.raises(ValueError, match="different reward functions"):
        Rollout.concat([r, bare])


def test_dynamic_sampling_reports_reward_functions_over_every_completion_sampled():
    # 2 prompts a step, G = 2, the engine admitted 4: prompt "1" flat (both exact), prompt "2"
    # informative (one exact), prompt "3" informative, "4" flat (both exact).
    # Generated: 8 completions, 6 exact -> 0.75, though the step keeps only prompts "2" and "3".
    def generate(gate):
        return scored_rollout(["1", "1", "2", "x", "3", "y", "4", "4"], ["1", "2", "3", "4"])

    step, _, metrics = fill_informative(generate, [], prompts=2, max_prompts=6, pad_id=0, prompt_width=lambda r: r)
    assert step.prompts == 2
    assert [e["prompt"] for e in step.examples] == ["p1", "p2"]
    assert metrics["reward/exact_match"] == 0.75
    assert metrics["accuracy"] == 0.75
    assert step.metrics()["reward/exact_match"] == 0.5  # the kept groups' own: 2 of 4


def test_reward_function_metric_names():
    assert is_metric_name("reward/exact_match") and is_metric_name("reward/gsm8k_answer")
    assert not is_metric_name("reward/no_such_reward")
    assert is_metric_name("reward/mean")

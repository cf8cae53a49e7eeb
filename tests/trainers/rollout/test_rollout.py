"""The one rollout type and function: groups cut and put back, weight versions, and a step generated
in parts equal to the step generated at once (what lets the async collector match the sync loop)."""

import dataclasses

import jax
import numpy as np
import pytest

from trainers.data.tasks import TASKS
from trainers.data.tokenizer import get_tokenizer
from trainers.models.generate import SamplingParams
from trainers.models.presets import PRESETS
from trainers.models.transformer import init_params
from trainers.rollout.batch import Rollout
from trainers.rollout.collect import collect_rollout
from trainers.rollout.spec import RolloutSpec


def hand_rollout():
    """2 prompts x G=2, completions of 3 tokens; sequence 1 has a token sampled by version 4."""
    return Rollout(
        examples=[{"prompt": "a"}, {"prompt": "b"}],
        num_generations=2,
        prompt_tokens=np.arange(8, dtype=np.int32).reshape(4, 2),
        prompt_valid=np.ones((4, 2), bool),
        completion_tokens=np.arange(12, dtype=np.int32).reshape(4, 3),
        completion_mask=np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], bool),
        sample_logprobs=-np.arange(12, dtype=np.float32).reshape(4, 3),
        token_versions=np.array([[5, 5, 0], [5, 4, 5], [5, 3, 3], [5, 5, 5]], np.int32),
        completions=["w", "x", "y", "z"],
        rewards=np.array([1, 0, 0.5, 0.5], np.float32),
        correct=np.array([True, False, False, False]),
        advantages=np.array([1, -1, 0, 0], np.float32),
        generate_s=3.0,
    )


def test_groups_cut_and_concatenated_back_are_the_rollout():
    r = hand_rollout()
    first, second = r.group(0), r.group(1)
    assert first.examples == [{"prompt": "a"}] and first.completions == ["w", "x"]
    np.testing.assert_array_equal(second.completion_tokens, [[6, 7, 8], [9, 10, 11]])
    assert first.generate_s == second.generate_s == 1.5  # an equal share of the call's time
    again = Rollout.concat([first, second])
    for field in dataclasses.fields(Rollout):
        a, b = getattr(again, field.name), getattr(r, field.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == b.dtype, field.name
        else:
            assert a == b, field.name
    with pytest.raises(ValueError):
        Rollout.concat([])


def test_versions_on_policy_and_token_age():
    r = hand_rollout()
    # padding (mask False) carries no version: sequence 0's third slot (version 0) is ignored
    assert r.group(0).oldest_version() == 4 and r.group(1).oldest_version() == 5
    np.testing.assert_array_equal(r.on_policy(5), [True, False, True, True])
    # valid tokens' versions: 5 5 | 5 4 5 | 5 | 5 5 5 -> ages at step 6: 1 1 1 2 1 1 1 1 1 (9 tokens)
    assert r.token_age_mean(6) == pytest.approx(10 / 9)
    assert r.samples(1) == [
        {
            "prompt": "a",
            "completion": "w",
            "answer": None,
            "reward": 1.0,
            "advantage": 1.0,
            "correct": True,
            "group": 0,
            "generation": 0,
        }
    ]


def test_a_step_generated_in_parts_equals_the_step_generated_at_once():
    """The collector generates a step unit by unit (first_prompt / prompt_count), the sync loop all at
    once: the same tokens, log-probs, rewards and padding, since prompts are padded as the whole
    step and micro-batch k of the step uses key fold_in(key, k) wherever the call starts."""
    tokenizer = get_tokenizer("char")
    task = TASKS["copy"]
    examples = [{"prompt": p, "answer": p} for p in ("ab", "abcdef", "b", "abc")]
    spec = RolloutSpec(
        tokenizer=tokenizer,
        num_generations=2,
        rollout_micro_batch_sequences=2,
        sampling=SamplingParams(max_new_tokens=6, temperature=1.0, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id),
        max_prompt_tokens=16,
        reward_specs=tuple(task.default_rewards),
        advantage="grpo",
    )
    graphdef, params = init_params(PRESETS["tiny"], 0)
    key = jax.random.key(3)
    whole = collect_rollout(graphdef, lambda: (params, 7), examples, spec, key)
    parts = [
        collect_rollout(graphdef, lambda: (params, 7), examples, spec, key, first_prompt=p, prompt_count=1)
        for p in range(4)
    ]
    joined = Rollout.concat(parts)
    assert whole.prompt_tokens.shape[1] == max(len(e["prompt"]) for e in examples) + 1  # BOS + longest
    for name in (
        "prompt_tokens",
        "prompt_valid",
        "completion_tokens",
        "completion_mask",
        "sample_logprobs",
        "token_versions",
        "rewards",
        "advantages",
    ):
        np.testing.assert_array_equal(getattr(joined, name), getattr(whole, name), err_msg=name)
    assert joined.completions == whole.completions and (whole.token_versions == 7).all()
    with pytest.raises(ValueError, match="multiple of the rollout micro-batch"):
        collect_rollout(
            graphdef,
            lambda: (params, 7),
            examples,
            dataclasses.replace(spec, rollout_micro_batch_sequences=4),
            key,
            first_prompt=1,
            prompt_count=1,
        )


def test_generation_figures_reach_the_step_metrics():
    """8 sequences (4 prompts x G 2) of exactly 6 tokens on 4 decode slots: token 0 of each comes from
    its prompt's prefill, so 8 x 5 = 40 decode tokens, in two rounds of two groups that fill all 4
    slots for 5 steps: 40 slot-steps, utilisation 1. A group keeps a 1/P share of the counts and
    the groups joined back give the step's figures."""
    tokenizer = get_tokenizer("char")
    examples = [{"prompt": p, "answer": p} for p in ("ab", "abcdef", "b", "abc")]
    spec = RolloutSpec(
        tokenizer=tokenizer,
        num_generations=2,
        rollout_micro_batch_sequences=4,
        sampling=SamplingParams(
            max_new_tokens=6, temperature=1.0, stop_at_eos=False, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id
        ),
        max_prompt_tokens=16,
        reward_specs=tuple(TASKS["copy"].default_rewards),
        advantage="grpo",
    )
    graphdef, params = init_params(PRESETS["tiny"], 0)
    rollout = collect_rollout(graphdef, lambda: (params, 0), examples, spec, jax.random.key(0))
    assert rollout.generation["decode_tokens"] == 40 and rollout.generation["slot_steps"] == 40
    metrics = rollout.metrics()
    assert metrics["generation/slot_utilisation"] == 1.0
    assert 0 < metrics["generation/kv_pages_peak_fraction"] <= 1
    assert metrics["generation/tokens_per_s"] > 0 and metrics["timing/generation_decode_s"] > 0
    joined = Rollout.concat([rollout.group(j) for j in range(4)])
    assert (
        joined.generation["decode_tokens"] == 40 and joined.generation["pool_pages"] == rollout.generation["pool_pages"]
    )
    from trainers.config.metric_names import is_metric_name

    assert all(is_metric_name(name) for name in metrics)


def test_reward_details_follow_their_sequences_through_groups_concat_and_samples():
    """A reward's details (code_tests: each test's result) stay with their sequence when the rollout
    is cut into groups and put back, and a rollout without them joins as empty details."""
    details = [{"code_tests": [{"test": f"assert f() == {i}", "passed": i % 2 == 0, "reason": ""}]} for i in range(4)]
    r = dataclasses.replace(hand_rollout(), reward_details=details)
    assert r.group(1).reward_details == details[2:]
    assert Rollout.concat([r.group(0), r.group(1)]).reward_details == details
    assert Rollout.concat([r.group(0), hand_rollout().group(1)]).reward_details == details[:2] + [{}, {}]
    assert Rollout.concat([hand_rollout().group(0), hand_rollout().group(1)]).reward_details is None
    assert r.samples(2)[1]["reward_details"] == details[1]
    assert "reward_details" not in hand_rollout().samples(1)[0]

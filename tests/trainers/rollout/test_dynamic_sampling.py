"""DAPO's sampling filters and length shaping: which groups and tokens reach the loss.

Pure pieces against hand-computed values (`sampling_filters`, `dynamic_sampling.fill_informative`),
then the trainer: a dynamic-sampling step holds only informative groups, moves the data position by
every prompt it consumed, and resumes exactly; truncated completions leave the loss under
rollout.overlong_filter; the overlong penalty is part of the reward."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from tests.step_metrics import StepMetrics
from trainers.algo.sampling_filters import dynamic_sampling_values, informative_groups, overlong_penalty, truncated
from trainers.config import ConfigError, parse_config
from trainers.loop.trainer import GRPOTrainer, train
from trainers.rollout.batch import Rollout
from trainers.rollout.dynamic_sampling import (
    InformativeGate,
    carry_state,
    fill_informative,
    groups_from_carry_state,
    select_admitted,
)


def test_informative_groups_by_hand():
    rewards = np.array([[1, 1, 1], [1, 1, 0.5], [0, 0, 0], [0, 1, 0]], np.float32)
    assert informative_groups(rewards).tolist() == [False, True, False, True]


def test_truncated_by_hand():
    eos = 2
    tokens = np.array([[5, 6, 7], [5, 2, 0], [5, 6, 2], [5, 9, 3]])
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]], bool)
    # row 0: full, ends in 7 -> cut off; row 1: stopped early; row 2: ends in EOS at the last slot;
    # row 3: ends in 3, an extra end-of-turn id -> finished
    assert truncated(tokens, mask, (eos, 3)).tolist() == [True, False, False, False]
    assert truncated(tokens, mask, (eos,)).tolist() == [True, False, False, True]


def test_overlong_penalty_by_hand():
    # L_max 20, buffer 5: no penalty up to 15, then -1 x (L - 15) / 5
    lengths = np.array([1, 15, 16, 18, 20])
    np.testing.assert_allclose(overlong_penalty(lengths, 20, 5, 1.0), [0, 0, -0.2, -0.6, -1.0], atol=1e-7)
    np.testing.assert_allclose(overlong_penalty(lengths, 20, 5, 0.5), [0, 0, -0.1, -0.3, -0.5], atol=1e-7)
    assert not overlong_penalty(lengths, 20, 0, 1.0).any()  # 0 = off


def _fake_round(rewards: list[list[float]], first_prompt: int) -> Rollout:
    """A rollout of len(rewards) prompts x G; prompt i is named p<first_prompt + i>."""
    prompts, g = len(rewards), len(rewards[0])
    n = prompts * g
    return Rollout(
        examples=[{"prompt": f"p{first_prompt + i}"} for i in range(prompts)],
        num_generations=g,
        prompt_tokens=np.zeros((n, 2 + first_prompt % 2), np.int32),  # rounds padded differently
        prompt_valid=np.ones((n, 2 + first_prompt % 2), bool),
        completion_tokens=np.zeros((n, 3), np.int32),
        completion_mask=np.ones((n, 3), bool),
        sample_logprobs=np.zeros((n, 3), np.float32),
        token_versions=np.zeros((n, 3), np.int32),
        completions=["c"] * n,
        rewards=np.asarray(rewards, np.float32).reshape(-1),
        correct=np.asarray(rewards, np.float32).reshape(-1) > 0.5,
        advantages=np.zeros(n, np.float32),
        generate_s=1.0,
    )


def test_the_gate_admits_until_enough_groups_are_informative_and_bounds_the_surplus():
    gate = InformativeGate(need=2, surplus=3)
    assert gate.admit_limit(0) == 5 and gate.admit_limit(3) == 2 and gate.admit_limit(6) == 0
    gate.scored(_fake_round([[1, 0]], 0))  # informative
    assert gate.admit_limit(3) == 1
    gate.scored(_fake_round([[1, 1]], 1))  # flat: changes nothing
    assert gate.admit_limit(3) == 1
    gate.scored(_fake_round([[0, 1]], 2))  # the second informative group: no more admissions
    assert gate.admit_limit(0) == 0
    with pytest.raises(ValueError, match="need >= 1"):
        InformativeGate(need=0, surplus=1)


def test_select_admitted_carries_the_informative_groups_past_the_step():
    flags = [False, True, False, True, True, False, True]
    selection = select_admitted(flags, prompts=2, max_prompts=20)
    assert selection.kept == (1, 3) and selection.dropped == (0, 2, 5) and selection.carried == (4, 6)
    assert selection.left_out == () and selection.consumed == 7
    with pytest.raises(ValueError, match="2 groups admitted hold 1 informative"):
        select_admitted([True, False], prompts=2, max_prompts=20)


def _fill(data, carried_in=(), prompts=3, max_prompts=20, metric="reward"):
    """fill_informative over a fake engine that admitted the groups `data` (prompts p0, p1, ...)."""
    gates = []

    def generate(gate):
        gates.append(gate)
        return _fake_round(data, 0)

    step, carried, metrics = fill_informative(
        generate, list(carried_in), prompts, max_prompts, 0, lambda r: r.with_prompt_width(1), metric
    )
    return step, carried, metrics, gates


def test_fill_informative_trains_carried_groups_first_and_carries_the_surplus():
    # 3 prompts a step, 1 carried in: 2 needed. p0 flat, p1 informative, p2 flat, p3 informative
    # (the step is full), then p4 informative (carried out) and p5 flat (dropped): all 6 consumed.
    data = [[1, 1], [1, 0], [0, 0], [0, 1], [1, 0], [1, 1]]
    carried_in = _fake_round([[0, 1]], 100)
    carried_in.examples = [{"prompt": "px"}]
    step, carried, metrics, gates = _fill(data, [carried_in])
    assert gates[0].need == 2 and gates[0].surplus == 3
    assert [e["prompt"] for e in step.examples] == ["px", "p1", "p3"]
    assert [e["prompt"] for g in carried for e in g.examples] == ["p4"]
    assert step.in_loss.all() and step.prompts_consumed == 6
    assert step.prompt_tokens.shape == (6, 2)  # cut to the width its own prompts need
    assert metrics["dynamic/groups_carried"] == 1 and metrics["dynamic/prompts_sampled"] == 6
    assert metrics["dynamic/dropped_group_fraction"] == pytest.approx(3 / 6)
    assert metrics["dynamic/refill_rounds"] == pytest.approx((6 - 2) / 3)
    assert metrics["reward/mean"] == pytest.approx(7 / 12)  # every completion generated: 2+1+0+1+1+2 of 12


def test_fill_informative_completes_a_capped_step_with_groups_out_of_the_loss():
    data = [[1, 1], [0, 0], [1, 0], [1, 1]]
    step, carried, metrics, _ = _fill(data, max_prompts=4)
    # 1 informative group (p2) in the 4 the cap allows; the step is completed by the first two dropped
    assert [e["prompt"] for e in step.examples] == ["p2", "p0", "p1"] and carried == []
    assert step.in_loss.tolist() == [True, True, False, False, False, False]
    assert step.prompts_consumed == 4


def test_a_step_that_its_carried_groups_fill_generates_nothing():
    carried_in = [_fake_round([[1, 0]], j) for j in range(3)]
    step, carried, metrics, gates = _fill([[1, 0]], carried_in)
    assert gates == [] and carried == [] and step.prompts_consumed == 0 and step.prompts == 3
    assert metrics["dynamic/groups_carried"] == 3 and metrics["dynamic/prompts_sampled"] == 0


def test_carried_groups_survive_a_checkpoint_as_json():
    group = _fake_round([[0.25, 1.0]], 3)
    group.reward_names, group.reward_values = ("math",), np.array([[0.1], [0.7]], np.float32)
    group.sample_logprobs = np.array([[-0.1234567, -2.5, -13.0]] * 2, np.float32)
    (back,) = groups_from_carry_state(json.loads(json.dumps(carry_state([group]))))
    for name in (
        "prompt_tokens",
        "prompt_valid",
        "completion_tokens",
        "sample_logprobs",
        "rewards",
        "correct",
        "reward_values",
        "in_loss",
    ):
        np.testing.assert_array_equal(getattr(back, name), getattr(group, name))
        assert getattr(back, name).dtype == getattr(group, name).dtype
    assert back.examples == group.examples and back.reward_names == ("math",) and back.completions == ["c", "c"]


def test_with_prompt_width_cuts_the_padding_a_longer_prompt_needed():
    group = _fake_round([[1, 0]], 0)
    valid = np.zeros((2, 12), bool)
    valid[0, -3:], valid[1, -5:] = True, True
    group = dataclasses.replace(group, prompt_tokens=np.arange(24).reshape(2, 12), prompt_valid=valid)
    assert group.with_prompt_width(4).prompt_tokens.tolist() == [list(range(4, 12)), list(range(16, 24))]
    assert group.with_prompt_width(1).prompt_valid.shape == (2, 5)
    assert group.with_prompt_width(16) is group  # 16 > 12: nothing to cut


def test_dynamic_sampling_values_by_hand():
    rewards, correct = np.array([0.8, -0.2, 1.0, -0.5]), np.array([True, False, True, False])
    np.testing.assert_array_equal(dynamic_sampling_values(rewards, correct, "reward"), rewards)
    np.testing.assert_array_equal(dynamic_sampling_values(rewards, correct, "correct"), [1.0, 0.0, 1.0, 0.0])
    # two groups of 2: (0.8 right, -0.2 wrong) is informative either way; (1.0 right, -0.5 wrong) too;
    # all wrong with different penalties is informative by reward, flat by correctness
    wrong = np.array([-0.1, -0.4]), np.array([False, False])
    assert informative_groups(dynamic_sampling_values(*wrong, "reward").reshape(1, 2)).tolist() == [True]
    assert informative_groups(dynamic_sampling_values(*wrong, "correct").reshape(1, 2)).tolist() == [False]
    with pytest.raises(ValueError, match="known: reward, correct"):
        dynamic_sampling_values(rewards, correct, "accuracy")


def test_fill_informative_on_correctness_drops_groups_set_apart_only_by_other_terms():
    # _fake_round: correct = reward > 0.5. p0 all wrong (0, -0.5: a penalty apart), p1 mixed, p2 all
    # right (1, 0.9) | p3 mixed, p4 all right, p5 mixed.
    data = [[0, -0.5], [1, 0], [1, 0.9], [0, 1], [1, 1], [1, 0]]
    by_reward, carried, _, _ = _fill(data)
    assert [e["prompt"] for e in by_reward.examples] == ["p0", "p1", "p2"]
    assert [e["prompt"] for g in carried for e in g.examples] == ["p3", "p5"]
    by_correct, carried, metrics, _ = _fill(data, metric="correct")
    assert [e["prompt"] for e in by_correct.examples] == ["p1", "p3", "p5"] and carried == []
    assert by_correct.in_loss.all() and metrics["dynamic/dropped_group_fraction"] == pytest.approx(3 / 6)


TINY = {
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 256},
    "batch": {"prompts_per_step": 4},
    "grpo": {"num_generations": 4, "beta": 0.0},
    "rollout": {"dynamic_sampling": True, "dynamic_sampling_max_rounds": 3},
    "optimizer": {"learning_rate": 0.01},
    "checkpoint": {"every_steps": 1},
}


def test_a_dynamic_sampling_step_trains_only_informative_groups(tmp_path):
    trainer = GRPOTrainer(parse_config(TINY), str(tmp_path / "run"))
    trainer.source.start(trainer.state.params, 0, 0)
    rollout = trainer.source.next(0)
    metrics = trainer.source.metrics()
    trainer.source.stop()
    flags = informative_groups(rollout.rewards.reshape(4, 4))
    # every group in the loss is informative; groups out of the loss come last
    in_loss = rollout.in_loss.reshape(4, 4).all(axis=1)
    assert (flags | ~in_loss).all()
    assert rollout.prompts_consumed == metrics["dynamic/prompts_consumed"] >= 4
    assert trainer.source.position == rollout.prompts_consumed


def test_dynamic_sampling_resumes_exactly(tmp_path):
    config = parse_config({**TINY, "train": {"max_steps": 3}})
    straight = StepMetrics()
    whole = train(config, str(tmp_path / "a"), straight)
    interrupted = parse_config({**TINY, "train": {"max_steps": 2}})
    train(interrupted, str(tmp_path / "b"), StepMetrics())
    resumed = StepMetrics()
    again = train(config, str(tmp_path / "b"), resumed)
    assert again.params_digest == whole.params_digest
    consumed = sum(straight.steps[s]["dynamic/prompts_consumed"] for s in (1, 2, 3))
    assert consumed >= 12
    # step 3 trains groups step 2 generated: the checkpoint at step 2 carried them over the restart,
    # and the trainer weighed them by pi_old / pi_gen
    assert straight.steps[3]["dynamic/groups_carried"] > 0
    for name in ("dynamic/prompts_consumed", "dynamic/groups_carried", "is/weight_mean"):
        assert resumed.steps[3][name] == straight.steps[3][name]
    assert straight.steps[3]["is/weight_mean"] != 1.0


def test_overlong_filter_takes_truncated_completions_out_of_the_loss(tmp_path):
    config = parse_config(
        {
            **TINY,
            "rollout": {
                "overlong_filter": True,
                "max_new_tokens": 4,
                "overlong_buffer_tokens": 2,
                "overlong_penalty": 0.5,
            },
        }
    )
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    trainer.source.start(trainer.state.params, 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    lengths = rollout.completion_mask.sum(axis=1)
    assert rollout.truncated.any()  # an untrained model rarely stops within 4 tokens
    np.testing.assert_array_equal(rollout.in_loss, ~rollout.truncated)
    np.testing.assert_allclose(rollout.overlong_penalties, -0.5 * np.clip(lengths - 2, 0, 2) / 2, atol=1e-7)
    seen = []
    jitted = trainer.update_fn

    def spy(params, opt_state, batch, prompt_group=1):
        seen.append(jax.tree.map(np.asarray, batch))
        return jitted(params, opt_state, batch, prompt_group=prompt_group)

    trainer.update_fn = spy
    samples = rollout.samples(16)
    assert [s.get("truncated", False) for s in samples] == rollout.truncated.tolist()
    assert all(s.get("in_loss", True) == (not s.get("truncated", False)) for s in samples)
    # An untrained model rarely ends within 4 tokens: take every other row out of the loss by hand.
    rollout.in_loss = np.arange(16) % 2 == 0
    rollout.rewards[:] = np.arange(16) % 3  # every group informative, so no row is skipped
    trainer.train_on(rollout)
    (batch,) = seen
    weights = batch["weights"].reshape(16, -1)
    assert not weights[~rollout.in_loss].any()
    assert (weights[rollout.in_loss].sum(axis=1) > 0).all()
    assert weights.sum() == pytest.approx(1.0, abs=1e-5)  # token-mean over the tokens in the loss


@pytest.mark.parametrize(
    "changes, field",
    [
        (
            {"rollout": {"dynamic_sampling": True, "dynamic_sampling_max_rounds": 0}},
            "rollout.dynamic_sampling_max_rounds",
        ),
        ({"rollout": {"dynamic_sampling": True}, "grpo": {"num_generations": 1}}, "rollout.dynamic_sampling"),
        ({"grpo": {"policy_loss": "gspo", "loss_aggregation": "seq-mean-token-sum"}}, "grpo.loss_aggregation"),
        ({"grpo": {"policy_loss": "cispo", "dual_clip": 3.0}}, "grpo.dual_clip"),
        ({"rollout": {"max_new_tokens": 16, "overlong_buffer_tokens": 16}}, "rollout.overlong_buffer_tokens"),
        ({"rollout": {"overlong_filter": True, "stop_at_eos": False}}, "rollout.overlong_filter"),
        ({"eval": {"samples_per_prompt": 2, "pass_k": 4}}, "eval.pass_k"),
        ({"grpo": {"policy_loss": "ppo"}}, "grpo.policy_loss"),
        ({"grpo": {"advantage": "gae"}}, "grpo.advantage"),
        ({"rollout": {"prompt_selection": True}, "async": {"enabled": True}}, "rollout.prompt_selection"),
        ({"rollout": {"prompt_selection": True}, "grpo": {"num_generations": 1}}, "rollout.prompt_selection"),
        ({"rollout": {"prompt_selection_max_skip_probability": 1.0}}, "prompt_selection_max_skip_probability"),
        ({"rollout": {"prompt_selection_base_skip_probability": 0.0}}, "prompt_selection_base_skip_probability"),
    ],
)
def test_bad_algorithm_settings_are_refused_with_the_field_named(changes, field):
    config = {"model": {"preset": "tiny"}}
    for section, values in changes.items():
        config[section] = {**config.get(section, {}), **values}
    with pytest.raises(ConfigError) as error:
        parse_config(config)
    assert field in str(error.value)


def test_an_unknown_policy_loss_lists_the_known_ones():
    with pytest.raises(ConfigError) as error:
        parse_config({"grpo": {"policy_loss": "ppo"}})
    for name in ("grpo", "gspo", "gspo-token", "cispo"):
        assert name in str(error.value)

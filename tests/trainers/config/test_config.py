"""Config schema: validation messages name the field and the fix; YAML round trip; --set."""

import pytest

from trainers.config import ConfigError, ExperimentConfig, parse_config, parse_yaml
from trainers.step.plan import make_plan


def problems(raw, overrides=()):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, overrides)
    return info.value.as_dict()


def test_defaults_are_valid():
    config = parse_config({})
    assert config.batch.prompts_per_step == 16 and config.grpo.num_generations == 8


def test_mini_batch_must_divide_prompts_per_step_and_lists_the_choices():
    errors = problems({"batch": {"prompts_per_step": 12, "mini_batch_prompts": 5}})
    assert errors == {
        "batch.mini_batch_prompts": (
            "batch.mini_batch_prompts=5 does not divide batch.prompts_per_step=12; use 1, 2, 3, 4, 6 or 12"
        )
    }


def test_train_micro_batch_must_divide_mini_batch_sequences():
    errors = problems(
        {
            "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2, "train_micro_batch_sequences": 3},
            "grpo": {"num_generations": 4},
        }
    )
    assert errors["batch.train_micro_batch_sequences"] == (
        "batch.train_micro_batch_sequences=3 does not divide the mini-batch of 8 sequences "
        "(batch.mini_batch_prompts=2 x grpo.num_generations=4); use 1, 2, 4 or 8"
    )


def test_rollout_and_logprob_micro_batches_checked_against_the_step():
    errors = problems(
        {
            "batch": {"prompts_per_step": 2, "rollout_micro_batch_sequences": 5, "logprob_micro_batch_sequences": 3},
            "grpo": {"num_generations": 4},
        }
    )
    assert "use 1, 2, 4 or 8" in errors["batch.rollout_micro_batch_sequences"]
    assert "batch.logprob_micro_batch_sequences=3" in errors["batch.logprob_micro_batch_sequences"]


def test_unknown_keys_get_did_you_mean():
    errors = problems({"batch": {"prompt_per_step": 8}})
    assert errors == {"batch.prompt_per_step": "unknown key; did you mean 'prompts_per_step'?"}
    errors = problems({"grpo": {"bta": 0.1}, "modle": {}})
    assert "did you mean 'beta'" in errors["grpo.bta"]
    assert "did you mean 'model'" in errors["modle"]


def test_every_problem_is_reported_at_once():
    errors = problems({"grpo": {"num_generations": 1, "kl_estimator": "k9"}, "optimizer": {"learning_rate": -1}})
    assert set(errors) == {"grpo.kl_estimator", "optimizer.learning_rate"}  # type errors first
    errors = problems({"grpo": {"num_generations": 1}, "batch": {"prompts_per_step": 3, "mini_batch_prompts": 2}})
    assert set(errors) == {"grpo.num_generations", "batch.mini_batch_prompts"}


def test_bad_type_and_enum_messages_name_the_value():
    errors = problems({"grpo": {"kl_estimator": "k9", "num_iterations": "two"}})
    assert errors["grpo.kl_estimator"].startswith('"k9" is not allowed')
    assert "'k1', 'k2' or 'k3'" in errors["grpo.kl_estimator"]
    assert errors["grpo.num_iterations"].startswith('"two"')


def test_data_and_reward_names_checked():
    errors = problems({"data": {"task": "arithmetc"}})
    assert "did you mean 'arithmetic'" in errors["data.task"]
    errors = problems({"rewards": [{"name": "exact_mach"}]})
    assert "did you mean 'exact_match'" in errors["rewards[0].name"]
    errors = problems({"data": {"task": None, "train_path": "/nonexistent.jsonl"}})
    assert errors["data.train_path"] == "file not found: /nonexistent.jsonl"
    assert "name at least one reward" in errors["rewards"]


def test_unknown_model_preset_and_best_metric():
    errors = problems({"model": {"preset": "tinny"}, "checkpoint": {"keep_best_metric": "reward/mena"}})
    assert "did you mean 'tiny'" in errors["model.preset"]
    assert "did you mean 'reward/mean'" in errors["checkpoint.keep_best_metric"]


def test_async_needs_its_importance_sampling_correction():
    parse_config({"async": {"enabled": True}})
    errors = problems({"async": {"enabled": True, "importance_sampling": {"enabled": False}}})
    assert "set async.importance_sampling.enabled=true" in errors["async.importance_sampling.enabled"]


def test_set_overrides_parse_values_and_check_paths():
    config = parse_config(
        {},
        [
            "batch.prompts_per_step=8",
            "grpo.beta=0",
            "rollout.stop_at_eos=false",
            "checkpoint.keep_best_metric=reward/mean",
        ],
    )
    assert config.batch.prompts_per_step == 8 and config.grpo.beta == 0.0
    assert config.rollout.stop_at_eos is False and config.checkpoint.keep_best_metric == "reward/mean"
    assert problems({}, ["batch.prompts_per_stp=8"]) == {
        "batch.prompts_per_stp": "unknown key; did you mean 'prompts_per_step'?"
    }
    assert "not of the form" in problems({}, ["seed"])["(--set)"]
    assert "is a value, not a section" in problems({}, ["seed.x=1"])["seed"]


def test_yaml_round_trip_keeps_every_value():
    config = parse_config(
        {
            "seed": 7,
            "async": {"max_trajectory_age_steps": 2},
            "grpo": {"dual_clip": 3.0},
            "rewards": [{"name": "prefix_match", "weight": 0.5}],
        }
    )
    text = config.to_yaml()
    assert "async:" in text and "async_" not in text
    again = parse_yaml(text)
    assert again == config
    assert again.to_dict() == config.to_dict()


def test_yaml_syntax_error_is_a_config_error_with_a_line():
    with pytest.raises(ConfigError) as info:
        parse_yaml("batch:\n  prompts_per_step: [1,\n")
    assert "line" in str(info.value)


def test_yaml_is_parsed_safely():
    with pytest.raises(ConfigError):
        parse_yaml("seed: !!python/object/apply:os.system ['true']")


def test_schema_has_descriptions_for_forms():
    schema = ExperimentConfig.model_json_schema(by_alias=True)
    assert "async" in schema["properties"]
    batch = schema["$defs"]["BatchSection"]["properties"]["prompts_per_step"]
    assert batch["description"] and batch["default"] == 16


def test_plan_derives_updates_and_accumulation():
    config = parse_config(
        {
            "batch": {
                "prompts_per_step": 12,
                "mini_batch_prompts": 4,
                "train_micro_batch_sequences": 8,
                "rollout_micro_batch_sequences": 24,
                "logprob_micro_batch_sequences": 16,
            },
            "grpo": {"num_generations": 4, "num_iterations": 2, "beta": 0.0},
        }
    )
    plan = make_plan(config, dataset_prompts=100)
    assert plan.sequences_per_step == 48
    assert plan.optimizer_updates_per_step == 6  # mu=2 x 12/4
    assert plan.accumulation_steps == 2  # 4 x 4 / 8
    assert plan.rollout_passes_per_step == 2
    assert plan.needs_old_logprobs and plan.old_logprob_passes_per_step == 3
    assert not plan.needs_reference and plan.reference_logprob_passes_per_step == 0
    updates = plan.updates()
    assert len(updates) == 6
    assert [(u.iteration, u.mini_batch) for u in updates[:4]] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert [(m.start, m.stop) for m in updates[1].micro_batches] == [(16, 24), (24, 32)]
    text = plan.describe()
    assert "optimizer updates per step    6" in text and "accumulation steps            2" in text
    assert "no partial batch is dropped" in text


def test_plan_without_old_logprob_pass_when_on_policy():
    plan = make_plan(parse_config({"grpo": {"num_iterations": 1}}))
    assert not plan.needs_old_logprobs and plan.old_logprob_passes_per_step == 0
    assert plan.accumulation_steps == 1 and plan.optimizer_updates_per_step == 1

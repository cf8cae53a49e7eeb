"""The `async` section: fields, defaults, and the cross-field rules (each names its field and the fix)."""

import pytest

from trainers.asynchronous.replay_buffer import default_capacity
from trainers.config import ConfigError, parse_config, parse_yaml


def problems(raw, overrides=()):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, overrides)
    return info.value.as_dict()


def test_async_defaults():
    a = parse_config({}).async_
    assert (a.enabled, a.max_trajectory_age_steps, a.buffer_capacity_groups, a.in_flight_weight_updates,
            a.in_flight_chunk_tokens) == (False, 1, None, False, 8)
    assert a.rollout_devices == [] and a.train_devices == []
    i = a.importance_sampling
    assert (i.enabled, i.level, i.mode, i.max, i.min) == (True, "token", "clamp", 2.0, 0.0)


def test_async_enabled_is_valid():
    config = parse_config({"async": {"enabled": True, "max_trajectory_age_steps": 2}})
    assert config.async_.enabled and config.async_.max_trajectory_age_steps == 2


def test_async_without_importance_sampling_names_the_field_and_the_fix():
    errors = problems({"async": {"enabled": True, "importance_sampling": {"enabled": False}}})
    assert set(errors) == {"async.importance_sampling.enabled"}
    assert "set async.importance_sampling.enabled=true" in errors["async.importance_sampling.enabled"]
    # Turning the correction off without async is fine (it is only used by async).
    parse_config({"async": {"importance_sampling": {"enabled": False}}})


def test_nested_fields_by_yaml_and_set():
    config = parse_yaml("async:\n  importance_sampling:\n    level: sequence\n    mode: mask\n    min: 0.5\n",
                        ["async.importance_sampling.max=3", "async.buffer_capacity_groups=64"])
    i = config.async_.importance_sampling
    assert (i.level, i.mode, i.min, i.max) == ("sequence", "mask", 0.5, 3.0)
    assert config.async_.buffer_capacity_groups == 64
    assert config.to_dict()["async"]["importance_sampling"]["level"] == "sequence"
    errors = problems({}, ["async.importance_sampling.levl=token"])
    assert errors == {"async.importance_sampling.levl": "unknown key; did you mean 'level'?"}
    errors = problems({"async": {"importance_sampling": {"level": "tokens"}}})
    assert errors["async.importance_sampling.level"].startswith('"tokens" is not allowed')


def test_truncation_range():
    errors = problems({"async": {"importance_sampling": {"max": 0.5}}})
    assert "greater than or equal to 1" in errors["async.importance_sampling.max"]
    errors = problems({"async": {"importance_sampling": {"mode": "mask", "min": 1.0, "max": 1.0}}})
    assert errors["async.importance_sampling.min"] == (
        "async.importance_sampling.min=1.0 must be below async.importance_sampling.max=1.0")
    errors = problems({"async": {"importance_sampling": {"mode": "clamp", "min": 0.5}}})
    assert "only used with mode mask" in errors["async.importance_sampling.min"]


def test_devices_must_be_disjoint_and_listed_once():
    errors = problems({"async": {"rollout_devices": [0, 1], "train_devices": [1]}})
    assert errors == {"async.train_devices": (
        "device 1 is in both async.rollout_devices and async.train_devices; give generation and training "
        "disjoint devices, or leave both empty to share the default device")}
    errors = problems({"async": {"rollout_devices": [1, 1], "train_devices": [0]}})
    assert errors == {"async.rollout_devices": "lists device 1 more than once; list each device once"}
    errors = problems({"async": {"rollout_devices": [1]}})
    assert "list the train devices too" in errors["async.train_devices"]
    errors = problems({"async": {"train_devices": [-1], "rollout_devices": [1]}})
    assert "greater than or equal to 0" in errors["async.train_devices[0]"]
    config = parse_config({"async": {"rollout_devices": [1], "train_devices": [0]}})
    assert (config.async_.rollout_devices, config.async_.train_devices) == ([1], [0])


def test_device_lists_accept_text():
    config = parse_config({}, ["async.rollout_devices=1,2", "async.train_devices=0"])
    assert (config.async_.rollout_devices, config.async_.train_devices) == ([1, 2], [0])
    assert parse_config({"async": {"rollout_devices": "", "train_devices": "[]"}}).async_.rollout_devices == []
    errors = problems({"async": {"rollout_devices": "one", "train_devices": [0]}})
    assert "valid integer" in errors["async.rollout_devices[0]"]


def test_buffer_capacity_must_hold_one_step():
    errors = problems({"batch": {"prompts_per_step": 8}, "async": {"buffer_capacity_groups": 4}})
    assert errors == {"async.buffer_capacity_groups": (
        "async.buffer_capacity_groups=4 cannot hold one step's batch.prompts_per_step=8 groups, so no step could "
        "start; use 8 or more, or null for the default")}
    parse_config({"batch": {"prompts_per_step": 8}, "async": {"buffer_capacity_groups": 8}})


def test_in_flight_chunk_must_be_positive():
    errors = problems({"async": {"enabled": True, "in_flight_weight_updates": True, "in_flight_chunk_tokens": 0}})
    assert list(errors) == ["async.in_flight_chunk_tokens"] and "1" in errors["async.in_flight_chunk_tokens"]
    config = parse_config({}, ["async.in_flight_weight_updates=true", "async.in_flight_chunk_tokens=4"])
    assert config.async_.in_flight_weight_updates and config.async_.in_flight_chunk_tokens == 4


def test_micro_batches_must_split_evenly_over_the_devices():
    raw = {"batch": {"prompts_per_step": 3}, "grpo": {"num_generations": 2},
           "async": {"enabled": True, "rollout_devices": [2, 3, 4, 5], "train_devices": [0, 1]}}
    errors = problems(raw)
    # 6 sequences per generation call over 4 rollout devices; 6 per update over 2 train devices is fine
    assert list(errors) == ["batch.rollout_micro_batch_sequences"]
    assert "multiple of 4" in errors["batch.rollout_micro_batch_sequences"]
    assert "list 1, 2 or 3 device(s)" in errors["batch.rollout_micro_batch_sequences"]
    raw["batch"]["rollout_micro_batch_sequences"] = 2
    errors = problems(raw)
    assert list(errors) == ["batch.rollout_micro_batch_sequences"]  # 2 over 4 devices: still uneven
    parse_config(raw, ["async.rollout_devices=[2,3]"])


def test_async_checks_are_reported_together():
    errors = problems({"async": {"enabled": True, "rollout_devices": [0], "train_devices": [0],
                                 "importance_sampling": {"enabled": False}}})
    assert set(errors) == {"async.importance_sampling.enabled", "async.train_devices"}


@pytest.mark.parametrize("prompts, age, expected", [(16, 1, 32), (16, 2, 64), (4, 0, 8), (3, 5, 30)])
def test_default_capacity_formula(prompts, age, expected):
    # prompts_per_step x max(1, max age) x 2: max age 0 still holds two steps' prompts.
    assert default_capacity(prompts, age) == expected

"""The `async` section: fields, defaults, and the cross-field rules (each names its field and the fix)."""

import pytest

from trainers.config import ConfigError, parse_config, parse_yaml
from trainers.rollout.replay_buffer import default_capacity


def problems(raw, overrides=()):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, overrides)
    return info.value.as_dict()


def test_async_defaults():
    a = parse_config({}).async_
    assert (
        a.enabled,
        a.max_trajectory_age_steps,
        a.buffer_capacity_groups,
        a.in_flight_weight_updates,
        a.in_flight_chunk_tokens,
    ) == (False, 1, None, False, 8)
    assert not hasattr(a, "rollout_devices") and not hasattr(a, "train_devices")  # moved to mesh.*
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
    config = parse_yaml(
        "async:\n  importance_sampling:\n    level: sequence\n    mode: mask\n    min: 0.5\n",
        ["async.importance_sampling.max=3", "async.buffer_capacity_groups=64"],
    )
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
        "async.importance_sampling.min=1.0 must be below async.importance_sampling.max=1.0"
    )
    errors = problems({"async": {"importance_sampling": {"mode": "clamp", "min": 0.5}}})
    assert "only used with mode mask" in errors["async.importance_sampling.min"]


def test_device_lists_moved_to_the_mesh_section():
    """async.train_devices / rollout_devices live in mesh.* now (tests/trainers/config/test_config_mesh.py has their
    rules): a listed device in the old place names the new one; an empty list is dropped."""
    errors = problems({"async": {"enabled": True, "rollout_devices": [1], "train_devices": [0]}})
    assert errors == {
        "async.rollout_devices": "async.rollout_devices moved to mesh.rollout_devices; write mesh: {rollout_devices: "
        "[1]} (--set mesh.rollout_devices=[1]) and remove async.rollout_devices",
        "async.train_devices": "async.train_devices moved to mesh.train_devices; write mesh: {train_devices: [0]} "
        "(--set mesh.train_devices=[0]) and remove async.train_devices",
    }
    assert parse_config({"async": {"rollout_devices": "", "train_devices": "[]"}}).mesh.rollout_devices == []
    config = parse_config({"async": {"enabled": True}}, ["mesh.rollout_devices=1,2", "mesh.train_devices=0"])
    assert (config.mesh.rollout_devices, config.mesh.train_devices) == ([1, 2], [0])


def test_buffer_capacity_must_hold_one_step():
    errors = problems({"batch": {"prompts_per_step": 8}, "async": {"buffer_capacity_groups": 4}})
    assert errors == {
        "async.buffer_capacity_groups": (
            "async.buffer_capacity_groups=4 cannot hold one step's batch.prompts_per_step=8 groups, so no step could "
            "start; use 8 or more, or null for the default"
        )
    }
    parse_config({"batch": {"prompts_per_step": 8}, "async": {"buffer_capacity_groups": 8}})


def test_in_flight_chunk_must_be_positive():
    errors = problems({"async": {"enabled": True, "in_flight_weight_updates": True, "in_flight_chunk_tokens": 0}})
    assert list(errors) == ["async.in_flight_chunk_tokens"] and "1" in errors["async.in_flight_chunk_tokens"]
    config = parse_config({}, ["async.in_flight_weight_updates=true", "async.in_flight_chunk_tokens=4"])
    assert config.async_.in_flight_weight_updates and config.async_.in_flight_chunk_tokens == 4


def test_async_checks_are_reported_together():
    errors = problems(
        {
            "async": {"enabled": True, "importance_sampling": {"enabled": False}},
            "mesh": {"rollout_devices": [0], "train_devices": [0]},
        }
    )
    assert set(errors) == {"async.importance_sampling.enabled", "mesh.rollout_devices"}


@pytest.mark.parametrize("prompts, age, expected", [(16, 1, 32), (16, 2, 64), (4, 0, 8), (3, 5, 30)])
def test_default_capacity_formula(prompts, age, expected):
    # prompts_per_step x max(1, max age) x 2: max age 0 still holds two steps' prompts.
    assert default_capacity(prompts, age) == expected

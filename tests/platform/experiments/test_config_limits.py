"""experiments.config_limits: this server's bounds (PLATFORM_CONFIG_LIMITS) on every config the
platform validates, with an error naming the field and the limit."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment, token_client
from platform_testlib import tiny_config

from experiments import configs
from experiments.config_limits import field_value, limit_problems

LIMITS = {"train.max_steps": 1000, "rollout.max_new_tokens": 64, "batch.prompts_per_step": 32}


def test_field_value_walks_dotted_paths():
    data = {"train": {"max_steps": 7}, "rollout": {"max_new_tokens": None}}
    assert field_value(data, "train.max_steps") == 7
    assert field_value(data, "rollout.max_new_tokens") is None
    assert field_value(data, "train.nope") is None and field_value(data, "nope.deeper") is None


def test_limit_problems_name_the_field_value_and_limit():
    data = {"train": {"max_steps": 5000}, "rollout": {"max_new_tokens": 64}, "batch": {"prompts_per_step": 33}}
    problems = limit_problems(data, LIMITS)
    assert [(p.field, p.message) for p in problems] == [
        ("train.max_steps", "5000 is above this server's limit of 1000; ask an admin to raise PLATFORM_CONFIG_LIMITS"),
        (
            "batch.prompts_per_step",
            "33 is above this server's limit of 32; ask an admin to raise PLATFORM_CONFIG_LIMITS",
        ),
    ]  # 64 == the limit: allowed


def test_null_missing_and_non_numbers_are_left_to_the_schema():
    data = {"train": {"max_steps": True}, "rollout": {"max_new_tokens": None}, "batch": {"prompts_per_step": "99"}}
    assert limit_problems(data, LIMITS) == []


def test_every_validation_entry_point_applies_the_limits(settings):
    settings.PLATFORM_CONFIG_LIMITS = {"train.max_steps": 5}
    with pytest.raises(configs.ConfigError) as refused:
        configs.parse(tiny_config(train__max_steps=6))
    assert refused.value.as_dict() == {
        "train.max_steps": "6 is above this server's limit of 5; ask an admin to raise PLATFORM_CONFIG_LIMITS"
    }
    with pytest.raises(configs.ConfigError, match="train.max_steps: 6 is above"):
        configs.parse_text("model: {preset: tiny}\ndata: {task: arithmetic}\ntrain: {max_steps: 6}\n")
    assert configs.parse(tiny_config(train__max_steps=5)).train.max_steps == 5


def test_api_create_answers_400_naming_the_field(alice, settings):
    settings.PLATFORM_CONFIG_LIMITS = {"rollout.max_new_tokens": 8}
    response = token_client(alice).post(
        "/api/experiments",
        {"name": "big", "config": tiny_config(rollout__max_new_tokens=9)},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "limit of 8" in response.json()["errors"]["rollout.max_new_tokens"]


def test_the_shipped_defaults_accept_the_demo_configs(settings):
    """The default limits refuse nothing the project ships (configs/*.yaml)."""
    from pathlib import Path

    assert settings.PLATFORM_CONFIG_LIMITS["train.max_steps"] == 1_000_000
    for path in sorted(Path(settings.REPO_ROOT, "configs").glob("*.yaml")):
        data = configs.load_yaml(path.read_text())
        assert limit_problems(data, settings.PLATFORM_CONFIG_LIMITS) == [], path


def test_env_overrides_single_entries(tmp_path, settings):
    """PLATFORM_CONFIG_LIMITS (JSON) in the environment overrides one entry and keeps the others."""
    import os
    import subprocess
    import sys

    env = dict(
        os.environ,
        PLATFORM_CONFIG_LIMITS='{"train.max_steps": 5000}',
        PLATFORM_DATA_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="grpo_platform.settings",
        PYTHONPATH="platform",
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from django.conf import settings; import json; print(json.dumps(settings.PLATFORM_CONFIG_LIMITS))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=settings.REPO_ROOT,
    ).stdout
    limits = json.loads(out)
    assert limits["train.max_steps"] == 5000 and limits["rollout.max_new_tokens"] == 8192


def test_a_stored_config_over_a_lowered_limit_is_refused_at_launch(alice, settings, sent_messages):
    experiment = make_experiment(alice)  # max_steps 6
    settings.PLATFORM_CONFIG_LIMITS = {"train.max_steps": 5}
    response = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs", {}, content_type="application/json")
    assert response.status_code == 400 and "limit of 5" in response.json()["errors"]["train.max_steps"]
    assert experiment.runs.count() == 0 and sent_messages == []

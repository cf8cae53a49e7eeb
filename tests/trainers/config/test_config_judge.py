"""The judge section's validation: each problem names its field and the fix (trainers.config.checks,
trainers.config.loading)."""

import pytest

from trainers.config import ConfigError, parse_config

JUDGED = {"data": {"task": "arithmetic"}, "rewards": [{"name": "judge", "weight": 1.0}]}


def problems(raw, **kwargs) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, **kwargs)
    return {p.field: p.message for p in caught.value.problems}


def test_the_judge_reward_needs_a_judge_folder():
    found = problems(JUDGED)
    assert list(found) == ["judge.model_path"]
    assert "set judge.model_path" in found["judge.model_path"]


def test_a_judge_folder_that_is_not_there_is_named(tmp_path):
    found = problems({**JUDGED, "judge": {"model_path": str(tmp_path / "nowhere")}})
    assert list(found) == ["judge.model_path"] and "is not a directory" in found["judge.model_path"]


def test_a_template_must_show_the_judge_the_completion(smollm2_dir):
    found = problems({**JUDGED, "judge": {"model_path": str(smollm2_dir), "template": "Is {reference} right?"}})
    assert list(found) == ["judge.template"] and "{completion}" in found["judge.template"]


def test_mode_is_one_of_the_modes(smollm2_dir):
    found = problems({**JUDGED, "judge": {"model_path": str(smollm2_dir), "mode": "stars"}})
    assert list(found) == ["judge.mode"] and "yes_no" in found["judge.mode"] and "number" in found["judge.mode"]


def test_a_valid_judge_and_an_unused_section(smollm2_dir):
    config = parse_config({**JUDGED, "judge": {"model_path": str(smollm2_dir), "mode": "number", "scale": 5}})
    assert config.judge.mode == "number" and config.judge.scale == 5.0 and config.judge.template is None
    # without the judge reward the section is not read: no folder needed
    assert parse_config({"data": {"task": "arithmetic"}}).judge.model_path is None


def test_the_platform_keeps_the_judge_inside_its_models_directory(smollm2_dir, tmp_path):
    """As model.path: a judge folder outside the platform's model roots is refused, whether or not it exists."""
    raw = {**JUDGED, "judge": {"model_path": str(smollm2_dir)}}
    found = problems(raw, model_dirs=[str(tmp_path)])
    assert found == {
        "judge.model_path": f"missing or not allowed: {smollm2_dir}; put the model folder under the platform's "
        "models directory"
    }
    allowed = parse_config(raw, model_dirs=[str(smollm2_dir.parent)])
    assert allowed.judge.model_path == str(smollm2_dir.resolve())

"""Review defects: a tokenizer whose ids do not fit the model's embedding is refused before
any weight is read (an id >= vocab_size would otherwise read NaN silently), and a config.json's legacy
`rope_scaling: {"rope_type": "default"}` means no scaling. Expected numbers are read from the files
written here, not from the code under test."""

import dataclasses
import json

import pytest
import yaml

from tests.tiny_models import model_config as tiny_config_json
from tests.tiny_models import write_tiny_model
from trainers.data.tokenizer import CharTokenizer
from trainers.errors import ConfigError, FieldError
from trainers.loop.policy import check_tokenizer_fits, load_policy, model_field
from trainers.models.hf_config import model_config_from_json
from trainers.models.presets import PRESETS


def _largest_tokenizer_json_id(folder) -> int:
    """The largest id in the folder's tokenizer.json: its BPE vocabulary and its added tokens."""
    data = json.loads((folder / "tokenizer.json").read_text())
    return max(max(data["model"]["vocab"].values()), max(token["id"] for token in data["added_tokens"]))


def _set_config(folder, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    (folder / "config.json").write_text(json.dumps(config))


def test_a_model_folder_whose_vocab_is_smaller_than_its_tokenizer_is_refused(tmp_path):
    folder = write_tiny_model(tmp_path / "model")
    largest_id = _largest_tokenizer_json_id(folder)
    _set_config(folder, vocab_size=largest_id)  # one row short: the largest id has no embedding row
    with pytest.raises(FieldError) as caught:
        load_policy(str(folder))
    error = caught.value
    assert isinstance(error, ConfigError) and isinstance(error, ValueError)
    assert error.field == "model.path"
    assert f"ids up to {largest_id}" in error.message and f"vocab_size is {largest_id}" in error.message
    assert str(folder) in error.message


def test_an_added_token_past_the_models_vocab_is_refused(tmp_path):
    folder = write_tiny_model(tmp_path / "model")
    vocab_rows = _largest_tokenizer_json_id(folder) + 1  # config.json's vocab_size: every tokenizer.json id fits
    assert json.loads((folder / "config.json").read_text())["vocab_size"] == vocab_rows
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["added_tokens_decoder"][str(vocab_rows)] = {
        "content": "<|extra|>",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": True,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    with pytest.raises(FieldError, match=f"ids up to {vocab_rows} .*vocab_size is {vocab_rows}"):
        load_policy(str(folder))


def test_a_run_directory_is_checked_too(tmp_path):
    folder = write_tiny_model(tmp_path / "model")
    largest_id = _largest_tokenizer_json_id(folder)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"model": {"path": str(folder)}}))
    _set_config(folder, vocab_size=largest_id - 5)
    with pytest.raises(FieldError, match=f"ids up to {largest_id} .*vocab_size is {largest_id - 5}") as caught:
        load_policy(str(run_dir))
    assert caught.value.field == "model.path"


def test_a_model_that_fits_loads(tmp_path):
    folder = write_tiny_model(tmp_path / "model")
    policy = load_policy(str(folder), progress=False)
    assert policy.model_config.vocab_size == _largest_tokenizer_json_id(folder) + 1


def test_check_tokenizer_fits_with_the_char_tokenizer():
    # the char tokenizer's ids: 0 PAD, 1 BOS, 2 EOS, 3 UNK, 4 "\n", 5..99 printable ASCII: the largest is 99
    with pytest.raises(FieldError, match="ids up to 99 .*vocab_size is 99") as caught:
        check_tokenizer_fits(CharTokenizer(), dataclasses.replace(PRESETS["tiny"], vocab_size=99), "model.preset")
    assert caught.value.field == "model.preset"
    check_tokenizer_fits(CharTokenizer(), dataclasses.replace(PRESETS["tiny"], vocab_size=100), "model.preset")


def test_model_field_names_what_chose_the_model(tmp_path):
    from trainers.config import parse_config

    assert model_field(parse_config({"model": {"preset": "tiny"}})) == "model.preset"
    folder = write_tiny_model(tmp_path / "model")
    assert model_field(parse_config({"model": {"path": str(folder)}})) == "model.path"


@pytest.mark.parametrize("legacy", [{"rope_type": "default"}, {"type": "default"}])
def test_legacy_default_rope_scaling_means_no_scaling(legacy):
    data = tiny_config_json(320)
    plain = model_config_from_json(data)
    config = model_config_from_json({**data, "rope_scaling": legacy})
    assert config.rope_scaling is None
    assert config == plain


def test_other_rope_scaling_types_are_still_refused():
    from trainers.models.hf_config import ModelFolderError

    data = tiny_config_json(320)
    with pytest.raises(ModelFolderError, match="rope_scaling type 'linear'"):
        model_config_from_json({**data, "rope_scaling": {"type": "linear", "factor": 2.0}})

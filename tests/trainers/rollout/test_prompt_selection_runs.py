"""Prompt selection in the synchronous loop: skipped prompts move the data position without being
generated, every generated group joins the per-prompt history, the history rides in the checkpoint so
a resumed run makes the same decisions, and bad settings are refused with the field named."""

from __future__ import annotations

import json
import os

from tests.step_metrics import StepMetrics
from trainers.config import parse_config
from trainers.data.prompt_selection import PromptHistory
from trainers.loop.trainer import GRPOTrainer, train

TINY = {
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 8},  # an epoch is two steps: prompts come round again
    "batch": {"prompts_per_step": 4},
    "grpo": {"num_generations": 4, "beta": 0.0},
    "rollout": {
        "prompt_selection": True,
        "prompt_selection_base_skip_probability": 0.8,
        "prompt_selection_max_skip_probability": 0.9,
        "dynamic_sampling_metric": "correct",  # flat: all answers right or all wrong, whatever the partial credit
    },
    "optimizer": {"learning_rate": 0.01},
    "checkpoint": {"every_steps": 1},
    "train": {"max_steps": 4},
}


def _meta(run_dir: str, step: int) -> dict:
    with open(os.path.join(run_dir, "checkpoints", str(step), "meta", "metadata"), encoding="utf-8") as f:
        return json.load(f)


def test_selection_skips_flat_prompts_keeps_the_position_and_resumes_exactly(tmp_path):
    straight = StepMetrics()
    whole = train(parse_config(TINY), str(tmp_path / "a"), straight)
    steps = [straight.steps[s] for s in (1, 2, 3, 4)]
    # the first epoch has no history: nothing is skipped
    assert steps[0]["selection/prompts_skipped"] == steps[1]["selection/prompts_skipped"] == 0
    # an untrained tiny model answers (nearly) everything wrong: flat groups, skipped on their next visit
    assert steps[0]["selection/flat_group_fraction"] > 0.5
    skipped = sum(m["selection/prompts_skipped"] for m in steps)
    assert skipped > 0
    assert [m["selection/completions_saved"] for m in steps] == [4 * m["selection/prompts_skipped"] for m in steps]
    meta = _meta(str(tmp_path / "a"), 4)
    assert meta["data_position"] == 4 * 4 + skipped  # skipped prompts are consumed too
    history = PromptHistory.from_state(meta["rollout_source"]["prompt_history"])
    assert sum(history.counts().values()) == 4 * 4  # every generated group, and only those

    train(parse_config({**TINY, "train": {"max_steps": 2}}), str(tmp_path / "b"), StepMetrics())
    resumed = StepMetrics()
    again = train(parse_config(TINY), str(tmp_path / "b"), resumed)
    assert again.params_digest == whole.params_digest
    for step in (3, 4):
        for name in ("selection/prompts_skipped", "selection/flat_group_fraction", "reward/mean"):
            assert resumed.steps[step][name] == straight.steps[step][name]


def test_selection_with_dynamic_sampling_counts_skipped_prompts_as_consumed(tmp_path):
    config = parse_config({**TINY, "rollout": {**TINY["rollout"], "dynamic_sampling": True}})
    trainer = GRPOTrainer(config, str(tmp_path / "run"))
    for index in range(8):  # every prompt flat 5 times: skipped with probability 0.9
        for _ in range(5):
            trainer.source.history.record(index, "all_wrong")
    trainer.source.start(trainer.state.params, 0, 0)
    rollout = trainer.source.next(0)
    metrics = trainer.source.metrics()
    trainer.source.stop()
    generated = metrics["dynamic/prompts_sampled"]
    assert metrics["selection/prompts_skipped"] > 0
    assert rollout.prompts_consumed == metrics["dynamic/prompts_consumed"] == trainer.source.position
    assert rollout.prompts_consumed == generated + metrics["selection/prompts_skipped"]
    # the history takes the step's groups only once the step is trained
    assert sum(trainer.source.history.counts().values()) == 8 * 5
    trainer.source.publish(None, 1)
    assert sum(trainer.source.history.counts().values()) == 8 * 5 + generated

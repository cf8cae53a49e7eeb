"""What the trainer reports through `Hooks.on_samples`: each training sample's group (its prompt's
place in the step) and generation (its place among the prompt's G completions), and evaluation
samples with "kind": "eval" at the step evaluated."""

from trainers.config import parse_config
from trainers.loop.trainer import train
from trainers.step.hooks import Hooks

RAW = {
    "seed": 5,
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 8, "eval_prompts": 3},
    "batch": {
        "prompts_per_step": 2,
        "mini_batch_prompts": 2,
        "train_micro_batch_sequences": 6,
        "rollout_micro_batch_sequences": 6,
        "logprob_micro_batch_sequences": 6,
    },
    "grpo": {"num_generations": 3},
    "train": {"max_steps": 2, "samples_per_step": 5},
    "eval": {"every_steps": 2},
    "checkpoint": {"every_steps": 0},
}


class Record(Hooks):
    def __init__(self):
        self.calls = []

    def on_samples(self, step, samples):
        self.calls.append((step, samples))


def test_samples_carry_group_generation_and_eval_kind(tmp_path):
    hooks = Record()
    train(parse_config(RAW), str(tmp_path / "run"), hooks)
    trained = [(step, samples) for step, samples in hooks.calls if all("kind" not in s for s in samples)]
    evaluated = [(step, samples) for step, samples in hooks.calls if any("kind" in s for s in samples)]
    assert [step for step, _ in trained] == [1, 2]
    for _, samples in trained:
        # samples_per_step = 5 of 2 prompts x G = 3: the first group whole, then 2 of the second
        assert [(s["group"], s["generation"]) for s in samples] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
        assert samples[0]["prompt"] == samples[2]["prompt"] != samples[3]["prompt"]
    assert [step for step, _ in evaluated] == [2]
    ((_, eval_samples),) = evaluated
    # one completion per eval prompt (G = 1): 3 prompts, each its own group
    assert [(s["kind"], s["group"], s["generation"]) for s in eval_samples] == [
        ("eval", 0, 0),
        ("eval", 1, 0),
        ("eval", 2, 0),
    ]

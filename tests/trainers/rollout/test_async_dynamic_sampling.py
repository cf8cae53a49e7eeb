"""DAPO dynamic sampling in asynchronous GRPO: the trainer's step takes buffered groups in data
order, drops the flat ones, and stops at prompts_per_step informative groups or at the cap of
prompts_per_step x (1 + rounds) consumed prompts, completing a capped step with flat groups out of
the loss; the data position counts every prompt consumed, so resume is exact.

The pure pieces (`select_informative`, `ReplayBuffer.peek_run` / `take_run`) against hand-written
cases; then tiny async runs whose rewards are fixed per prompt text (a crc32 test decides which
prompts are flat), so the walk each step must make is known in advance, whatever the weights."""

from __future__ import annotations

import copy
import json
import os
import zlib

import numpy as np
import pytest

from tests.trainers.rollout.test_async import run_bounded
from trainers.config import parse_config
from trainers.data.examples import load_examples
from trainers.data.prompt_stream import PromptStream
from trainers.loop.trainer import train
from trainers.rollout import collect as rollout_lib
from trainers.rollout.dynamic_sampling import select_informative
from trainers.rollout.replay_buffer import ReplayBuffer, TrajectoryGroup
from trainers.step.hooks import Hooks

P, G, ROUNDS = 4, 2, 2
CAP = P * (1 + ROUNDS)  # prompts one step may consume
RAW = {
    "seed": 1,
    "model": {"preset": "tiny"},
    "data": {"task": "copy", "train_prompts": 48, "eval_prompts": 0},
    "batch": {"prompts_per_step": P, "mini_batch_prompts": 2},
    "grpo": {"num_generations": G, "beta": 0.0},
    "rollout": {"max_new_tokens": 8, "dynamic_sampling": True, "dynamic_sampling_max_rounds": ROUNDS},
    "train": {"max_steps": 3, "samples_per_step": P * G},
    "checkpoint": {"every_steps": 1},
}


# -- pure pieces ----------------------------------------------------------------------------------


def test_select_informative_by_hand():
    # 2 prompts a step, at most 5 consumed. F = flat, I = informative.
    #          F      I     F      I     I
    s = select_informative([False, True, False, True, True], prompts=2, max_prompts=5)
    assert s.complete and s.kept == (1, 3) and s.dropped == (0, 2) and s.consumed == 4 and s.left_out == ()
    # The run ends before the step is decided: everything so far consumed, nothing left out yet.
    s = select_informative([False, True, False], prompts=2, max_prompts=5)
    assert not s.complete and s.consumed == 3 and s.left_out == ()
    # The cap: 5 consumed, 1 informative; the first dropped group completes the step.
    s = select_informative([False, True, False, False, False, True], prompts=2, max_prompts=5)
    assert s.complete and s.consumed == 5 and s.kept == (1,) and s.left_out == (0,) and s.order == (1, 0)


def _group(index, version=0):
    return TrajectoryGroup(index, version, f"g{index}")


def test_replay_buffer_runs_by_hand():
    buffer = ReplayBuffer(capacity_groups=6, max_age_steps=1, next_prompt_index=3, next_step=2)
    for index, version in ((3, 2), (4, 0), (5, 2), (7, 2)):
        assert buffer.put(_group(index, version))
    # prompt 4 (v0) is 2 steps old at step 2: dropped and queued, so the run stops at 3
    assert [g.prompt_index for g in buffer.peek_run(2, 10)] == [3]
    assert buffer.pop_dropped() == [4] and buffer.dropped_stale == 1
    assert buffer.put(_group(4, 2))
    assert [g.prompt_index for g in buffer.peek_run(2, 2)] == [3, 4]  # the limit
    assert [g.prompt_index for g in buffer.take_run(2, 2, step_done=False)] == [3, 4]
    assert buffer.next_prompt_index == 5 and buffer.next_step == 2  # the step stays open
    assert not buffer.has_room_for(4) and buffer.has_room_for(10)  # the window moved by 2
    with pytest.raises(ValueError):
        buffer.take_run(2, 2, step_done=True)  # 6 is missing
    assert [g.prompt_index for g in buffer.take_run(2, 1, step_done=True)] == [5]
    assert buffer.next_step == 3
    m = buffer.metrics()
    assert m["async/trajectory_age_mean"] == 0.0 and m["async/dropped_stale"] == 1.0 and m["async/buffer_size"] == 1.0
    with pytest.raises(ValueError):
        buffer.peek_run(2, 1)  # step 2 is over


# -- runs -----------------------------------------------------------------------------------------


def flat(prompt: str) -> bool:
    """Which prompts get flat rewards in these runs (about 3 in 4)."""
    return zlib.crc32(prompt.encode()) % 4 != 0


def fixed_score(completions, examples, specs, scorers=None):
    """Rewards by prompt text: a flat prompt's G completions all score 0; otherwise 1, 0, 1, ...
    (completion i of the rollout is completion i % G of its prompt)."""
    rewards = np.array([0.0 if flat(e["prompt"]) else float(i % G == 0) for i, e in enumerate(examples)], np.float32)
    return rewards, {"fixed": rewards}


def stream(start, count):
    d = RAW["data"]
    examples, _ = load_examples(d["task"], None, None, d["train_prompts"], d["eval_prompts"], RAW["seed"])
    return [e["prompt"] for e in PromptStream(examples, seed=RAW["seed"]).take(start, count)]


def expected_steps(steps):
    """(first prompt, trained prompts, in-loss flags per trained group, consumed) per step, walked here
    from the `flat` rule: informative prompts kept in order until P, or CAP consumed, then the
    first flat ones fill the step out of the loss."""
    prompts, position, out = stream(0, steps * CAP), 0, []
    for _ in range(steps):
        kept, dropped, j = [], [], position
        while len(kept) < P and j - position < CAP:
            (dropped if flat(prompts[j]) else kept).append(prompts[j])
            j += 1
        fill = dropped[: P - len(kept)]
        out.append((position, kept + fill, [True] * len(kept) + [False] * len(fill), j - position))
        position = j
    return out


class Record(Hooks):
    def __init__(self):
        self.samples, self.metrics = {}, {}

    def on_samples(self, step, samples):
        self.samples[step] = samples

    def on_step(self, step, metrics):
        self.metrics[step] = metrics


def async_config(max_age, **train):
    raw = copy.deepcopy(RAW)
    raw["async"] = {"enabled": True, "max_trajectory_age_steps": max_age}
    raw["train"].update(train)
    return parse_config(raw)


def data_position(run_dir, step):
    with open(os.path.join(run_dir, "checkpoints", str(step), "meta", "metadata")) as f:
        return json.load(f)["data_position"]


def test_the_expected_walk_has_every_case():
    """The runs below are meaningful: a step completed by informative groups after drops, and capped
    steps with some informative groups and some out of the loss (hand-checked: 11, 12, 12 consumed)."""
    walk = expected_steps(3)
    assert [consumed for _, _, _, consumed in walk] == [11, 12, 12]
    assert [flags.count(True) for _, _, flags, _ in walk] == [4, 2, 2]


@pytest.fixture
def fixed_rewards(monkeypatch):
    monkeypatch.setattr(rollout_lib, "score_with_details", lambda *args: (*fixed_score(*args), None))


def test_async_steps_train_informative_groups_and_cap_out_of_the_loss(tmp_path, fixed_rewards):
    """Max age 1: every step trains exactly the walk's groups (informative ones in the loss, in data
    order; a capped step completed by the first flat ones, out of the loss), moves the data position
    by the prompts it consumed, and reports the dynamic/* metrics of the consumed groups; no trained
    group is older than 1."""
    hooks = Record()
    run_dir = str(tmp_path / "run")
    result = run_bounded(lambda: train(async_config(1), run_dir, hooks), 600)
    assert result.status == "succeeded" and result.final_step == 3
    position = 0
    for step, (first, trained, flags, consumed) in zip((1, 2, 3), expected_steps(3)):
        samples, m = hooks.samples[step], hooks.metrics[step]
        assert first == position
        assert [s["prompt"] for s in samples[::G]] == trained
        in_loss = [s.get("in_loss", True) for s in samples]
        assert in_loss == [f for f in flags for _ in range(G)]
        for j in range(P):  # (a) every group in the loss is informative
            rewards = {s["reward"] for s in samples[j * G : (j + 1) * G]}
            assert (len(rewards) > 1) == flags[j]
        position += consumed
        assert data_position(run_dir, step) == position
        assert m["dynamic/prompts_consumed"] == m["dynamic/prompts_sampled"] == consumed
        assert m["dynamic/refill_rounds"] == (consumed - P) / P
        informative = flags.count(True)
        assert m["dynamic/dropped_group_fraction"] == pytest.approx((consumed - informative) / consumed)
        # informative groups score 1, 0: mean over the consumed completions = informative / (2 consumed)
        assert m["reward/mean"] == pytest.approx(informative / (2 * consumed))
        assert m["async/trajectory_age_mean"] <= 1.0
    assert any(False in [s.get("in_loss", True) for s in hooks.samples[step]] for step in (1, 2, 3))  # (c)


def test_async_dynamic_sampling_resumes_exactly_at_max_age_0(tmp_path, fixed_rewards):
    """(b) 3 steps straight = 2 steps, then resume: the same parameters, bit for bit. The resumed data
    position (23) lies inside a collector unit (4 prompts), whose consumed groups are not put again."""
    whole = run_bounded(lambda: train(async_config(0), str(tmp_path / "a"), Record()), 600)
    run_dir = str(tmp_path / "b")
    run_bounded(lambda: train(async_config(0, max_steps=2), run_dir, Record()), 600)
    walk = expected_steps(3)
    assert data_position(run_dir, 2) == walk[2][0] == 23
    resumed = Record()
    again = run_bounded(lambda: train(async_config(0), run_dir, resumed), 600)
    assert again.status == "succeeded" and again.final_step == 3
    assert again.params_digest == whole.params_digest
    assert [s["prompt"] for s in resumed.samples[3][::G]] == walk[2][1]
    assert data_position(run_dir, 3) == 23 + walk[2][3]


def penalised_score(completions, examples, specs, scorers=None):
    """As fixed_score for correctness (math_answer: a flat prompt's answers all wrong; otherwise right,
    wrong, right, ...), but every wrong answer at an odd place also loses 0.5, as an overlong penalty
    would take: the rewards of every group differ, only correctness tells the flat ones."""
    correct = np.array([0.0 if flat(e["prompt"]) else float(i % G == 0) for i, e in enumerate(examples)], np.float32)
    penalty = np.array([-0.5 if (i % G) % 2 and not c else 0.0 for i, c in enumerate(correct)], np.float32)
    return correct + penalty, {"math_answer": correct, "penalty": penalty}


def test_async_dynamic_sampling_on_correctness_ignores_other_reward_terms(tmp_path, monkeypatch):
    """rollout.dynamic_sampling_metric: correct. Every group's rewards differ, yet the steps train
    exactly the walk of the `flat` rule (informative groups in data order, capped steps completed out
    of the loss) and consume what it consumes."""
    monkeypatch.setattr(rollout_lib, "score_with_details", lambda *args: (*penalised_score(*args), None))
    raw = copy.deepcopy(RAW)
    raw["async"] = {"enabled": True, "max_trajectory_age_steps": 1}
    raw["train"].update(max_steps=2)
    raw["rollout"]["dynamic_sampling_metric"] = "correct"
    hooks, run_dir = Record(), str(tmp_path / "run")
    result = run_bounded(lambda: train(parse_config(raw), run_dir, hooks), 600)
    assert result.status == "succeeded" and result.final_step == 2
    position = 0
    for step, (first, trained, flags, consumed) in zip((1, 2), expected_steps(2)):
        samples = hooks.samples[step]
        assert first == position and [s["prompt"] for s in samples[::G]] == trained
        assert [s.get("in_loss", True) for s in samples] == [f for f in flags for _ in range(G)]
        assert len({s["reward"] for s in samples[:G]}) > 1  # the first group's rewards differ either way
        position += consumed
        assert data_position(run_dir, step) == position

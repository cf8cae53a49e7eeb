"""Multi-turn episodes: the turn loop's host side (`rollout.episodes`), the reply's tokens
(`encoding.encode_reply`), which tokens reach the loss, and episodes through the synchronous and
asynchronous loops with exact resume."""

import copy
import io
import os
import subprocess
import sys
import tarfile

import jax
import numpy as np
import pytest

from tests.conftest import ROOT
from trainers.config import parse_config
from trainers.data.chat_template import conversation
from trainers.data.encoding import encode_reply
from trainers.data.hf_tokenizer import HFTokenizer
from trainers.data.tokenizer import EOS_ID, CharTokenizer
from trainers.envs.base import Environment, StepResult
from trainers.loop.trainer import GRPOTrainer, train
from trainers.rollout.episodes import Episodes, episode_metrics

CHARS = "".join(chr(c) for c in range(32, 127))


class TwoTurns(Environment):
    """A scripted game: the first assistant turn gets the tool reply "ok", the second ends the episode
    with a bonus. Every printable character is a stop string, so with a random model a turn is one
    character long (and a turn may also end at EOS)."""

    name = "two_turns"
    stop_strings = tuple(CHARS)
    reward_parts = ("bonus",)

    def step(self, state, assistant_message):
        if state.turn >= 2:
            return StepResult(done=True, reward_parts={"bonus": 0.5})
        return StepResult(messages=[{"role": "tool", "content": "ok"}], tool_calls=1)


class Bang(Environment):
    """A turn ends at "<x!"; the reply is "ok"; never done by itself."""

    name = "bang"
    stop_strings = ("<x!",)
    reward_parts = ("bonus",)

    def step(self, state, assistant_message):
        if "raise" in assistant_message:
            raise RuntimeError("the game broke")
        if "undeclared" in assistant_message:
            return StepResult(reward_parts={"other": 1.0})
        return StepResult(messages=[{"role": "tool", "content": "ok"}], tool_calls=1, tool_errors=1)


def _episodes(env, max_turns=3, max_total_tokens=40):
    return Episodes(
        env,
        CharTokenizer(),
        [{"prompt": "p", "answer": "1"}],
        ["p"],
        chat=False,
        system_prompt=None,
        max_turns=max_turns,
        max_total_tokens=max_total_tokens,
    )


def _ids(text):
    return np.array(CharTokenizer().encode(text, add_bos=False), np.int32)


def test_a_turn_gets_its_reply_then_the_episode_ends_when_the_environment_says_done():
    eps = _episodes(TwoTurns())
    first = _ids("ab!")
    reply = eps.on_turn_end(0, 3, first)
    np.testing.assert_array_equal(reply, _ids("\nok\n"))  # no chat template: the content on its own line
    so_far = np.concatenate([first, reply, _ids("c"), [EOS_ID]])
    assert eps.on_turn_end(0, len(so_far), so_far) is None
    (episode,) = eps.finish(np.zeros((1, 40), np.int32), np.zeros((1, 40), bool))
    assert episode.turns == [
        {"role": "assistant", "text": "ab!", "tokens": 3},
        {"role": "tool", "text": "ok", "tokens": 4},
        {"role": "assistant", "text": "c", "tokens": 2},
    ]
    assert (episode.end_reason, episode.reward_parts, episode.tool_calls) == ("done", {"bonus": 0.5}, 1)
    assert episode.final_text == "c" and episode.text == "ab!\nok\nc"


def test_stop_tokens_without_the_stop_string_let_the_turn_go_on():
    eps = _episodes(Bang())
    # "x!" are the last two tokens of "<x!" (what the sampler pauses on), but the text is "ax!".
    reply = eps.on_turn_end(0, 3, _ids("ax!"))
    assert reply is not None and len(reply) == 0
    assert eps.episodes[0].turns == [] and eps.episodes[0].state.turn == 0
    reply = eps.on_turn_end(0, 6, _ids("ax!<x!"))
    np.testing.assert_array_equal(reply, _ids("\nok\n"))
    assert eps.episodes[0].turns[0] == {"role": "assistant", "text": "ax!<x!", "tokens": 6}


@pytest.mark.parametrize(
    "turn, limits, reason, error",
    [
        ("raise<x!", {}, "env_error", "RuntimeError: the game broke"),
        ("undeclared<x!", {}, "env_error", "ValueError: reward parts ['other'] are not declared in Bang.reward_parts"),
        ("a<x!", {"max_turns": 1}, "max_turns", None),
        ("a<x!", {"max_total_tokens": 4 + 4}, "max_total_tokens", None),  # 4 tokens + the 4-token reply: no room left
    ],
)
def test_an_episode_ends_with_its_reason(turn, limits, reason, error):
    eps = _episodes(Bang(), **limits)
    assert eps.on_turn_end(0, len(turn), _ids(turn)) is None
    assert (eps.episodes[0].end_reason, eps.episodes[0].error) == (reason, error)


def test_the_budget_cuts_an_episode_mid_turn():
    eps = _episodes(Bang(), max_total_tokens=10)
    reply = eps.on_turn_end(0, 4, _ids("a<x!"))
    tokens = np.concatenate([_ids("a<x!"), reply, _ids("zz")])[None]
    (episode,) = eps.finish(tokens, np.ones(tokens.shape, bool))
    assert episode.end_reason == "max_total_tokens" and episode.turns[-1] == {
        "role": "assistant",
        "text": "zz",
        "tokens": 2,
    }


def test_episode_metrics_by_hand():
    episodes = [
        {
            "turns": [{"role": "assistant"}, {"role": "tool"}, {"role": "assistant"}],
            "tool_calls": 1,
            "tool_errors": 0,
            "end_reason": "done",
        },
        {"turns": [{"role": "assistant"}], "tool_calls": 0, "tool_errors": 0, "end_reason": "max_total_tokens"},
        {
            "turns": [{"role": "assistant"}, {"role": "tool"}],
            "tool_calls": 3,
            "tool_errors": 2,
            "end_reason": "env_error",
        },
        {"turns": [{"role": "assistant"}] * 2, "tool_calls": 0, "tool_errors": 0, "end_reason": "max_turns"},
    ]
    assert episode_metrics(episodes) == {
        "env/turns_mean": 1.5,
        "env/tool_calls_mean": 1.0,
        "env/tool_errors_mean": 0.5,
        "env/tool_use_fraction": 0.5,
        "env/max_turns_fraction": 0.25,
        "env/max_total_tokens_fraction": 0.25,
        "env/error_fraction": 0.25,
    }


def test_a_tool_reply_continues_smollm2s_chat_template(smollm2_dir):
    """The reply closes the assistant's turn (less the end-of-turn token the model wrote), adds the
    tool message wrapped in <tool_response> (SmolLM2's template does not wrap it) and opens the next
    assistant turn: the text SmolLM2's template gives the whole conversation, written out by hand."""
    tok = HFTokenizer.from_folder(smollm2_dir)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "39 - 28"}}</tool_call>'
    history = conversation("What is 39 - 28?", "Use the calculator.") + [{"role": "assistant", "content": call}]
    reply = [{"role": "tool", "content": "11"}]
    tail = "<|im_start|>tool\n<tool_response>\n11\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    stopped_at_tag = encode_reply(tok, history, reply, chat=True)
    assert stopped_at_tag == tok.encode("<|im_end|>\n" + tail, add_bos=False)
    stopped_at_eos = encode_reply(tok, history, reply, chat=True, ended_by="<|im_end|>")
    assert stopped_at_eos == tok.encode("\n" + tail, add_bos=False)


# -- through the loops --------------------------------------------------------------------------------

RAW = {
    "seed": 2,
    "model": {"preset": "tiny"},
    "data": {"task": "arithmetic", "train_prompts": 16, "eval_prompts": 4},
    "batch": {"prompts_per_step": 4, "rollout_micro_batch_sequences": 8},
    "grpo": {"num_generations": 4, "beta": 0.04},
    "env": {"name": "tests.trainers.rollout.test_episodes:TwoTurns", "max_turns": 3, "max_total_tokens": 24},
    "train": {"max_steps": 2},
    "checkpoint": {"every_steps": 1},
    "eval": {"every_steps": 2},
}


def test_only_sampled_tokens_reach_the_loss(tmp_path):
    """A step of two-turn episodes: the reply's tokens are in the forward pass (completion_mask) but
    weigh 0 in the loss; the KL term sees the sampled tokens only (a reference far off on the
    reply's tokens changes nothing)."""
    trainer = GRPOTrainer(parse_config(RAW), str(tmp_path))
    trainer.source.start(trainer.policy_params(), 0, 0)
    rollout = trainer.source.next(0)
    reply = rollout.completion_mask & ~rollout.loss_mask
    assert reply.any() and rollout.loss_mask.any()
    # Each episode: 1 sampled token, the 4-token reply "\nok\n", 1 sampled token (or fewer if cut).
    first = rollout.episodes[0]
    assert [t["role"] for t in first["turns"]] == ["assistant", "tool", "assistant"]
    assert first["end_reason"] == "done" and first["reward_parts"] == {"bonus": 0.5}
    np.testing.assert_array_equal(rollout.loss_mask[0, :6], [True, False, False, False, False, True])
    np.testing.assert_array_equal(rollout.sample_logprobs[reply], 0.0)
    captured = []
    update_fn = trainer.update_fn

    def capture(params, opt_state, batch, **kwargs):
        captured.append(jax.tree.map(np.asarray, batch))
        # The reference is the policy itself at step 0 (KL 0), except on the reply's tokens, where it
        # is made far off: if they reached the KL term, it would be large.
        far_off = batch["completion_mask"] & ~batch["loss_mask"]
        batch = dict(batch, ref_logprobs=batch["ref_logprobs"] + 5.0 * far_off)
        return update_fn(params, opt_state, batch, **kwargs)

    trainer.update_fn = capture
    metrics = trainer.train_on(rollout)
    batch = captured[0]
    mask = batch["completion_mask"].reshape(-1, batch["completion_mask"].shape[-1])
    loss_mask = batch["loss_mask"].reshape(mask.shape)
    weights = batch["weights"].reshape(mask.shape)
    assert (weights[mask & ~loss_mask] == 0).all() and (weights[loss_mask] > 0).all()
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-5)


def _digest(raw, run_dir):
    return train(parse_config(raw), str(run_dir)).params_digest


@pytest.mark.parametrize("asynchronous", [False, True])
def test_episodes_train_and_resume_exactly(tmp_path, asynchronous):
    """Sync, and async through the collector and replay buffer (with max age 0, so which weights
    sample which group does not depend on the threads' timing): k steps + resume = N steps."""
    raw = copy.deepcopy(RAW)
    raw["async"] = {"enabled": asynchronous, "max_trajectory_age_steps": 0}
    straight = _digest(raw, tmp_path / "straight")
    first = copy.deepcopy(raw)
    first["train"]["max_steps"] = 1
    _digest(first, tmp_path / "resumed")
    assert _digest(raw, tmp_path / "resumed") == straight


# The parameters digest the trainer at commit e750c79 (before environments existed) gives for the
# config of the test below, one per CPU it was computed on: XLA compiles different code for different
# vector units, so the last bits differ from one CPU family to another, while on one machine the digest
# never changes. Where the repository's history holds e750c79 the test computes that commit's digest on
# this machine instead (`_digest_at_commit`), so a new CPU needs no entry here.
BEFORE_ENVIRONMENTS_COMMIT = "e750c79"
DIGESTS_BEFORE_ENVIRONMENTS = {
    "43e2807ee7d45c6cb1d411fcbd24ecdfa339ff0defcc962ed825f71ffd0f792b",  # the CI machine of 2026-11-26 16:00
    "5900c5f9a7e83c53b6c5907093cff419078b5648c516fd316a68306c519c84ab",  # AMD EPYC, 2026-11-26 21:30
    "7a2b580376b0c92e60e1f343664fd2192cb001810bbfc2334976d3a391164a82",  # AMD EPYC, 2026-11-27 21:00
}
DIGEST_PROGRAM = """
import sys, tempfile
from trainers.config import parse_config
from trainers.loop.trainer import train
raw = {raw!r}
with tempfile.TemporaryDirectory() as out:
    print(train(parse_config(raw), out).params_digest)
"""


def _digest_at_commit(commit, raw, tmp_path):
    """The params digest of `raw` under the trainer of `commit` (its `trainers/` unpacked from git into
    tmp_path, run in a subprocess), or None when this checkout's history does not hold the commit."""
    root = ROOT
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "trainers"], cwd=root, capture_output=True)
    if archive.returncode != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp_path / "old", filter="data")
    run = subprocess.run(
        [sys.executable, "-c", DIGEST_PROGRAM.format(raw=raw)],
        cwd=tmp_path / "old",
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "old")},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.split()[-1]


@pytest.mark.production_codegen  # today's program against that commit's, bit for bit (tests/conftest.py)
def test_single_turn_is_bit_identical_to_the_trainer_before_environments(tmp_path):
    """env single_turn takes the plain sampler: the parameters after two steps are those the trainer
    gave before environments existed (commit e750c79, with the same config and no env section)."""
    raw = {k: copy.deepcopy(v) for k, v in RAW.items() if k not in ("env", "eval")}
    raw["checkpoint"] = {"every_steps": 0}
    before = _digest_at_commit(BEFORE_ENVIRONMENTS_COMMIT, raw, tmp_path)
    raw["env"] = {"name": "single_turn"}
    digest = _digest(raw, tmp_path / "now")
    if before is not None:
        assert digest == before
    else:  # a checkout without that history: the digests recorded on the machines it was computed on
        assert digest in DIGESTS_BEFORE_ENVIRONMENTS


def test_a_sample_shows_its_turns_and_every_reward_part(tmp_path):
    trainer = GRPOTrainer(parse_config(RAW), str(tmp_path))
    trainer.source.start(trainer.policy_params(), 0, 0)
    rollout = trainer.source.next(0)
    sample = rollout.samples(1)[0]
    assert sample["env"] == "tests.trainers.rollout.test_episodes:TwoTurns"
    assert [t["role"] for t in sample["turns"]] == ["assistant", "tool", "assistant"]
    assert sample["turns"][1] == {"role": "tool", "text": "ok", "tokens": 4}
    # The arithmetic task's three reward functions (raw scores) and the environment's part.
    assert set(sample["reward_parts"]) == {"exact_match", "prefix_match", "alphabet_match", "env/bonus"}
    assert sample["reward_parts"]["env/bonus"] == 0.5
    assert sample["completion"] == "\n".join(t["text"] for t in sample["turns"])


class Ruled(TwoTurns):
    """TwoTurns whose episodes start with a rule before the example's question (its reset)."""

    name = "ruled"

    def reset(self, example):
        return "RULE: " + example["prompt"]


def test_a_sample_shows_the_prompt_the_model_saw(tmp_path):
    """The sample's prompt is the episode's first prompt (the environment's reset: a
    worked example, a game's rules), not the dataset example's."""
    raw = {
        **RAW,
        "env": {**RAW["env"], "name": "tests.trainers.rollout.test_episodes:Ruled"},
        "data": {**RAW["data"], "max_prompt_tokens": 64},
    }
    trainer = GRPOTrainer(parse_config(raw), str(tmp_path))
    trainer.source.start(trainer.policy_params(), 0, 0)
    rollout = trainer.source.next(0)
    for i, sample in enumerate(rollout.samples(8)):
        example = rollout.examples[i // rollout.num_generations]
        assert sample["prompt"] == "RULE: " + example["prompt"]


class Flood(Environment):
    """A calculator with `times: 10**6`: every reply is a megabyte (two messages)."""

    name = "flood"
    stop_strings = ("!",)

    def step(self, state, assistant_message):
        return StepResult(messages=[{"role": "tool", "content": "7" * 10**6}, {"role": "user", "content": "more"}])


class RecordingTokenizer(CharTokenizer):
    """Records the length of every text it encodes."""

    def __init__(self):
        super().__init__()
        self.encoded: list[int] = []

    def encode(self, text, *args, **kwargs):
        self.encoded.append(len(text))
        return super().encode(text, *args, **kwargs)


def test_a_huge_reply_is_cut_with_a_note_before_it_is_tokenized():
    from trainers.rollout.episodes import MAX_REPLY_CHARS

    tokenizer = RecordingTokenizer()
    eps = Episodes(
        Flood(),
        tokenizer,
        [{"prompt": "p", "answer": "1"}],
        ["p"],
        chat=False,
        system_prompt=None,
        max_turns=3,
        max_total_tokens=10**7,
    )
    reply = eps.on_turn_end(0, 2, _ids("a!"))
    assert reply is not None and len(reply) < MAX_REPLY_CHARS + 100
    assert max(tokenizer.encoded) < MAX_REPLY_CHARS + 100  # the megabyte never reached the tokenizer
    episode = eps.episodes[0]
    assert episode.end_reason is None  # the episode goes on with the cut reply
    tool = episode.turns[1]
    assert tool["role"] == "tool" and tool["text"].startswith("7" * MAX_REPLY_CHARS)
    assert tool["text"].endswith(
        f"\n[reply cut: {10**6 + 4 - MAX_REPLY_CHARS} more characters over the limit of {MAX_REPLY_CHARS}]"
    )
    assert [t["role"] for t in episode.turns] == ["assistant", "tool"]  # the message after the cut is dropped


def test_bound_reply_keeps_short_replies_and_cuts_across_messages():
    from trainers.rollout.episodes import bound_reply

    short = [{"role": "tool", "content": "ok"}]
    assert bound_reply(short, 10) == (short, 0)
    cut, n = bound_reply([{"role": "tool", "content": "abcdef"}, {"role": "user", "content": "ghijkl"}], 8)
    assert n == 4 and cut == [
        {"role": "tool", "content": "abcdef"},
        {"role": "user", "content": "gh\n[reply cut: 4 more characters over the limit of 8]"},
    ]

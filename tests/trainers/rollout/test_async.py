"""Asynchronous GRPO end to end: the collector thread, the replay buffer, the IS correction and devices.

Every run here is a tiny model for a few steps. Waits are bounded (runs that could hang run in a
thread joined with a timeout, or a subprocess with one), so a regression fails instead of hanging.
"""

import copy
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from tests.conftest import ROOT, xla_flags_with_devices
from trainers.config import load_config, parse_config
from trainers.data.examples import load_examples
from trainers.data.prompt_stream import PromptStream
from trainers.loop.trainer import GRPOTrainer, train
from trainers.rollout import collect as rollout_lib
from trainers.rollout import collector as collector_lib
from trainers.rollout.async_source import AsyncRolloutSource
from trainers.step.hooks import Action, Control, Hooks
from trainers.step.placement import Placement

# 6 prompts per epoch, 4 per step: steps cross epoch ends. Two mini-batches: old log-probs are used.
RAW = {
    "seed": 1,
    "model": {"preset": "tiny"},
    "data": {"task": "copy", "train_prompts": 6, "eval_prompts": 0},
    "batch": {"prompts_per_step": 4, "mini_batch_prompts": 2},
    "grpo": {"num_generations": 2, "beta": 0.0},
    "rollout": {"max_new_tokens": 8},
    "train": {"max_steps": 4, "samples_per_step": 8},
    "checkpoint": {"every_steps": 0},
}


def async_raw(max_age=1, **extra):
    raw = copy.deepcopy(RAW)
    raw["async"] = {"enabled": True, "max_trajectory_age_steps": max_age, **extra}
    return raw


class Record(Hooks):
    """Prompts trained per step (the first sample of each group), and the metrics."""

    def __init__(self, g=2):
        self.g, self.prompts, self.metrics = g, {}, {}

    def on_samples(self, step, samples):
        self.prompts[step] = [s["prompt"] for s in samples[:: self.g]]

    def on_step(self, step, metrics):
        self.metrics[step] = metrics


def run_bounded(fn, timeout_s):
    """fn() in a thread; fails the test (instead of hanging) if it takes longer than timeout_s."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as error:  # noqa: BLE001
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"did not finish within {timeout_s} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def stream_prompts(raw, start, count):
    d = raw["data"]
    examples, _ = load_examples(d["task"], None, None, d["train_prompts"], d["eval_prompts"], raw["seed"])
    return [e["prompt"] for e in PromptStream(examples, seed=raw["seed"]).take(start, count)]


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory):
    hooks = Record()
    return train(parse_config(RAW), str(tmp_path_factory.mktemp("sync")), hooks), hooks


@pytest.mark.production_codegen  # bit for bit the synchronous loop's parameters (tests/conftest.py)
def test_max_age_0_is_the_synchronous_update(sync_run, tmp_path):
    """Same trajectories (same keys, same weights) and IS weights exactly 1: the same parameters."""
    sync, sync_hooks = sync_run
    hooks = Record()
    result = run_bounded(lambda: train(parse_config(async_raw(0)), str(tmp_path), hooks), 600)
    assert result.params_digest == sync.params_digest
    assert hooks.prompts == sync_hooks.prompts
    for m in hooks.metrics.values():
        assert m["async/trajectory_age_mean"] == 0.0 and m["is/weight_max"] == 1.0
        assert m["is/weight_mean"] == pytest.approx(1.0, abs=1e-5)
        assert m["is/truncated_fraction"] == 0.0 and m["async/dropped_stale"] == 0.0


@pytest.mark.production_codegen  # bit for bit the synchronous loop's parameters (tests/conftest.py)
def test_one_update_per_step_forms_the_importance_weights_inside_the_update(tmp_path):
    """mu = 1 and one mini-batch: no separate pi_old pass; with max age 0 that is still exactly the
    synchronous update, and the IS metrics come from the update (weights 1, nothing truncated).
    With top-k / top-p sampling too: the recorded pi_gen is then the truncated distribution's, not
    pi_old, but sequences sampled by the current weights take weight 1 as in the synchronous loop."""
    raw = copy.deepcopy(RAW)
    raw["batch"]["mini_batch_prompts"] = 4
    raw["rollout"] = {"max_new_tokens": 8, "top_k": 6, "top_p": 0.9}
    sync = run_bounded(lambda: train(parse_config(raw), str(tmp_path / "sync")), 600)
    raw["async"] = {"enabled": True, "max_trajectory_age_steps": 0}
    hooks = Record()
    trainer = GRPOTrainer(parse_config(raw), str(tmp_path / "async"), hooks)
    calls = []
    real_logprobs = trainer.logprobs
    trainer.logprobs = lambda *a: calls.append(1) or real_logprobs(*a)
    result = run_bounded(trainer.run, 600)
    assert calls == []
    assert result.params_digest == sync.params_digest
    for m in hooks.metrics.values():
        assert m["is/weight_max"] == 1.0 and m["is/truncated_fraction"] == 0.0
        assert m["is/weight_mean"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.production_codegen  # bit for bit the synchronous loop's parameters (tests/conftest.py)
def test_in_flight_updates_with_max_age_0_are_the_synchronous_update(sync_run, tmp_path):
    """With max age 0 no new weights can arrive while a step's groups are generated, so chunked
    in-flight generation samples exactly what one-call generation does."""
    sync, sync_hooks = sync_run
    hooks = Record()
    raw = async_raw(0, in_flight_weight_updates=True, in_flight_chunk_tokens=3)
    result = run_bounded(lambda: train(parse_config(raw), str(tmp_path), hooks), 600)
    assert result.params_digest == sync.params_digest
    assert all(m["async/token_age_mean"] == 0.0 for m in hooks.metrics.values())


def test_in_flight_updates_swap_weights_mid_generation(tmp_path, monkeypatch):
    """Max age 1 with in-flight updates every 2 decode steps. The collector is made to wait, after
    the prefill and first chunk (tokens 0..2) of each generation call one step ahead, until the trainer publishes the
    next weights: those units then mix two versions. Each such group is stamped with its oldest version
    (so its age bound holds), its tokens after the swap carry the newer version, the token age is
    below the group age, and every prompt is still trained once, in order."""
    real_generate_unit = collector_lib.Collector.generate_unit
    real_weights_from = collector_lib.Collector._weights_from
    groups_seen = []

    def generate_unit(self, start, params, version):
        self.target_for_test = start // self.prompts_per_step
        groups = real_generate_unit(self, start, params, version)
        groups_seen.extend(groups)
        return groups

    def weights_from(self, version):
        inner, calls = real_weights_from(self, version), [0]

        def weights():
            calls[0] += 1
            if calls[0] == 3 and self.target_for_test == version + 1:  # one step ahead: wait for v + 1
                with self.cond:
                    self.cond.wait_for(lambda: self.version > version or self._stopping, timeout=60)
            return inner()

        return weights

    monkeypatch.setattr(collector_lib.Collector, "generate_unit", generate_unit)
    monkeypatch.setattr(collector_lib.Collector, "_weights_from", weights_from)
    raw = async_raw(1, in_flight_weight_updates=True, in_flight_chunk_tokens=2)
    raw["rollout"] = {"max_new_tokens": 8, "stop_at_eos": False}
    hooks = Record()
    trainer = GRPOTrainer(parse_config(raw), str(tmp_path), hooks)
    result = run_bounded(trainer.run, 600)
    assert result.status == "succeeded" and result.final_step == 4
    assert [q for step in sorted(hooks.prompts) for q in hooks.prompts[step]] == stream_prompts(raw, 0, 16)
    mixed = [g for g in groups_seen if len(np.unique(g.payload.token_versions)) > 1]
    assert mixed
    for group in mixed:
        versions = group.payload.token_versions
        assert group.weight_version == versions.min()
        assert (versions[:, :3] == group.weight_version).all()  # prefill + first chunk: old weights
        assert (versions[:, 3:] == group.weight_version + 1).all()  # from the second chunk on: new ones
    assert any(m["async/token_age_mean"] < m["async/trajectory_age_mean"] for m in hooks.metrics.values())
    assert all(np.isfinite(m["is/weight_mean"]) for m in hooks.metrics.values())


@pytest.fixture
def one_step_behind(monkeypatch):
    """Max age 1, made deterministic: before the trainer takes step s's groups it waits until the
    collector has also buffered step s + 1's. Weights v + 1 are published only after step v trains,
    so step s + 1's groups are sampled by weights s (the newest then; s - 1 would be too old for
    step s + 1), and every step after the first trains groups exactly one version old: ages
    0, 1, 1, ... whatever the threads' timing."""
    real_wait = AsyncRolloutSource._wait_for_groups

    def wait(self, step):
        p = self.context.plan.prompts_per_step
        if step + 1 < self.context.config.train.max_steps:
            wanted = set(range((step + 1) * p, (step + 2) * p))
            with self.cond:
                assert self.cond.wait_for(
                    lambda: self.collector.error is not None or wanted <= set(self.buffer.buffered_prompt_indices()),
                    timeout=120,
                )
        return real_wait(self, step)

    monkeypatch.setattr(AsyncRolloutSource, "_wait_for_groups", wait)


def force_weights_of_one(batch):
    """The same update batch with every row marked on-policy: importance weights exactly 1."""
    return dict(batch, on_policy=np.ones_like(batch["on_policy"]))


@pytest.mark.parametrize("mini_batch_prompts", [2, 4], ids=["separate-pi-old-pass", "pi-old-in-update"])
def test_stale_groups_get_importance_weights_and_the_loss_uses_them(tmp_path, one_step_behind, mini_batch_prompts):
    """Max age 1, every step after the first one version behind (deterministic, see the fixture):
    the stale steps report IS weights other than 1 and each of their updates has a different loss
    from the same update with the weights forced to 1; the on-policy first step has weights of
    exactly 1 and the same loss both ways. The trained prompts are the stream's, in order, across
    epoch ends (16 prompts over a 6-prompt dataset)."""
    import jax
    import jax.numpy as jnp

    raw = async_raw(1)
    raw["batch"]["mini_batch_prompts"] = mini_batch_prompts
    hooks = Record()
    trainer = GRPOTrainer(parse_config(raw), str(tmp_path), hooks)
    trainer.skip_flat_groups = False  # every update runs its pass (an all-flat mini-batch would skip it)
    real_update, losses = trainer.update_fn, []

    def update(params, opt_state, batch, **kwargs):
        copy = lambda tree: jax.tree.map(jnp.copy, tree)  # noqa: E731 (the update donates params and state)
        _, _, forced = real_update(copy(params), copy(opt_state), force_weights_of_one(batch), **kwargs)
        params, opt_state, metrics = real_update(params, opt_state, batch, **kwargs)
        losses.append((trainer.state.step, float(metrics["loss/policy"]), float(forced["loss/policy"])))
        return params, opt_state, metrics

    trainer.update_fn = update
    result = run_bounded(trainer.run, 600)
    assert result.status == "succeeded" and result.final_step == 4
    assert [hooks.metrics[s]["async/trajectory_age_mean"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    assert hooks.metrics[1]["is/weight_max"] == 1.0
    for step in (2, 3, 4):
        assert abs(hooks.metrics[step]["is/weight_mean"] - 1.0) > 1e-4, (step, hooks.metrics[step])
    updates_per_step = 4 // mini_batch_prompts
    assert len(losses) == 4 * updates_per_step
    for step, loss, forced in losses:
        if step == 0:
            assert loss == forced, (step, loss, forced)
        else:
            assert abs(loss - forced) > 1e-7, (step, loss, forced)
    trained = [prompt for step in sorted(hooks.prompts) for prompt in hooks.prompts[step]]
    assert trained == stream_prompts(raw, 0, 16)


def test_collector_exception_fails_the_run_with_that_error_quickly(tmp_path, monkeypatch):
    class Boom(RuntimeError):
        pass

    calls = []

    def broken_score(*args, **kwargs):
        calls.append(1)
        raise Boom("reward server unreachable")

    monkeypatch.setattr(rollout_lib, "score_with_details", broken_score)
    start = time.perf_counter()
    with pytest.raises(Boom, match="reward server unreachable") as info:
        run_bounded(lambda: train(parse_config(async_raw(1)), str(tmp_path)), 300)
    assert calls and any("collector thread" in note for note in getattr(info.value, "__notes__", []))
    # Bounded by generation compile time (seconds); the trainer notices within WAIT_POLL_S of the error.
    assert time.perf_counter() - start < 300


@pytest.mark.parametrize("action, status", [(Action.STOP, "cancelled"), (Action.PAUSE, "paused")])
def test_stop_or_pause_while_waiting_ends_the_run(tmp_path, monkeypatch, action, status):
    """A collector that never delivers (stuck) does not wedge a STOP or a PAUSE: the wait polls
    Control. A PAUSE checkpoints the untouched weights with the first untrained prompt."""

    def stuck(self):
        while not self._stopping:
            time.sleep(0.05)

    monkeypatch.setattr(collector_lib.Collector, "run", stuck)

    class Soon(Control):
        def __init__(self):
            self.t0 = time.perf_counter()

        def poll(self):
            return action if time.perf_counter() - self.t0 > 1.0 else Action.CONTINUE

    result = run_bounded(lambda: train(parse_config(async_raw(1)), str(tmp_path), None, Soon()), 120)
    assert result.status == status and result.final_step == 0
    saved = sorted(os.listdir(tmp_path / "checkpoints")) if (tmp_path / "checkpoints").exists() else []
    if action is Action.PAUSE:
        assert saved == ["0"]
        with open(tmp_path / "checkpoints" / "0" / "meta" / "metadata") as f:
            assert json.load(f)["data_position"] == 0
    else:
        assert saved == []


def test_a_slow_group_delays_only_its_step(tmp_path, monkeypatch):
    """One unit takes 2 s longer to generate: the run still finishes, in data order, and the step
    that needed it reports the wait (nothing is refused or dropped for being late)."""
    original = collector_lib.Collector.generate_unit

    def slow_once(self, start, params, version):
        if start == 8:
            time.sleep(2.0)
        return original(self, start, params, version)

    monkeypatch.setattr(collector_lib.Collector, "generate_unit", slow_once)
    raw = async_raw(1)
    hooks = Record()
    result = run_bounded(lambda: train(parse_config(raw), str(tmp_path), hooks), 600)
    assert result.status == "succeeded" and result.final_step == 4
    assert [q for step in sorted(hooks.prompts) for q in hooks.prompts[step]] == stream_prompts(raw, 0, 16)
    assert hooks.metrics[3]["async/wait_s"] > 1.0
    assert all(m["async/dropped_stale"] == 0.0 for m in hooks.metrics.values())


def test_stale_groups_are_dropped_counted_and_regenerated(tmp_path, monkeypatch):
    """A collector that over-estimates the max age (3 instead of 1) and weight publishes that lag by
    0.5 s: it generates prompts 8..11 with weights v0 for step 3 (age 2 > 1). The take drops them,
    counts them in async/dropped_stale and the collector regenerates them with newer weights: every
    prompt is still trained exactly once, in order, and no trained group is older than 1."""
    real_start = AsyncRolloutSource.start
    real_copy = Placement.rollout_copy

    def start(self, params, step, data_position=None):
        real_start(self, params, step, data_position)
        self.collector.max_age_steps = 3

    def slow_copy(self, params):
        time.sleep(0.5)
        return real_copy(self, params)

    monkeypatch.setattr(AsyncRolloutSource, "start", start)
    monkeypatch.setattr(Placement, "rollout_copy", slow_copy)
    raw = async_raw(1)
    hooks = Record()
    result = run_bounded(lambda: train(parse_config(raw), str(tmp_path), hooks), 600)
    assert result.status == "succeeded" and result.final_step == 4
    assert [q for step in sorted(hooks.prompts) for q in hooks.prompts[step]] == stream_prompts(raw, 0, 16)
    assert sum(m["async/dropped_stale"] for m in hooks.metrics.values()) >= 4
    assert all(m["async/trajectory_age_mean"] <= 1.0 for m in hooks.metrics.values())


class PauseAfter(Control):
    """PAUSE once `steps` steps are done, and once the collector has groups buffered ahead (so that
    the pause really drops buffered trajectories)."""

    def __init__(self, steps):
        self.steps, self.trainer, self.buffered_at_pause = steps, None, None

    def poll(self):
        if self.trainer.state.step < self.steps:
            return Action.CONTINUE
        deadline = time.perf_counter() + 120
        while self.trainer.source.buffer.size_groups == 0 and time.perf_counter() < deadline:
            time.sleep(0.05)
        self.buffered_at_pause = self.trainer.source.buffer.buffered_prompt_indices()
        return Action.PAUSE


def test_pause_and_resume_skip_and_repeat_no_prompt(tmp_path):
    """Pause after step 2 while the collector has step 3's groups buffered (max age 1; step 4's may be
    there too, since weights v2 may generate both): the checkpoint
    holds data position 8 (first untrained prompt), the buffered groups are dropped, and the resumed
    run regenerates them: prompts trained over both runs are exactly the stream's 0..15, once each."""
    raw = async_raw(1)
    first, second = Record(), Record()
    control = PauseAfter(2)
    trainer = control.trainer = GRPOTrainer(parse_config(raw), str(tmp_path), first, control)
    result = run_bounded(trainer.run, 600)
    assert result.status == "paused" and result.final_step == 2
    # step 3's groups (and, if the collector was quick enough, step 4's), generated but never trained
    assert control.buffered_at_pause in ([8, 9, 10, 11], list(range(8, 16)))
    with open(tmp_path / "checkpoints" / "2" / "meta" / "metadata") as f:
        meta = json.load(f)
    assert meta["data_position"] == 8
    result = run_bounded(lambda: train(parse_config(raw), str(tmp_path), second), 600)
    assert result.status == "succeeded" and result.final_step == 4
    assert sorted(first.prompts) == [1, 2] and sorted(second.prompts) == [3, 4]
    trained = [q for hooks in (first, second) for step in sorted(hooks.prompts) for q in hooks.prompts[step]]
    assert trained == stream_prompts(raw, 0, 16)


def test_reward_rises_in_async_mode(tmp_path, one_step_behind):
    """The demo task in async mode (max age 1, IS correction), every step after the first training
    groups one version old (the fixture): the reward clearly rises (measured: see the assertion
    message); bounded to 80 steps."""
    config = load_config(
        "configs/demo.yaml",
        [
            "train.max_steps=80",
            "eval.every_steps=0",
            "checkpoint.every_steps=0",
            "checkpoint.keep_best_metric=null",
            "async.enabled=true",
            "async.max_trajectory_age_steps=1",
        ],
    )
    hooks = Record(8)
    run_bounded(lambda: train(config, str(tmp_path), hooks), 900)
    rewards = [hooks.metrics[s]["reward/mean"] for s in sorted(hooks.metrics)]
    ages = [hooks.metrics[s]["async/trajectory_age_mean"] for s in sorted(hooks.metrics)]
    first, last = float(np.mean(rewards[:10])), float(np.mean(rewards[-10:]))
    print(f"async learning: first 10 steps {first:.3f}, last 10 steps {last:.3f}")
    assert last >= 2 * first and last >= 0.08, (first, last)
    assert ages == [0.0] + [1.0] * (len(ages) - 1), ages  # off-policy from the second step on


TWO_DEVICES = textwrap.dedent("""
    import os, sys
    import jax
    from trainers.loop.trainer import GRPOTrainer
    from trainers.config import parse_config
    import json
    raw = json.loads(sys.argv[1])
    trainer = GRPOTrainer(parse_config(raw), sys.argv[2])
    result = trainer.run()
    leaf = jax.tree.leaves(trainer.source.collector.params)[0]
    train_leaf = jax.tree.leaves(trainer.state.params)[0]
    print("RESULT", json.dumps({"status": result.status, "digest": result.params_digest,
          "rollout": str(list(leaf.devices())[0]), "train": str(list(train_leaf.devices())[0]),
          "devices": len(jax.devices())}))
""")


@pytest.mark.production_codegen  # bit for bit the synchronous loop's parameters (tests/conftest.py)
def test_two_devices_rollout_and_training_apart(sync_run, tmp_path):
    """Generation on device 1, training on device 0 (2 host devices in a subprocess, since XLA_FLAGS
    must be set before jax starts). With max age 0 it is still exactly the synchronous update."""
    sync, _ = sync_run
    raw = {**async_raw(0), "mesh": {"train_devices": [0], "rollout_devices": [1]}}
    script = tmp_path / "two.py"
    script.write_text(TWO_DEVICES)
    env = {**os.environ, "PYTHONPATH": ROOT, "XLA_FLAGS": xla_flags_with_devices(2)}
    out = subprocess.run(
        [sys.executable, str(script), json.dumps(raw), str(tmp_path / "run")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    info = json.loads(line[len("RESULT ") :])
    assert info["devices"] == 2 and info["status"] == "succeeded"
    assert info["rollout"] != info["train"], info
    assert info["digest"] == sync.params_digest


FOUR_DEVICES = textwrap.dedent("""
    import os, sys, json, tempfile
    import jax
    import numpy as np
    from trainers.config import parse_config
    from trainers.step.hooks import Hooks
    from trainers.loop.trainer import GRPOTrainer

    class Rewards(Hooks):
        def __init__(self):
            self.by_step = {}
        def on_step(self, step, metrics):
            self.by_step[step] = (metrics["reward/mean"], metrics["loss/policy"], metrics.get("eval/reward_mean"))

    raw = json.loads(sys.argv[1])
    sync_hooks, async_hooks = Rewards(), Rewards()
    sync = GRPOTrainer(parse_config(raw), tempfile.mkdtemp(), sync_hooks)
    sync.run()
    raw["async"] = {"enabled": True, "max_trajectory_age_steps": 0}
    raw["mesh"] = {"data": 2, "train_devices": [0, 1], "rollout_devices": [2, 3]}
    trainer = GRPOTrainer(parse_config(raw), tempfile.mkdtemp(), async_hooks)
    result = trainer.run()
    diff = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
               for a, b in zip(jax.tree.leaves(sync.state.params), jax.tree.leaves(trainer.state.params)))
    ids = lambda tree: sorted({d.id for leaf in jax.tree.leaves(tree) for d in leaf.devices()})
    print("RESULT", json.dumps({"status": result.status, "max_param_diff": diff,
          "train": ids(trainer.state.params), "opt_state": ids(trainer.state.opt_state),
          "rollout": ids(trainer.source.collector.params),
          "prompts": sorted(d.id for d in trainer.source.collector.mesh.devices.flat),
          "sync": sync_hooks.by_step, "async": async_hooks.by_step}))
""")


def test_device_lists_split_generation_and_training_over_several_devices(tmp_path):
    """4 host devices: training data-parallel over [0, 1], generation split over [2, 3]. With max age
    0 the run follows the synchronous one on a single device: the same rewards every step (the
    same tokens), the same losses and final parameters up to float rounding (the gradient is summed
    across two devices); evaluation (3 prompts: not split) runs on the train devices too."""
    raw = copy.deepcopy(RAW)
    raw["train"]["max_steps"] = 3
    raw["data"]["eval_prompts"] = 3
    raw["eval"] = {"every_steps": 3}
    script = tmp_path / "four.py"
    script.write_text(FOUR_DEVICES)
    env = {**os.environ, "PYTHONPATH": ROOT, "XLA_FLAGS": xla_flags_with_devices(4)}
    out = subprocess.run(
        [sys.executable, str(script), json.dumps(raw)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    info = json.loads(line[len("RESULT ") :])
    assert info["status"] == "succeeded"
    assert info["train"] == [0, 1] and info["opt_state"] == [0, 1]
    assert info["rollout"] == [2, 3] and info["prompts"] == [2, 3]
    assert sorted(info["sync"]) == sorted(info["async"]) == ["1", "2", "3"]
    for step, (reward, loss, eval_reward) in info["sync"].items():
        async_reward, async_loss, async_eval = info["async"][step]
        assert async_reward == reward, step
        assert async_loss == pytest.approx(loss, abs=1e-6), step
        assert (async_eval is None) == (eval_reward is None) and (eval_reward is None or async_eval == eval_reward)
    assert info["max_param_diff"] < 1e-3

"""LoRA in the trainer (model.lora): only the adapters train, the base stays frozen and is never
copied into the optimizer, checkpoints hold the adapters and name their base, a run resumes exactly,
and the export folds the adapters into a Hugging Face folder that transformers loads with the logits
of the LoRA policy. Bad settings are refused at validation with the field named."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from tests.tiny_models import write_tiny_model
from trainers.config import ConfigError, parse_config
from trainers.loop.checkpoint import saved_shapes
from trainers.loop.trainer import GRPOTrainer, train

TINY = {
    "model": {"preset": "tiny", "lora": {"rank": 4, "alpha": 8.0}},
    "data": {"task": "arithmetic", "train_prompts": 64},
    "batch": {"prompts_per_step": 4},
    "grpo": {"num_generations": 4, "beta": 0.04},
    "optimizer": {"learning_rate": 0.05},
    "train": {"max_steps": 2},
    "checkpoint": {"every_steps": 1},
}


def config(base=TINY, **changes):
    raw = dict(base)
    for section, values in changes.items():
        raw[section] = {**raw.get(section, {}), **values}
    return parse_config(raw)


def _leaves(tree):
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


def test_only_the_adapters_train_and_the_optimizer_holds_nothing_else(tmp_path):
    trainer = GRPOTrainer(config(), str(tmp_path / "run"))
    base_before = _leaves(trainer.frozen_params)
    adapters_before = _leaves(trainer.state.params)
    # 2 layers x 7 projections, each A [in, 4] and B [4, out]; the tiny preset: hidden 64, 4 heads of
    # 16, 2 KV heads, MLP 256: q (64x64), k (64x32), v (64x32), o (64x64), gate, up (64x256), down (256x64)
    per_layer = sum(4 * (i + o) for i, o in ((64, 64), (64, 32), (64, 32), (64, 64), (64, 256), (64, 256), (256, 64)))
    assert sum(a.size for a in adapters_before) == 2 * per_layer
    # Adam: two moments of the adapters' size, plus a counter; nothing of the base's size
    moments = [leaf for leaf in jax.tree.leaves(trainer.state.opt_state) if np.ndim(leaf) > 0]
    assert sum(np.size(leaf) for leaf in moments) == 2 * 2 * per_layer
    trainer.run()
    for before, after in zip(base_before, _leaves(trainer.frozen_params)):
        np.testing.assert_array_equal(before, after)
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(adapters_before, _leaves(trainer.state.params)))
    assert moved > 1e-4
    # the checkpoint holds the adapters only, and names the base they were trained on
    step_dir = os.path.join(trainer.run_dir, "checkpoints", "2")
    names = saved_shapes(os.path.join(step_dir, "params"))
    assert names and all("lora" in name for name in names)
    meta = json.load(open(os.path.join(step_dir, "meta", "metadata")))
    assert meta["lora_base"] == {"model": "tiny", "digest": trainer.base_digest}


def test_the_reference_is_the_base_with_the_adapters_off(tmp_path):
    from trainers.loop.policy import initial_params, model_config_for
    from trainers.models import transformer as model_lib

    trainer = GRPOTrainer(config(), str(tmp_path / "run"))
    trainer.run()
    tokens = np.array([[1, 40, 41, 42, 43]], np.int32)
    valid = np.ones(tokens.shape, bool)
    plain = config(model={"lora": {"rank": 0}})
    base_graphdef, base = initial_params(plain, model_config_for(plain))
    want = np.asarray(model_lib.forward(base_graphdef, base, tokens, valid))
    got = np.asarray(model_lib.forward(trainer.graphdef, trainer.ref_params, tokens, valid))
    np.testing.assert_allclose(got, want, atol=1e-5)
    trained = np.asarray(model_lib.forward(trainer.graphdef, trainer.policy_params(), tokens, valid))
    assert np.max(np.abs(trained - want)) > 1e-4  # the policy itself moved


def test_a_lora_run_resumes_exactly(tmp_path):
    whole = train(config(train={"max_steps": 3}), str(tmp_path / "a"))
    train(config(train={"max_steps": 2}), str(tmp_path / "b"))
    resumed = train(config(train={"max_steps": 3}), str(tmp_path / "b"))
    assert resumed.final_step == 3 and resumed.params_digest == whole.params_digest
    adapters = saved_shapes(str(tmp_path / "b" / "checkpoints" / "3" / "params"))
    assert adapters and all("lora" in name for name in adapters)


def test_export_folds_the_adapters_in_and_transformers_gives_the_lora_logits(tmp_path):
    import torch
    import transformers

    from trainers.commands.export import export_run
    from trainers.models import transformer as model_lib

    model_dir = write_tiny_model(tmp_path / "tiny")
    with open(model_dir / "train.jsonl", "w") as f:
        for a in range(8):
            f.write(json.dumps({"prompt": f"What is {a}+{a + 1}?", "answer": str(2 * a + 1)}) + "\n")
    hf = parse_config(
        {
            "model": {"path": str(model_dir), "lora": {"rank": 4, "alpha": 8.0}},
            "data": {"train_path": str(model_dir / "train.jsonl"), "max_prompt_tokens": 48},
            "rewards": [{"name": "exact_match", "weight": 1.0}],
            "rollout": {"max_new_tokens": 6},
            "batch": {"prompts_per_step": 2},
            "grpo": {"num_generations": 4, "beta": 0.0},
            "optimizer": {"learning_rate": 0.05},
        }
    )
    trainer = GRPOTrainer(hf, str(tmp_path / "run"))
    trainer.source.start(trainer.policy_params(), 0, 0)
    rollout = trainer.source.next(0)
    trainer.source.stop()
    # A random tiny model never answers right: give the groups made-up rewards so the adapters move.
    rollout.rewards = np.array([1, 0, 0, 0, 0, 1, 1, 0], np.float32)
    rollout.advantages = np.array([1.5, -0.5, -0.5, -0.5, -1, 1, 1, -1], np.float32)
    trainer.train_on(rollout)
    trainer.state.step = 1
    trainer.save_checkpoint()
    trainer.checkpointer.close()
    out, step = export_run(trainer.run_dir, str(tmp_path / "export"), config=hf)
    assert step == 1
    tokens = np.array([[1, 40, 41, 42, 43, 44, 45]], np.int32)
    ours = np.asarray(model_lib.forward(trainer.graphdef, trainer.policy_params(), tokens, np.ones(tokens.shape, bool)))
    reference = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = reference(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    assert np.max(np.abs(ours - theirs)) <= 1e-4
    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        untrained = base(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    assert np.max(np.abs(untrained - theirs)) > 1e-4  # the adapters are in the export


@pytest.mark.parametrize(
    "lora, field",
    [
        ({"rank": 4, "target_modules": "blocks/0/attn/nothing"}, "model.lora.target_modules"),
        ({"rank": 4, "target_modules": "blocks/(0"}, "model.lora.target_modules"),
        ({"rank": 64}, "model.lora.rank"),  # the tiny preset's k and v projections are 64 x 32
        ({"rank": 4, "dropout": 0.1}, "model.lora.dropout"),
    ],
)
def test_bad_lora_settings_are_refused_with_the_field_named(lora, field):
    with pytest.raises(ConfigError) as error:
        parse_config({"model": {"preset": "tiny", "lora": lora}})
    assert field in str(error.value)


def test_the_memory_estimate_counts_the_optimizer_and_gradients_of_the_adapters_only():
    from trainers.loop.memory_estimate import step_memory
    from trainers.step.plan import make_plan

    lora, full = config(), config(model={"lora": {"rank": 0}})
    per_layer = sum(4 * (i + o) for i, o in ((64, 64), (64, 32), (64, 32), (64, 64), (64, 256), (64, 256), (256, 64)))
    parts = {p.name: p.bytes for p in step_memory(lora, make_plan(lora)).held}
    full_parts = {p.name: p.bytes for p in step_memory(full, make_plan(full)).held}
    assert parts["optimizer state"] == 2 * 4 * 2 * per_layer  # Adam's 2 moments of float32 adapters
    assert parts["reference model"] == 4 * 2 * per_layer
    assert parts["parameters"] == full_parts["parameters"] + 4 * 2 * per_layer


def test_lora_on_a_mesh_trains_like_one_device(tmp_path):
    """fsdp 2 x tensor 2: the adapters are split like their kernels and the step lands where the
    one-device step lands."""
    one = GRPOTrainer(config(train={"max_steps": 1}), str(tmp_path / "one"))
    one.run()
    mesh = GRPOTrainer(config(train={"max_steps": 1}, mesh={"fsdp": 2, "tensor": 2}), str(tmp_path / "mesh"))
    mesh.run()
    assert len(jax.tree.leaves(mesh.state.params)[0].sharding.device_set) == 4
    for a, b in zip(_leaves(one.state.params), _leaves(mesh.state.params)):
        np.testing.assert_allclose(a, b, atol=2e-5)

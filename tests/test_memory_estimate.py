"""The memory estimate of one step (trainers.loop.memory_estimate) against values worked out by hand
from its documented parts, and `validate` printing it. No JAX is loaded."""

import json
import os
import subprocess
import sys

from trainers.config import ExperimentConfig, parse_config
from trainers.config.schema import OptimizerSection
from trainers.loop.memory_estimate import (
    GIB,
    RUNTIME_BYTES,
    estimate_step_memory,
    layer_elements,
    optimizer_moments,
    step_memory,
)
from trainers.loop.plan import make_plan
from trainers.models.presets import PRESETS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = PRESETS["tiny"]  # vocab 128, 2 layers, hidden 64, MLP 256, 4 heads of 16, 2 KV heads, untied head

# The tiny preset by hand: per layer q/k/v/o 64*(4+2+2)*16 + 4*16*64 = 12288, q/k norms 32, MLP
# 3*64*256 = 49152, two norms 128 -> 61600; x 2 layers + embedding 8192 + final norm 64 + head 8192.
TINY_PARAMETERS = 2 * 61600 + 8192 + 64 + 8192  # 139648
P_BYTES = 4 * TINY_PARAMETERS


def plan_of(**sections):
    raw = {"model": {"preset": "tiny"}, "data": {"task": "arithmetic", "max_prompt_tokens": 12},
           "rollout": {"max_new_tokens": 4}, "batch": {"prompts_per_step": 4, "train_micro_batch_sequences": 8,
                                                        "rollout_micro_batch_sequences": 8,
                                                        "logprob_micro_batch_sequences": 4},
           "grpo": {"num_generations": 4, "beta": 0.04}}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    config = parse_config(raw)
    return config, make_plan(config)


def test_layer_elements_by_hand():
    # 5 H + 3 (NH + KVH) D + 4 M + 4 NH S = 320 + 288 + 1024 + 16 S
    assert layer_elements(TINY, 16) == 1632 + 16 * 16
    assert layer_elements(TINY, 12) == 1632 + 16 * 12


def test_optimizer_moments():
    assert optimizer_moments(OptimizerSection(name="adamw")) == 2
    assert optimizer_moments(OptimizerSection(name="adam")) == 2
    assert optimizer_moments(OptimizerSection(name="sgd", b1=0.9)) == 1
    assert optimizer_moments(OptimizerSection(name="sgd", b1=0.0)) == 0


def test_every_part_of_a_tiny_step_by_hand():
    """16 sequences of 12 + 4 tokens (S = 16); train micro-batch 8 (accumulation 2), rollout 8 (2
    distinct prompts of G 4), log-prob 4; Adam; beta > 0 (a reference model)."""
    config, plan = plan_of()
    assert (plan.sequences_per_step, plan.tokens_per_step, plan.accumulation_steps) == (16, 16 * 16, 2)
    memory = estimate_step_memory(plan, TINY, optimizer_moments(config.optimizer))
    held = {p.name: p.bytes for p in memory.held}
    assert held == {"parameters": P_BYTES, "optimizer state": 2 * P_BYTES, "reference model": P_BYTES,
                    "step arrays": 16 * (12 * 5 + 4 * 25), "runtime": RUNTIME_BYTES}
    phases = {p.name: p.bytes for p in memory.phases}
    kv_cache = 2 * 2 * 8 * 2 * 16 * 16 * 4          # K and V x layers x rows x KV heads x head dim x S x float32
    prefill = 2 * 12 * (1632 + 16 * 12) * 4          # 2 distinct prompts x 12 positions x one layer
    sampler = 5 * 8 * 128 * 4                        # 5 [rows, V] float32 buffers
    assert phases["rollout"] == kv_cache + prefill + sampler == 261120
    logprob_positions = 4 * 16
    assert phases["log-prob"] == logprob_positions * (1632 + 256) * 4 + 4 * 64 * 128 * 4  # + 4 chunks of 64 x V
    update_positions = 8 * 16
    gradients = 2 * P_BYTES                          # with accumulation: the running sum and the micro-batch's
    activations = update_positions * 2 * (1632 + 256) * 4
    assert phases["update"] == gradients + activations + 4 * 128 * 128 * 4
    assert [p.name for p in memory.peak_phases] == ["update"]
    assert memory.total_bytes == P_BYTES * 4 + 2560 + RUNTIME_BYTES + phases["update"] == 1079291392
    assert memory.fields_to_lower() == ("batch.train_micro_batch_sequences", "rollout.max_new_tokens",
                                        "data.max_prompt_tokens")  # runtime (largest) names no field


def test_what_changes_the_estimate():
    _, plan = plan_of()
    base = estimate_step_memory(plan, TINY, 2)
    parts = lambda memory: {p.name: p.bytes for p in memory.held + memory.phases}  # noqa: E731
    # no reference model without a KL term; no log-prob pass either (mu = 1, one mini-batch)
    _, no_kl = plan_of(grpo={"beta": 0.0})
    assert "reference model" not in parts(estimate_step_memory(no_kl, TINY, 2))
    assert "log-prob" not in parts(estimate_step_memory(no_kl, TINY, 2))
    # SGD without momentum keeps no optimizer state
    assert parts(estimate_step_memory(plan, TINY, 0))["optimizer state"] == 0
    # bfloat16 halves the KV cache only
    bf16 = estimate_step_memory(plan, PRESETS["tiny"].__class__(**{**TINY.__dict__, "dtype": "bfloat16"}), 2)
    assert parts(base)["rollout"] - parts(bf16)["rollout"] == 2 * 2 * 8 * 2 * 16 * 16 * 2
    # async: the collector's weights, and generation adds to the largest other phase
    concurrent = estimate_step_memory(plan, TINY, 2, concurrent_rollout=True)
    assert [p.name for p in concurrent.peak_phases] == ["rollout", "update"]
    assert concurrent.total_bytes == base.total_bytes + P_BYTES + parts(base)["rollout"]


def test_the_issues_probe_is_far_over_any_machine():
    """4096 prompts x G 256 x 8192 completion tokens on qwen3-0.6b (the issue): petabytes of activations."""
    config = parse_config({"model": {"preset": "qwen3-0.6b"}, "batch": {"prompts_per_step": 4096},
                           "grpo": {"num_generations": 256}, "rollout": {"max_new_tokens": 8192}})
    memory = step_memory(config, make_plan(config))
    assert memory.total_bytes > 10**6 * GIB
    assert memory.largest_parts()[0].name == "update"


def test_a_model_folder_gives_the_shape(tmp_path):
    """model.path: the shape comes from the folder's config.json (no weights are read)."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 128, "num_hidden_layers": 2, "hidden_size": 64,
        "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "tie_word_embeddings": False}))
    (folder / "model.safetensors").write_bytes(b"")
    config = ExperimentConfig.model_validate({"model": {"path": str(folder)}})  # the schema only: no tokenizer here
    from_folder = step_memory(config, make_plan(config))
    # the tiny preset's shape without the q/k norms (Llama): 2 x 32 fewer parameters
    assert from_folder.held[0].bytes == 4 * (TINY_PARAMETERS - 64)


def test_validate_prints_tokens_per_step_and_the_estimate():
    out = subprocess.run([sys.executable, "-m", "trainers", "validate", "configs/demo.yaml"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert "tokens per step (at most)     8960  (128 sequences x (64 prompt + 6 completion tokens))" in out.stdout
    assert "Memory of a step (estimate)     1.20 GiB" in out.stdout
    assert "  update phase                  0.20 GiB" in out.stdout

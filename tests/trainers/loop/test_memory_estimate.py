"""The memory estimate of one step (trainers.loop.memory_estimate) against values worked out by hand
from its documented parts, and `validate` printing it. No JAX is loaded."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT
from trainers.config import ExperimentConfig, parse_config
from trainers.config.schema import OptimizerSection
from trainers.loop.memory_estimate import (
    GIB,
    RUNTIME_BYTES,
    estimate_step_memory,
    forward_elements,
    layer_elements,
    optimizer_moments,
    step_memory,
)
from trainers.models.presets import PRESETS
from trainers.step.plan import make_plan

TINY = PRESETS["tiny"]  # vocab 128, 2 layers, hidden 64, MLP 256, 4 heads of 16, 2 KV heads, untied head

# The tiny preset by hand: per layer q/k/v/o 64*(4+2+2)*16 + 4*16*64 = 12288, q/k norms 32, MLP
# 3*64*256 = 49152, two norms 128 -> 61600; x 2 layers + embedding 8192 + final norm 64 + head 8192.
TINY_PARAMETERS = 2 * 61600 + 8192 + 64 + 8192  # 139648
P_BYTES = 4 * TINY_PARAMETERS


def plan_of(**sections):
    raw = {
        "model": {"preset": "tiny"},
        "data": {"task": "arithmetic", "max_prompt_tokens": 12},
        "rollout": {"max_new_tokens": 4},
        "batch": {
            "prompts_per_step": 4,
            "train_micro_batch_sequences": 8,
            "rollout_micro_batch_sequences": 8,
            "logprob_micro_batch_sequences": 4,
        },
        "grpo": {"num_generations": 4, "beta": 0.04},
    }
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


def test_forward_elements_by_hand():
    """8 rows of 12 + 4 tokens. Whole: 8 x 16 positions over S = 16. In groups of 4: 2 prompts of 12
    positions over S = 12, 8 completions of 4 positions over S = 16, and the prompts' keys and values
    repeated for the 8 rows (8 x 12 x 2 x KV heads 2 x head dim 16)."""
    assert forward_elements(TINY, 8, 1, 12, 4) == 8 * 16 * (1632 + 16 * 16) == 241664
    assert forward_elements(TINY, 8, 4, 12, 4) == 2 * 12 * (1632 + 16 * 12) + 8 * 4 * (1632 + 16 * 16) + 8 * 12 * 64
    assert forward_elements(TINY, 6, 4, 12, 4) == forward_elements(TINY, 6, 1, 12, 4)  # 6 rows split a group: whole


def test_every_part_of_a_tiny_step_by_hand():
    """16 sequences of 12 + 4 tokens (S = 16); train micro-batch 8 (accumulation 2), rollout 8 (2
    distinct prompts of G 4), log-prob 4; Adam; beta > 0 (a reference model). Micro-batches of whole
    groups of 4: prompts run once per group."""
    config, plan = plan_of()
    assert (plan.sequences_per_step, plan.tokens_per_step, plan.accumulation_steps) == (16, 16 * 16, 2)
    memory = estimate_step_memory(plan, TINY, optimizer_moments(config.optimizer))
    held = {p.name: p.bytes for p in memory.held}
    assert held == {
        "parameters": P_BYTES,
        "optimizer state": 2 * P_BYTES,
        "reference model": P_BYTES,
        "step arrays": 16 * (12 * 5 + 4 * 25),
        "runtime": RUNTIME_BYTES + P_BYTES,
    }
    phases = {p.name: p.bytes for p in memory.phases}
    pages = 2 * 2 * 8 * 2 * 16 * 16 * 4  # K and V x layers x slots x KV heads x head dim x S (one page) x float32
    view = 2 * 2 * 8 * 2 * 16 * (16 + 16) * 4  # the CPU's dense view: S + a chunk of 16 positions
    prefill = 2 * 12 * (1632 + 16 * 12) * 4  # 2 distinct prompts x 12 positions x one layer
    sampler = 5 * 8 * 128 * 4  # 5 [rows, V] float32 buffers
    assert phases["rollout"] == pages + view + prefill + sampler == 392192
    # log-prob: 1 prompt x 12 positions (S 12) + 4 completions x 4 (S 16) + 4 x 12 repeated K/V pairs, one
    # layer; the LM head on 16 completion positions: 4 buffers of 16 x V
    assert phases["log-prob"] == (12 * 1824 + 16 * 1888 + 4 * 12 * 64) * 4 + 4 * 16 * 128 * 4 == 253440
    gradients = 2 * P_BYTES  # with accumulation: the running sum and the micro-batch's
    activations = 2 * (2 * 12 * 1824 + 32 * 1888 + 8 * 12 * 64) * 4  # 2 layers
    assert phases["update"] == gradients + activations + 4 * 32 * 128 * 4
    # every phase adds: the process keeps each one's buffers once it has run
    assert memory.total_bytes == P_BYTES * 5 + 2560 + RUNTIME_BYTES + 392192 + 253440 + phases["update"]
    assert memory.total_bytes == 800 * 2**20 + 5 * 558592 + 2560 + 392192 + 253440 + 2 * 558592 + 882688 + 65536
    assert memory.prompt_tokens == 12 and not memory.from_data
    assert memory.fields_to_lower() == (
        "batch.train_micro_batch_sequences",
        "rollout.max_new_tokens",
        "data.max_prompt_tokens",
    )  # runtime (largest) names no field


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
    # bfloat16 halves the KV pages and the CPU's dense view of them only (16 + 32 positions a slot)
    bf16 = estimate_step_memory(plan, PRESETS["tiny"].__class__(**{**TINY.__dict__, "dtype": "bfloat16"}), 2)
    assert parts(base)["rollout"] - parts(bf16)["rollout"] == 2 * 2 * 8 * 2 * 16 * (16 + 32) * 2
    # more decode slots than the rollout micro-batch: pages and view for each
    slots = estimate_step_memory(plan, TINY, 2, decode_slots=16)
    assert parts(slots)["rollout"] - parts(base)["rollout"] == (
        2 * 2 * 8 * 2 * 16 * (16 + 32) * 4 + 2 * 12 * (1632 + 16 * 12) * 4 + 5 * 8 * 128 * 4
    )
    # prompts of 12 prefilled in pieces of 4: a piece's 4 positions of each of 2 prompts, over 12 keys
    pieces = estimate_step_memory(plan, TINY, 2, prefill_chunk_tokens=4)
    assert parts(base)["rollout"] - parts(pieces)["rollout"] == 2 * (12 - 4) * (1632 + 16 * 12) * 4
    assert parts(estimate_step_memory(plan, TINY, 2, prefill_chunk_tokens=12)) == parts(base)  # no longer than one
    # async: the collector's weights (generation already counts: every phase adds)
    concurrent = estimate_step_memory(plan, TINY, 2, concurrent_rollout=True)
    assert concurrent.total_bytes == base.total_bytes + P_BYTES
    # packed log-prob micro-batches of 64 positions (rows of at most 12 + 4): one layer over 64
    # positions of S 16, larger than the padded micro-batch's 222720 bytes, and the LM head's 4
    # buffers over 64 positions
    _, by_tokens = plan_of(batch={"logprob_micro_batch_tokens": 64})
    logprob = next(p for p in estimate_step_memory(by_tokens, TINY, 2).phases if p.name == "log-prob")
    assert logprob.bytes == 64 * 1888 * 4 + 4 * 64 * 128 * 4 == 614400
    assert "batch.logprob_micro_batch_tokens" in logprob.lower
    # a train micro-batch that splits a group (4 rows of G 3) runs whole sequences: 4 x 16 positions a layer
    _, split = plan_of(
        batch={"train_micro_batch_sequences": 4, "rollout_micro_batch_sequences": 12}, grpo={"num_generations": 3}
    )
    assert parts(estimate_step_memory(split, TINY, 2))["update"] == (
        2 * P_BYTES + 2 * 4 * 16 * (1632 + 16 * 16) * 4 + 4 * 16 * 128 * 4
    )


def test_the_prompt_width_is_the_datas_longest_prompt_when_known():
    """prompt_tokens narrows every part that counts prompt positions, and never widens past the budget."""
    _, plan = plan_of()
    budget = estimate_step_memory(plan, TINY, 2)
    narrow = estimate_step_memory(plan, TINY, 2, prompt_tokens=4)
    parts = lambda memory: {p.name: p.bytes for p in memory.held + memory.phases}  # noqa: E731
    assert (narrow.prompt_tokens, narrow.from_data) == (4, True)
    assert parts(narrow)["step arrays"] == 16 * (4 * 5 + 4 * 25)
    # S = 4 + 4: one page of 16 positions a slot, and a view of S + a chunk of 16
    assert parts(narrow)["rollout"] == (
        2 * 2 * 8 * 2 * 16 * (16 + 24) * 4 + 2 * 4 * (1632 + 16 * 4) * 4 + 5 * 8 * 128 * 4
    )
    assert parts(narrow)["update"] < parts(budget)["update"]
    assert estimate_step_memory(plan, TINY, 2, prompt_tokens=500).total_bytes == budget.total_bytes
    # step_memory rounds the data's longest prompt up to the run's bucket: exact for a preset's tokenizer
    config, plan = plan_of()
    assert step_memory(config, plan, 5).prompt_tokens == 5
    assert step_memory(config, plan).prompt_tokens == 12


def test_the_issues_probe_is_far_over_any_machine():
    """4096 prompts x G 256 x 8192 completion tokens on qwen3-0.6b (the compute-cap probe): petabytes of activations."""
    config = parse_config(
        {
            "model": {"preset": "qwen3-0.6b"},
            "batch": {"prompts_per_step": 4096},
            "grpo": {"num_generations": 256},
            "rollout": {"max_new_tokens": 8192},
        }
    )
    memory = step_memory(config, make_plan(config))
    assert memory.total_bytes > 10**6 * GIB
    assert memory.largest_parts()[0].name == "update"


def test_a_model_folder_gives_the_shape(tmp_path):
    """model.path: the shape comes from the folder's config.json (no weights are read)."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "vocab_size": 128,
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "intermediate_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "tie_word_embeddings": False,
            }
        )
    )
    (folder / "model.safetensors").write_bytes(b"")
    config = ExperimentConfig.model_validate({"model": {"path": str(folder)}})  # the schema only: no tokenizer here
    from_folder = step_memory(config, make_plan(config))
    # the tiny preset's shape without the q/k norms (Llama): 2 x 32 fewer parameters
    assert from_folder.held[0].bytes == 4 * (TINY_PARAMETERS - 64)


def test_validate_prints_tokens_per_step_and_the_estimate():
    out = subprocess.run(
        [sys.executable, "-m", "trainers", "validate", "configs/demo.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert out.returncode == 0, out.stderr
    assert "tokens per step (at most)     8960  (128 sequences x (64 prompt + 6 completion tokens))" in out.stdout
    # its one train micro-batch: 128 x (64 + 6)
    assert "train micro-batch             128 sequences  (at most 8960 token positions)" in out.stdout
    # the arithmetic task's longest prompt is 7 tokens (BOS + "12+34=" at most), not the 64-token budget
    assert (
        "Memory of a step (estimate)     0.80 GiB  (prompts of 7 tokens: the data's longest prompt, bucketed)"
        in out.stdout
    )
    assert "  update phase                  0.01 GiB" in out.stdout


def test_the_estimate_is_within_1_to_1_3_of_the_measured_peaks(smollm2_dir):
    """The estimate `validate` prints against the peak RSS measured by bench/memory_estimate.py
    (docs/perf/memory-peaks.json: a first run of each config, compiling every program, 3 steps, no
    checkpoint, no evaluation). Over 1.3 refuses runs a worker could hold (2.2x refused the
    SmolLM2 demo on a 12-15 GiB machine); under 1.0 lets a run start that a worker cannot hold. The
    SmolLM2 configs read the model from the test fixture's folder (the same model)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import memory_estimate as bench  # noqa: E402

    with open(bench.PEAKS_FILE, encoding="utf-8") as f:
        peaks = json.load(f)["peak_rss_bytes"]
    assert set(peaks) >= {"demo", "w1", "smollm2-arith", "r1"}
    for name, peak in peaks.items():
        path = os.path.join(ROOT, "configs", f"{name}.yaml")
        pretrained = "model:\n  path:" in open(path, encoding="utf-8").read()
        overrides = (f"model.path={smollm2_dir}",) if pretrained else ()
        ratio = bench.estimate_of(path, overrides).total_bytes / peak
        assert bench.BAND[0] <= ratio < bench.BAND[1], f"{name}: estimate / measured peak {ratio:.3f}"

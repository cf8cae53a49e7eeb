"""The benchmark scripts' pure helpers (bench/): the Tunix harness's result parsing and peak-memory
measure, R1's ratios and prompt file, the real-model bench's compile counter and memory figures, and
the tiny Llama folder for smoke tests. Fast; no Tunix, no timing asserted."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

from tests.conftest import ROOT

BENCH = os.path.join(ROOT, "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import compare_tunix_real  # noqa: E402
import grpo_step  # noqa: E402
import make_tiny_llama  # noqa: E402
import real_model  # noqa: E402
import tunix_harness  # noqa: E402
import tunix_r1  # noqa: E402


def test_last_json_with_takes_the_last_object_with_the_key():
    lines = [
        '{"seconds_per_step": 1}\n',
        "noise {not json}\n",
        '{"other": 2}\n',
        '{"seconds_per_step": 3, "x": 1}\n',
        "seconds_per_step=3\n",
    ]
    assert tunix_harness.last_json_with(lines, "seconds_per_step") == {"seconds_per_step": 3, "x": 1}
    assert tunix_harness.last_json_with(lines, "other") == {"other": 2}
    assert tunix_harness.last_json_with(lines, "missing") is None


def test_run_and_parse_reports_the_childs_peak_rss(capsys):
    # The child touches 200 MiB and frees it before printing: the peak is what it held, not what it ends with.
    code = "import json; b = bytearray(200 * 2**20); del b; print(json.dumps({'seconds_per_step': 0.5}))"
    result, error = tunix_harness.run_and_parse("child", [sys.executable, "-c", code], timeout=60)
    assert error == ""
    assert result["seconds_per_step"] == 0.5
    assert result["peak_rss_bytes"] >= 200 * 2**20
    assert "[child] exited 0" in capsys.readouterr().out


def test_run_and_parse_says_why_there_is_no_result():
    result, error = tunix_harness.run_and_parse("child", [sys.executable, "-c", "raise SystemExit(4)"], timeout=60)
    assert result is None and "exit status 4" in error


def test_ratios_are_ours_over_tunix_against_one_half():
    ours = {"seconds_per_step": 1.0, "peak_rss_bytes": 3e9}
    tunix = {"seconds_per_step": 4.0, "peak_rss_bytes": 4e9}
    r = compare_tunix_real.ratios(ours, tunix)
    assert r == {"time_ratio": 0.25, "time_target_met": True, "memory_ratio": 0.75, "memory_target_met": False}
    assert compare_tunix_real.ratios(None, tunix)["time_ratio"] is None


def test_r1_settings_come_from_the_config(tmp_path):
    folder = make_tiny_llama.write_tiny_llama(str(tmp_path / "tiny"), source=_tiny_source(tmp_path))
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        s = compare_tunix_real.r1_settings("configs/r1.yaml", folder)
    finally:
        os.chdir(cwd)
    assert s == {
        "model": folder,
        "data": "bench/r1_prompts.jsonl",
        "prompts": 8,
        "generations": 4,
        "prompt_len": 48,
        "gen_len": 64,
        "beta": 0.04,
        "temperature": 1.0,
    }
    cmd = compare_tunix_real.tunix_command("py", s, 6)
    assert cmd[cmd.index("--prompt-len") + 1] == "48" and cmd[cmd.index("--model") + 1] == folder


def test_pad_id_is_the_highest_free_special_token():
    specials = {0: "<|endoftext|>", 1: "<|im_start|>", 16: "<empty_output>", 15: "<jupyter_script>"}
    assert tunix_r1.choose_pad_id([[1, 5, 2], [1, 16, 2]], specials) == 15
    with pytest.raises(SystemExit):
        tunix_r1.choose_pad_id([[0, 1]], {0: "a", 1: "b"})


def test_memory_modes_and_figures():
    assert real_model.parse_mode("float32") == ("float32", False)
    assert real_model.parse_mode("bfloat16+remat") == ("bfloat16", True)
    with pytest.raises(ValueError):
        real_model.parse_mode("float16")
    stats = types.SimpleNamespace(
        temp_size_in_bytes=2**30, argument_size_in_bytes=2**29, output_size_in_bytes=2**29, alias_size_in_bytes=2**28
    )
    m = real_model.memory_figures(stats)
    assert m["total_gib"] == pytest.approx(1.75)
    assert m["alias_gib"] == pytest.approx(0.25)


def test_compile_counter_counts_compiles_only_while_active():
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda x: x * 3 + 1)
    three, five, seven = jnp.ones(3), jnp.ones(5), jnp.ones(7)
    with real_model.CompileCounter() as counter:
        f(three)  # inactive: not counted
        counter.active = True
        f(three)  # cached: no compile
        f(five)  # a new shape: one compile
        counter.active = False
    assert counter.compiles == ["jit(<lambda>)"] and len(counter.traces) == 1
    counter.active = True
    f(seven)  # after exit: the listener is gone
    assert len(counter.compiles) == 1


def _tiny_source(tmp_path):
    from tests.tiny_models import write_tiny_model

    return str(write_tiny_model(tmp_path / "source"))


def test_tiny_llama_loads_with_the_source_tokenizer(tmp_path):
    from trainers.data.hf_tokenizer import HFTokenizer
    from trainers.models.hf_config import read_model_config
    from trainers.models.hf_weights import load_pretrained

    source = _tiny_source(tmp_path)
    folder = make_tiny_llama.write_tiny_llama(str(tmp_path / "tiny"), source=source)
    cfg = read_model_config(folder)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (2, 64, 4, 2, 16)
    with open(os.path.join(source, "config.json")) as f:
        assert cfg.vocab_size == json.load(f)["vocab_size"]
    load_pretrained(folder, cfg, progress=False)  # every tensor named and shaped as the loader expects
    assert HFTokenizer.from_folder(folder).vocab_size == HFTokenizer.from_folder(source).vocab_size


def test_r1_prompts_are_44_to_48_chatml_tokens_without_the_pad_id(smollm2_dir):
    from trainers.data.hf_tokenizer import HFTokenizer

    tokenizer = HFTokenizer.from_folder(smollm2_dir)
    with open(os.path.join(BENCH, "r1_prompts.jsonl")) as f:
        prompts = [json.loads(line)["prompt"] for line in f if line.strip()]
    ids = [tokenizer.encode_prompt(p, chat=True) for p in prompts]
    assert len(ids) >= 8
    assert all(44 <= len(i) <= 48 for i in ids)
    assert not any(16 in i for i in ids)  # tunix_r1's pad id for SmolLM2 (<empty_output>)


# A model small enough to count by hand: per layer, attention 4x(2+2)x2 + 2x2x4 = 48 matmul parameters and
# MLP 3x4x8 = 96, so 2 x 144 = 288 FLOPs a token; attention 1 layer x 4 x 2 heads x 2 = 16 FLOPs per
# context position; LM head 2 x 4 x 10 = 80 FLOPs a position.
HAND = dict(vocab_size=10, num_layers=1, hidden_size=4, mlp_size=8, num_heads=2, head_dim=2, num_kv_heads=1)


def test_layer_and_lm_head_flops_by_hand():
    from trainers.models.presets import ModelConfig
    from trainers.models.transformer import forward_flops_per_token

    cfg = ModelConfig(**HAND)
    assert grpo_step.layer_flops(cfg, 0, 3) == 288 * 3 + 16 * (1 + 2 + 3)  # 960
    assert grpo_step.layer_flops(cfg, 3, 2) == 288 * 2 + 16 * (4 + 5)  # 720
    assert grpo_step.lm_head_flops(cfg, 3) == 240
    for t in (0, 5, 17):  # one position with the LM head is the model's whole-token count
        assert grpo_step.layer_flops(cfg, t, 1) + grpo_step.lm_head_flops(cfg, 1) == forward_flops_per_token(cfg, t + 1)


def test_generation_and_logprob_flops_share_prefills_and_run_the_lm_head_where_it_runs():
    from trainers.models.presets import ModelConfig

    cfg = ModelConfig(**HAND)
    # 4 sequences of 2 prompts (group 2), 3 prompt + 3 completion tokens.
    # Generation: 2 prefills of 3 positions (960) + the LM head at their last position (80); then decode
    # steps 1 and 2 feed tokens 0 and 1 at positions 3 and 4 (720) with the LM head (160), for 4 rows.
    assert grpo_step.generation_flops(cfg, 4, 2, 3, 3) == 2 * (960 + 80) + 4 * (720 + 160)  # 5600
    assert grpo_step.generation_flops(cfg, 4, 1, 3, 3) == 4 * (960 + 80) + 4 * (720 + 160)
    # Log-prob pass: 2 prompts (960 each), 4 rows of completion positions 3..5 (288 x 3 + 16 x (4+5+6) = 1104)
    # and the LM head at 3 positions a row (240).
    assert grpo_step.logprob_pass_flops(cfg, 4, 2, 3, 3) == 2 * 960 + 4 * (1104 + 240)  # 7296
    assert grpo_step.logprob_pass_flops(cfg, 4, 1, 3, 3) == 4 * 960 + 4 * (1104 + 240)


def test_w1_step_flops_count_shared_prefills_once():
    """W1 (8 prompts x G=4, 32 + 64 tokens, beta 0.04, mu 1) executes about 96 GFLOP a
    step, not the 127.9 counted with one prefill per completion and the LM head at every position."""
    from trainers.config import load_config
    from trainers.loop.policy import model_config_for
    from trainers.step.plan import make_plan

    config = load_config(os.path.join(ROOT, "configs", "w1.yaml"), [])
    plan, cfg = make_plan(config, 1024), model_config_for(config)
    flops = grpo_step.step_model_flops(cfg, plan, 32, 64, generation_group=4, logprob_group=4, update_group=4)
    # By hand (per token: layers 2 x 3,932,160 = 7,864,320, LM head 2 x 256 x 512 = 262,144; attention
    # 4 layers x 4 x 4 heads x 64 = 4,096 per context position):
    prefill = 32 * 7_864_320 + 4_096 * (32 * 33 // 2)  # one prompt, positions 0..31
    decode = 63 * (7_864_320 + 262_144) + 4_096 * sum(range(33, 96))  # positions 32..94 (tokens 0..62 fed)
    completion = 64 * (7_864_320 + 262_144) + 4_096 * sum(range(33, 97))  # positions 32..95, LM head at 64
    assert flops["generation"] == 8 * (prefill + 262_144) + 32 * decode
    assert flops["reference_logprobs"] == 8 * prefill + 32 * completion
    assert flops["train"] == 3 * flops["reference_logprobs"]
    assert flops["old_logprobs"] == 0.0
    assert sum(flops.values()) / 1e9 == pytest.approx(95.80, abs=0.01)
    # Flat groups skipped: only the trained fraction goes through the update.
    half = grpo_step.step_model_flops(
        cfg, plan, 32, 64, generation_group=4, logprob_group=4, update_group=4, trained_fraction=0.5
    )
    assert half["train"] == flops["train"] / 2


def test_peak_flops_takes_a_known_accelerators_datasheet_figure():
    h100 = types.SimpleNamespace(device_kind="NVIDIA H100 80GB HBM3")
    assert grpo_step.peak_flops(h100, "bfloat16") == (989e12, "H100 bfloat16 dense datasheet peak")


def test_scale_device_counts_batch_and_ratios():
    import scale

    assert scale.device_counts([1, 2, 4, 8], 4) == [1, 2, 4]
    assert scale.device_counts([8, 2], 1) == []
    batch = scale.synthetic_batch(8, 4, 3, 5, vocab=50)
    assert batch["prompt_tokens"].shape == (1, 8, 3) and batch["completion_tokens"].shape == (1, 8, 5)
    prompts = batch["prompt_tokens"][0]
    assert (prompts[:4] == prompts[0]).all() and (prompts[4:] == prompts[4]).all()  # whole groups of 4
    assert batch["weights"].sum() == pytest.approx(1.0)  # token-mean over the 40 completion tokens
    with pytest.raises(ValueError):
        scale.synthetic_batch(6, 4, 3, 5, vocab=50)
    rows = [
        {
            "devices": 1,
            "tokens_per_s": 100.0,
            "gflops_per_step": 2.0,
            "step_s": 1.0,
            "compiled_bytes": 80,
            "state_bytes_per_device": 64,
        },
        {
            "devices": 4,
            "tokens_per_s": 300.0,
            "gflops_per_step": 6.0,
            "step_s": 1.0,
            "compiled_bytes": 40,
            "state_bytes_per_device": 16,
        },
    ]
    accelerator = scale.with_ratios(rows, peak=10e9, peak_scales=True)
    assert accelerator[1]["speedup"] == 3.0 and accelerator[1]["efficiency"] == 0.75
    assert accelerator[1]["mfu"] == pytest.approx(6.0 / 40)  # 6 GFLOP in 1 s on 4 x 10 GFLOP/s
    assert accelerator[1]["compiled_bytes_ratio"] == 0.5 and accelerator[1]["state_bytes_ratio"] == 0.25
    cpu = scale.with_ratios(rows, peak=10e9, peak_scales=False)  # host devices share one machine's peak
    assert cpu[1]["mfu"] == pytest.approx(0.6) and cpu[0]["mfu"] == pytest.approx(0.2)

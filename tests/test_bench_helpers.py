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
import make_tiny_llama  # noqa: E402
import real_model  # noqa: E402
import tunix_harness  # noqa: E402
import tunix_r1  # noqa: E402


def test_last_json_with_takes_the_last_object_with_the_key():
    lines = ['{"seconds_per_step": 1}\n', "noise {not json}\n", '{"other": 2}\n', '{"seconds_per_step": 3, "x": 1}\n',
             "seconds_per_step=3\n"]
    assert tunix_harness.last_json_with(lines, "seconds_per_step") == {"seconds_per_step": 3, "x": 1}
    assert tunix_harness.last_json_with(lines, "other") == {"other": 2}
    assert tunix_harness.last_json_with(lines, "missing") is None


def test_run_and_parse_reports_the_childs_peak_rss(capsys):
    # The child touches 200 MiB and frees it before printing: the peak is what it held, not what it ends with.
    code = ("import json; b = bytearray(200 * 2**20); del b; "
            "print(json.dumps({'seconds_per_step': 0.5}))")
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
    assert s == {"model": folder, "data": "bench/r1_prompts.jsonl", "prompts": 8, "generations": 4, "prompt_len": 48,
                 "gen_len": 64, "beta": 0.04, "temperature": 1.0}
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
    stats = types.SimpleNamespace(temp_size_in_bytes=2**30, argument_size_in_bytes=2**29,
                                  output_size_in_bytes=2**29, alias_size_in_bytes=2**28)
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

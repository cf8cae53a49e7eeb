"""FSDP memory per device, on the 8 CPU devices of the test process: what each device
holds of the parameters and the optimizer state (the sum of its shards), and the compiled update's
memory per device (`memory_analysis()`: argument + temp bytes) as fsdp grows. The update is the
trainer's own (`Placement` + `make_update_fn`, built by bench/scale.py's `build_update`).

The temporaries fall with fsdp because on a mesh the layers run as one scan over their stacked
parameters (`transformer.SCAN_LAYERS`): each iteration gathers only its own layer's weights. As a
Python loop, XLA gathers every layer's weights at once and the temporaries stay ~2x the whole
model's parameter bytes whatever the fsdp size; the scan adds its stacked copies of the parameters
and gradients, which fsdp splits (so fsdp 2 holds more temporaries than the single-device loop)."""

from __future__ import annotations

import os
import sys

import jax
import numpy as np

from tests.conftest import ROOT

BENCH = os.path.join(ROOT, "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import scale  # noqa: E402

from trainers.models import transformer  # noqa: E402
from trainers.models.presets import PRESETS, ModelConfig  # noqa: E402

# Large enough that the parameters and the Adam state dominate a device's memory (2.5 M parameters,
# 9.5 MiB; 28.5 MiB with Adam's two moments), small enough to compile four times in about 30 s.
CFG = ModelConfig(
    vocab_size=1024, num_layers=2, hidden_size=256, mlp_size=1024, num_heads=4, head_dim=64, num_kv_heads=2
)


def _norm_bytes(cfg: ModelConfig) -> int:
    """float32 bytes of the norm scales (logical axis "norm": replicated, not split by fsdp): per layer
    two hidden-size norms and the q and k norms (head_dim each), and the final norm."""
    return 4 * (cfg.num_layers * (2 * cfg.hidden_size + 2 * cfg.head_dim) + cfg.hidden_size)


def test_fsdp_8_each_device_holds_an_eighth_of_params_and_optimizer_state():
    devices = jax.devices()[:8]
    _, _, params, opt_state = scale.build_update(CFG, devices)
    param_total = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    opt_total = sum(leaf.nbytes for leaf in jax.tree.leaves(opt_state))
    norms = _norm_bytes(CFG)
    held_params = scale.bytes_per_device(params)
    held_opt = scale.bytes_per_device(opt_state)
    assert set(held_params) == set(devices) and set(held_opt) == set(devices)
    # Every matrix has an `embed` dimension (256, split 8 ways): each device holds exactly 1/8 of it,
    # plus the whole of the small replicated norm scales.
    for device in devices:
        assert held_params[device] == (param_total - norms) // 8 + norms
        assert held_params[device] <= param_total / 8 + norms
        # Adam: two moments like the parameters, plus replicated step counters (a few bytes).
        assert held_opt[device] <= (opt_total - 2 * norms) / 8 + 2 * norms + 64
    assert param_total == 4 * 2_491_904  # test_parameter_count_by_hand


def test_parameter_count_by_hand():
    """The total the test above divides: embedding and LM head 2 x 1024 x 256; per layer q 256x256,
    k and v 256x128, o 256x256, MLP 3 x 256 x 1024, norms 2 x 256 + 2 x 64; the final norm 256."""
    per_layer = 256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 1024 + 2 * 256 + 2 * 64
    assert 2 * 1024 * 256 + 2 * per_layer + 256 == 2_491_904


def test_compiled_update_memory_per_device_falls_as_fsdp_grows():
    devices = jax.devices()
    batch = scale.synthetic_batch(8, 4, 8, 8, CFG.vocab_size)
    figures = {}
    for n in (1, 2, 4, 8):
        placement, update_fn, params, opt_state = scale.build_update(CFG, devices[:n])
        placed = placement.train_batch(batch, batch_axis=1)
        _, stats = scale.compiled_update(placement, update_fn, params, opt_state, placed, prompt_group=4)
        figures[n] = (stats.argument_size_in_bytes, stats.temp_size_in_bytes)
    per_device = [figures[n][0] + figures[n][1] for n in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(per_device, per_device[1:])), figures
    # The arguments (parameters, Adam state, the batch) are split: 8 devices hold under a sixth of one's.
    assert figures[8][0] < figures[1][0] / 6, figures
    # The temporaries fall too from fsdp 2 on (the layers scanned, one layer's weights gathered at a
    # time), to well under the single-device program's (measured: 19.0, 25.0, 18.1, 14.6 MiB; with
    # the layers unrolled 19.0, 22.8, 20.3, 20.1).
    temp = {n: figures[n][1] for n in figures}
    assert temp[2] > temp[4] > temp[8], figures
    assert temp[8] < 0.85 * temp[1], figures


# Eight thin layers: the layer weights dominate the parameters (embedding and LM head 6%).
DEEP = ModelConfig(
    vocab_size=256, num_layers=8, hidden_size=128, mlp_size=512, num_heads=4, head_dim=32, num_kv_heads=2
)


def test_scanned_layers_halve_the_update_temporaries_at_fsdp_8(monkeypatch):
    """At fsdp 8 the update with the layers scanned holds under 60% of the temporaries of the same
    update with the layers unrolled (which gathers all layers' weights at once), and under the
    whole model's parameter bytes (measured: 7.6 MiB scanned, 18.1 MiB unrolled, 7.8 MiB of params)."""
    devices = jax.devices()[:8]
    batch = scale.synthetic_batch(8, 4, 8, 8, DEEP.vocab_size)
    temp = {}
    for scan in (True, False):
        monkeypatch.setattr(transformer, "SCAN_LAYERS", scan)
        placement, update_fn, params, opt_state = scale.build_update(DEEP, devices)
        placed = placement.train_batch(batch, batch_axis=1)
        _, stats = scale.compiled_update(placement, update_fn, params, opt_state, placed, prompt_group=4)
        temp[scan] = stats.temp_size_in_bytes
    param_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    assert temp[True] < 0.6 * temp[False], temp
    assert temp[True] < param_bytes, (temp, param_bytes)


def test_scale_presets_have_the_real_models_parameter_counts():
    from trainers.models.hf_weights import abstract_params

    def count(name: str) -> int:
        _, params = abstract_params(PRESETS[name])
        return int(sum(np.prod(leaf.shape) for leaf in jax.tree.leaves(params)))

    assert count("smollm2-135m") == 134_515_008  # HuggingFaceTB/SmolLM2-135M
    assert count("qwen2-0.5b") == 494_032_768  # Qwen/Qwen2-0.5B

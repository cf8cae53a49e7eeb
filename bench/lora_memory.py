"""Memory of one training update, full fine-tuning vs LoRA, from the compiled program's
`memory_analysis()` (compiled, never run).

    .venv/bin/python bench/lora_memory.py [--preset smollm2-135m] [--rank 16] [--alpha 32]
        [--sequences 8] [--prompt-tokens 64] [--completion-tokens 64] [--dtype float32] [--remat]

The update: log-probs of the completion tokens (`transformer.completion_logprobs`, prompt_group 1),
a policy-gradient surrogate loss -sum(advantage x log-prob) / completion tokens, its gradient and one
optax adamw step (the config's default optimizer), jitted with the trained state donated as the
trainer does (full: params and optimizer state; LoRA: the adapters and their optimizer state, the
frozen base an ordinary argument). The model is the preset's shape, randomly initialised; LoRA
(`trainers.models.lora.add_lora`) on every attention and MLP projection.

Figures per mode, in MiB: arguments, temporaries, outputs, aliased (outputs written into donated
arguments), and the total held during the update = arguments + temporaries + outputs - aliased;
then LoRA's total / full's total.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from trainers.models import lora, transformer  # noqa: E402
from trainers.models.presets import PRESETS  # noqa: E402

MIB = 1024**2


def _batch(cfg, sequences: int, prompt_tokens: int, completion_tokens: int):
    rng = np.random.default_rng(0)
    return (
        jnp.asarray(rng.integers(1, cfg.vocab_size, (sequences, prompt_tokens)), jnp.int32),
        jnp.ones((sequences, prompt_tokens), jnp.bool_),
        jnp.asarray(rng.integers(1, cfg.vocab_size, (sequences, completion_tokens)), jnp.int32),
        jnp.ones((sequences, completion_tokens), jnp.bool_),
        jnp.asarray(rng.standard_normal(sequences), jnp.float32),
    )


def _surrogate_loss(graphdef, params, batch):
    prompt_tokens, prompt_valid, completion_tokens, completion_mask, advantages = batch
    logprobs, _ = transformer.completion_logprobs(
        graphdef, params, prompt_tokens, prompt_valid, completion_tokens, completion_mask, 1.0
    )
    return -jnp.sum(advantages[:, None] * logprobs) / jnp.sum(completion_mask)


def full_update_memory(graphdef, params, batch, tx):
    def update(params, opt_state, batch):
        grads = jax.grad(lambda p: _surrogate_loss(graphdef, p, batch))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    opt_state = jax.eval_shape(tx.init, params)
    return jax.jit(update, donate_argnums=(0, 1)).lower(params, opt_state, batch).compile().memory_analysis()


def lora_update_memory(graphdef, params, batch, tx):
    adapters, base = lora.split_adapters(params)

    def update(adapters, opt_state, base, batch):
        grads = jax.grad(lambda a: _surrogate_loss(graphdef, lora.merge_params(a, base), batch))(adapters)
        updates, opt_state = tx.update(grads, opt_state, adapters)
        return optax.apply_updates(adapters, updates), opt_state

    opt_state = jax.eval_shape(tx.init, adapters)
    compiled = jax.jit(update, donate_argnums=(0, 1)).lower(adapters, opt_state, base, batch).compile()
    return compiled.memory_analysis()


def figures(analysis) -> dict[str, float]:
    out = {
        "arguments": analysis.argument_size_in_bytes,
        "temporaries": analysis.temp_size_in_bytes,
        "outputs": analysis.output_size_in_bytes,
        "aliased": analysis.alias_size_in_bytes,
    }
    out["total"] = out["arguments"] + out["temporaries"] + out["outputs"] - out["aliased"]
    return {name: value / MIB for name, value in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--completion-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--remat", action="store_true")
    args = parser.parse_args()

    cfg = dataclasses.replace(PRESETS[args.preset], dtype=args.dtype, remat=args.remat)
    graphdef, params = transformer.init_params(cfg, 0)
    lora_graphdef, lora_params = lora.add_lora(graphdef, params, lora.LoraSettings(args.rank, args.alpha), seed=1)
    batch = _batch(cfg, args.sequences, args.prompt_tokens, args.completion_tokens)
    tx = optax.adamw(1e-5)
    adapters, _ = lora.split_adapters(lora_params)
    print(
        f"{args.preset} ({transformer.param_count(params) / 1e6:.1f} M parameters, {cfg.dtype}"
        f"{', remat' if cfg.remat else ''}), {args.sequences} sequences x "
        f"({args.prompt_tokens} + {args.completion_tokens}) tokens, {jax.default_backend()}; "
        f"LoRA rank {args.rank}: {transformer.param_count(adapters) / 1e6:.2f} M adapter parameters"
    )
    rows = {
        "full": figures(full_update_memory(graphdef, params, batch, tx)),
        f"lora r{args.rank}": figures(lora_update_memory(lora_graphdef, lora_params, batch, tx)),
    }
    names = ("arguments", "temporaries", "outputs", "aliased", "total")
    print(f"{'MiB':<10}" + "".join(f"{name:>13}" for name in names))
    for mode, row in rows.items():
        print(f"{mode:<10}" + "".join(f"{row[name]:>13.1f}" for name in names))
    full, low_rank = rows["full"], rows[f"lora r{args.rank}"]

    def working(row):  # what the step itself allocates: arguments + temporaries + outputs
        return row["arguments"] + row["temporaries"] + row["outputs"]

    print(
        f"LoRA / full: total {low_rank['total'] / full['total']:.3f}, "
        f"arguments + temporaries + outputs {working(low_rank) / working(full):.3f}"
    )


if __name__ == "__main__":
    main()

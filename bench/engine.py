"""The generation engine (continuous batching over a paged KV cache) against today's static sampler,
on one rollout of the SmolLM2 demo's prompts.

    .venv/bin/python bench/engine.py [--config configs/smollm2-arith.yaml] [--prompts 32] [--group 8]
        [--max-new 256] [--slots 64] [--micro-batch 64] [--page-tokens 16] [--chunk-tokens 16]
        [--temperature 0.7] [--set dotted.path=value ...]

One rollout of --prompts prompts x G = --group completions (the config's data, tokenizer, chat
template and system prompt; the model's weights from model.path, float32 as the demo trains), up
to --max-new tokens each with EOS stops, generated twice with the same key:
  static   `models.generate.generate` in micro-batches of --micro-batch sequences (what
           `rollout.micro_batch_sequences` does today): each decodes until its longest completion
           ends. Its utilisation: sum of lengths / (micro-batch x sum of each micro-batch's longest).
  engine   `engine.batching.generate_paged` on --slots slots, refilled at every chunk of
           --chunk-tokens steps at most (a chunk ends sooner once a waiting group fits the slots
           freed, or the slots left fit a smaller bucket); slot utilisation (useful decode tokens /
           slot-steps), pages, and KV positions held / tokens stored, summed over the decode steps.
Each side runs once untimed first on the same shapes (compilation), then timed. The two give the
same tokens (same key, same sampler) up to float rounding: at temperature > 0 a draw at a boundary
of the sampling CDF may flip, and the bench shows where rows differ and the log-prob gap before.

Anchor: the static sampler, measured in the same run. Targets: useful tokens/s >= 2x
the static sampler; slot utilisation >= 0.85; KV positions held <= 1.25 x tokens stored.
The last line is `speedup=X slot_utilisation=Y kv_overhead=Z`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_CONFIG = os.path.join("configs", "smollm2-arith.yaml")


def rollout_prompts(config, prompts: int, group: int):
    """The first `prompts` training prompts of the config's data, encoded as the trainer encodes
    them (chat template, system prompt, bucketed width), each repeated `group` times."""
    import numpy as np

    from trainers.data.encoding import encode_prompts, prompt_bucket_tokens
    from trainers.data.examples import load_examples
    from trainers.loop.policy import tokenizer_for
    from trainers.rollout.prompt_fit import renders_chat

    d = config.data
    train, _ = load_examples(d.task, d.train_path, d.eval_path, d.train_prompts, 0, config.seed)
    tokenizer = tokenizer_for(config)
    tokens, valid = encode_prompts(
        tokenizer,
        [e["prompt"] for e in train[:prompts]],
        d.max_prompt_tokens,
        chat=renders_chat(config, tokenizer),
        system_prompt=d.system_prompt,
        bucket_tokens=prompt_bucket_tokens(bool(config.model.path)),
    )
    return np.repeat(tokens, group, axis=0), np.repeat(valid, group, axis=0), tokenizer


def run_static(graphdef, params, tokens, valid, key, sampling, micro_batch: int):
    """`generate` over consecutive micro-batches (each its own key, folded from `key` by index, as the
    rollout does) -> (tokens, mask, logprobs, utilisation)."""
    import jax
    import numpy as np

    from trainers.models.generate import generate

    out_tokens, out_mask, out_logprobs, longest = [], [], [], 0
    for index, start in enumerate(range(0, len(tokens), micro_batch)):
        result = generate(
            graphdef,
            params,
            tokens[start : start + micro_batch],
            valid[start : start + micro_batch],
            jax.random.fold_in(key, index),
            sampling,
        )
        out_tokens.append(result.tokens)
        out_mask.append(result.mask)
        out_logprobs.append(np.asarray(result.logprobs))
        longest += int(result.lengths.max()) * len(result.lengths)
    mask = np.concatenate(out_mask)
    return np.concatenate(out_tokens), mask, np.concatenate(out_logprobs), float(mask.sum()) / longest


def run_engine(graphdef, params, tokens, valid, key, sampling, settings, micro_batch: int):
    """`generate_paged` with the static side's keys: the micro-batches' rows share one call, each
    row keeping the uniforms of its own micro-batch (so the samples are the static side's)."""
    from trainers.engine import batching

    uniforms = batching.micro_batch_uniforms(key, 0, len(tokens), micro_batch, sampling.max_new_tokens)
    result, stats = batching.generate_paged(graphdef, params, tokens, valid, key, sampling, settings, uniforms=uniforms)
    return result.tokens, result.mask, result.logprobs, stats


def divergence(static, engine, differ) -> str:
    """Where rows differ: the log-prob gap before each row's first different token, and the
    log-probs the two sides sampled there. At temperature > 0 float rounding (the engine's sums
    run over other widths) can move a draw that falls at a boundary of the CDF; such a flip shows
    as a gap of about 1e-5 before it, not a wrong token."""
    import numpy as np

    if not differ.any():
        return ""
    gaps, at = [], []
    for row in np.flatnonzero(differ):
        first = int(
            np.flatnonzero(
                (static["tokens"][row] != engine["tokens"][row]) | (static["mask"][row] != engine["mask"][row])
            )[0]
        )
        gaps.append(np.abs(static["logprobs"][row, :first] - engine["logprobs"][row, :first]).max(initial=0.0))
        at.append(f"{static['logprobs'][row, first]:.1f}/{engine['logprobs'][row, first]:.1f}")
    return (
        f" ({int(differ.sum())} of {len(differ)} rows differ from one token on: log-probs before it within "
        f"{max(gaps):.1e}; sampled there, static/engine log-prob {', '.join(at[:5])})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="experiment config (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8, help="completions per prompt, G (default %(default)s)")
    parser.add_argument("--max-new", type=int, default=256, help="max new tokens (default %(default)s)")
    parser.add_argument("--slots", type=int, default=64, help="the engine's decode slots (default %(default)s)")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=64,
        help="the static sampler's rollout micro-batch, sequences (default %(default)s)",
    )
    parser.add_argument("--page-tokens", type=int, default=16)
    parser.add_argument(
        "--chunk-tokens",
        type=int,
        default=16,
        help="decode steps per chunk (default %(default)s, rollout.decode_chunk_tokens's)",
    )
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--set", action="append", default=[], metavar="dotted.path=value")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    from trainers.config import load_config
    from trainers.engine.batching import EngineSettings
    from trainers.loop.policy import initial_params, model_config_for
    from trainers.models.generate import SamplingParams, eos_settings

    config = load_config(args.config, args.set)
    tokens, valid, tokenizer = rollout_prompts(config, args.prompts, args.group)
    graphdef, params = initial_params(config, model_config_for(config), progress=False)
    sampling = SamplingParams(
        max_new_tokens=args.max_new, temperature=args.temperature, prompt_group=args.group, **eos_settings(tokenizer)
    )
    settings = EngineSettings(num_slots=args.slots, page_tokens=args.page_tokens, chunk_tokens=args.chunk_tokens)
    key = jax.random.key(config.seed)
    print(
        f"engine bench: {config.model.path or config.model.preset} ({config.model.dtype}), {args.prompts} prompts x "
        f"G {args.group} = {len(tokens)} sequences, prompts padded to {tokens.shape[1]}, <= {args.max_new} new "
        f"tokens, temperature {args.temperature}; static micro-batches of {args.micro_batch}, engine {args.slots} "
        f"slots, pages of {args.page_tokens}, chunks of {args.chunk_tokens}; {jax.devices()[0].platform}",
        flush=True,
    )

    figures = {}
    for name, run in (
        ("static", lambda: run_static(graphdef, params, tokens, valid, key, sampling, args.micro_batch)),
        ("engine", lambda: run_engine(graphdef, params, tokens, valid, key, sampling, settings, args.micro_batch)),
    ):
        run()  # compile
        start = time.perf_counter()
        out_tokens, mask, logprobs, extra = run()
        seconds = time.perf_counter() - start
        figures[name] = dict(
            tokens=out_tokens, mask=mask, logprobs=logprobs, seconds=seconds, useful=int(mask.sum()), extra=extra
        )
        print(
            f"{name}: {int(mask.sum())} tokens in {seconds:.1f} s = {mask.sum() / seconds:.0f} useful tokens/s",
            flush=True,
        )

    static, engine = figures["static"], figures["engine"]
    stats = engine["extra"]
    differ = (static["tokens"] != engine["tokens"]).any(axis=1) | (static["mask"] != engine["mask"]).any(axis=1)
    lengths = static["mask"].sum(axis=1)
    speedup = (engine["useful"] / engine["seconds"]) / (static["useful"] / static["seconds"])
    print(f"\ncompletion lengths: mean {lengths.mean():.1f}, median {np.median(lengths):.0f}, max {lengths.max()}")
    print(f"static utilisation (sum of lengths / (micro-batch x sum of longest)): {static['extra']:.3f}")
    print(
        f"engine slot utilisation: {stats.slot_utilisation:.3f} (target >= 0.85); {stats.chunks} chunks, "
        f"{stats.prefills} prefills; pages in use at most {stats.peak_pages_in_use} of {stats.pool_pages}"
    )
    print(f"engine KV positions held / tokens stored: {stats.kv_overhead:.3f} (target <= 1.25)")
    print(f"same tokens as the static sampler: {not differ.any()}" + divergence(static, engine, differ))
    print(f"useful tokens/s: engine / static = {speedup:.2f} (target >= 2)")
    print(f"speedup={speedup:.3f} slot_utilisation={stats.slot_utilisation:.3f} kv_overhead={stats.kv_overhead:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

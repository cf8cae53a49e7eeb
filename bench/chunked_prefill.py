"""Chunked prefill: how long the sequences already decoding wait when long prompts arrive, with each
arrival's prompts prefilled whole against prefilled in pieces between decode chunks.

    .venv/bin/python bench/chunked_prefill.py [--config configs/smollm2-arith.yaml] [--groups 16]
        [--group 4] [--slots 16] [--long-every 4] [--long-tokens 1536] [--piece-tokens 256]
        [--max-new 64] [--temperature 0.0] [--set dotted.path=value ...]

One generation of --groups prompts x G = --group completions with the config's model, tokenizer,
chat template and system prompt, on --slots decode slots (so groups arrive while others decode).
Every --long-every-th prompt is a few-shot prompt: solved problems of the config's data before the
question, about --long-tokens tokens; the others are the data's plain questions. Run twice with the
same key (each once untimed first, for compilation):
  whole    rollout.prefill_chunk_tokens 0: an arrival's prompts prefilled in one program
  pieces   rollout.prefill_chunk_tokens --piece-tokens: a piece per visit of the host, between two
           decode chunks
and the figures of each: the longest prefill program (how long the decoding slots waited between
two chunks at worst), all prefill time, the whole generation's time, and whether the tokens are
the same (greedy by default: they should be, up to float rounding of the attention sums).

Anchor: prefilling whole, in the same run. The last line is
`longest_wait_ratio=X generation_ratio=Y` (pieces / whole: < 1 is better).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_CONFIG = os.path.join("configs", "smollm2-arith.yaml")


def few_shot_prompts(config, tokenizer, groups: int, long_every: int, long_tokens: int):
    """--groups prompts, every long_every-th (1-based) preceded by solved problems of the data up to
    about long_tokens tokens; encoded as the trainer encodes them (chat template, system prompt,
    bucketed width). -> (tokens, valid) [groups, width], left-padded."""
    from trainers.data.encoding import encode_prompts, prompt_bucket_tokens
    from trainers.data.examples import load_examples
    from trainers.rollout.prompt_fit import renders_chat

    d = config.data
    train, _ = load_examples(d.task, d.train_path, d.eval_path, max(d.train_prompts, groups + 400), 0, config.seed)
    solved, shots, used = [], iter(train[groups:]), 0
    while used < long_tokens:
        example = next(shots)
        line = f"{example['prompt']} The answer is {example['answer']}."
        solved.append(line)
        used += len(tokenizer.encode(line)) + 1
    context = "\n".join(solved)
    prompts = [
        f"{context}\n{e['prompt']}" if (i + 1) % long_every == 0 else e["prompt"] for i, e in enumerate(train[:groups])
    ]
    return encode_prompts(
        tokenizer,
        prompts,
        long_tokens + 512,
        chat=renders_chat(config, tokenizer),
        system_prompt=d.system_prompt,
        bucket_tokens=prompt_bucket_tokens(bool(config.model.path)),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="experiment config (default: %(default)s)")
    parser.add_argument("--groups", type=int, default=16, help="prompts (default %(default)s)")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt, G (default %(default)s)")
    parser.add_argument("--slots", type=int, default=16, help="decode slots (default %(default)s)")
    parser.add_argument("--long-every", type=int, default=4, help="every n-th prompt is long (default %(default)s)")
    parser.add_argument(
        "--long-tokens", type=int, default=1536, help="a long prompt's few-shot context, tokens (default %(default)s)"
    )
    parser.add_argument("--piece-tokens", type=int, default=256, help="prefill piece, tokens (default %(default)s)")
    parser.add_argument("--max-new", type=int, default=64, help="max new tokens (default %(default)s)")
    parser.add_argument("--chunk-tokens", type=int, default=16, help="decode steps per chunk (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--set", action="append", default=[], metavar="dotted.path=value")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    from trainers.config import load_config
    from trainers.engine.batching import EngineSettings, generate_paged
    from trainers.loop.policy import initial_params, model_config_for, tokenizer_for
    from trainers.models.generate import SamplingParams, eos_settings

    config = load_config(args.config, args.set)
    tokenizer = tokenizer_for(config)
    prompt_tokens, prompt_valid = few_shot_prompts(config, tokenizer, args.groups, args.long_every, args.long_tokens)
    lengths = prompt_valid.sum(axis=1)
    tokens, valid = np.repeat(prompt_tokens, args.group, axis=0), np.repeat(prompt_valid, args.group, axis=0)
    graphdef, params = initial_params(config, model_config_for(config), progress=False)
    sampling = SamplingParams(
        max_new_tokens=args.max_new, temperature=args.temperature, prompt_group=args.group, **eos_settings(tokenizer)
    )
    key = jax.random.key(config.seed)
    print(
        f"chunked prefill bench: {config.model.path or config.model.preset} ({config.model.dtype}), {args.groups} "
        f"prompts x G {args.group} on {args.slots} slots; prompt lengths {int(lengths.min())}..{int(lengths.max())} "
        f"(every {args.long_every}th long), <= {args.max_new} new tokens, temperature {args.temperature}; "
        f"{jax.devices()[0].platform}",
        flush=True,
    )

    figures = {}
    for name, piece in (("whole", 0), ("pieces", args.piece_tokens)):
        settings = EngineSettings(num_slots=args.slots, chunk_tokens=args.chunk_tokens, prefill_chunk_tokens=piece)
        generate_paged(graphdef, params, tokens, valid, key, sampling, settings)  # compile
        start = time.perf_counter()
        result, stats = generate_paged(graphdef, params, tokens, valid, key, sampling, settings)
        seconds = time.perf_counter() - start
        figures[name] = dict(result=result, stats=stats, seconds=seconds)
        print(
            f"{name}: longest prefill program {stats.longest_prefill_s:.3f} s, all prefill {stats.prefill_s:.2f} s, "
            f"decode {stats.decode_s:.2f} s in {stats.chunks} chunks, generation {seconds:.2f} s "
            f"({int(result.mask.sum())} tokens)",
            flush=True,
        )

    whole, pieces = figures["whole"], figures["pieces"]
    differ = (whole["result"].tokens != pieces["result"].tokens).any(axis=1) | (
        whole["result"].mask != pieces["result"].mask
    ).any(axis=1)
    wait_ratio = pieces["stats"].longest_prefill_s / whole["stats"].longest_prefill_s
    generation_ratio = pieces["seconds"] / whole["seconds"]
    print(
        f"\nsame tokens: {not differ.any()}"
        + (f" ({int(differ.sum())} of {len(differ)} rows differ)" if differ.any() else "")
    )
    print(
        f"longest wait of the decoding slots, pieces / whole: {wait_ratio:.2f}; generation time: {generation_ratio:.2f}"
    )
    print(f"longest_wait_ratio={wait_ratio:.3f} generation_ratio={generation_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Multi-turn generation benchmark: what turns cost the engine against the plain static sampler.

Three runs of the same batch, model and token budget, each timed after a compile run:
  plain   `generate`: one prefill + decode loop, no turns (the anchor);
  turns   the engine (`generate_paged`, every row its own slot) with turns that no row ever ends:
          the turn bookkeeping's own cost (forced / sampled tokens, stop checks, chunks);
  tools   the engine where a row's turn ends whenever it samples one of the plain run's
          `--stop-tokens` most frequent tokens, and every pause gets a `--reply-tokens` forced reply,
          as a tool's result would: the paused slot waits for the host at the chunk's end while the
          others decode on, and the replies are fed as forced tokens.
Decoded tokens per second count every completion slot the rows fill (sampled or forced), so the
three runs are compared on the work the model does per slot.

    .venv/bin/python bench/multi_turn_sampler.py [--preset smollm2-135m] [--batch 64] [--max-new 256]

The last line is `tools_tokens_per_s=X ratio_vs_plain=Y turns_ratio_vs_plain=Z pauses=P` (Y, Z: the
runs' throughput over plain's; 1.0 = no cost).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="smollm2-135m", help="model preset (random weights)")
    parser.add_argument("--dtype", default=None, help="compute dtype (bfloat16 on an accelerator by default)")
    parser.add_argument("--batch", type=int, default=64, help="sequences per call")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--max-new", type=int, default=256, help="completion slots per row")
    parser.add_argument("--reply-tokens", type=int, default=16, help="forced tokens per tool reply")
    parser.add_argument(
        "--stop-tokens",
        type=int,
        default=1,
        help="the run's K most frequent tokens each end a turn (more: more pauses)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each kind (the best is kept)")
    args = parser.parse_args()

    import dataclasses

    import jax
    import numpy as np

    from trainers.engine.batching import EngineSettings, generate_paged
    from trainers.models import transformer as model_lib
    from trainers.models.generate import SamplingParams, TurnStops, generate
    from trainers.models.presets import PRESETS

    device = jax.devices()[0]
    dtype = args.dtype or ("float32" if device.platform == "cpu" else "bfloat16")
    config = dataclasses.replace(PRESETS[args.preset], dtype=dtype)
    graphdef, params = model_lib.init_params(config, seed=0)
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, config.vocab_size, size=(args.batch, args.prompt_tokens)).astype(np.int32)
    valid = np.ones(prompts.shape, bool)
    # A stop_at_eos run whose EOS id no row samples (a pad-like id): every row fills the budget.
    sampling = SamplingParams(max_new_tokens=args.max_new, temperature=1.0, eos_id=config.vocab_size - 1, pad_id=0)
    key = jax.random.key(0)
    settings = EngineSettings(num_slots=args.batch)

    def generate_turns(turns, on_turn_end):
        return generate_paged(
            graphdef, params, prompts, valid, key, sampling, settings, turns=turns, on_turn_end=on_turn_end
        )[0]

    def best_of(run) -> tuple[float, object]:
        run()  # compile
        best, result = float("inf"), None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - t0)
        return best, result

    plain_s, plain = best_of(lambda: generate(graphdef, params, prompts, valid, key, sampling))
    slots = int(plain.mask.sum())
    # The K most frequent sampled tokens: each time a row samples one, its turn ends.
    values, counts = np.unique(plain.tokens[plain.mask], return_counts=True)
    frequent = tuple((int(v),) for v in values[np.argsort(-counts)[: args.stop_tokens]])
    never = TurnStops(((config.vocab_size - 1, config.vocab_size - 1),))  # a pair no row samples
    turns_s, turns = best_of(lambda: generate_turns(never, lambda *a: None))
    reply = np.arange(3, 3 + args.reply_tokens, dtype=np.int32)
    pauses = []

    def on_turn_end(row, step, tokens):
        pauses.append(row)
        return reply

    def tools_run():
        pauses.clear()
        return generate_turns(TurnStops(frequent), on_turn_end)

    tools_s, tools = best_of(tools_run)
    rows = [
        ("plain", plain_s, slots),
        ("turns", turns_s, int(turns.mask.sum())),
        ("tools", tools_s, int(tools.mask.sum())),
    ]
    print(
        f"device {device.device_kind}, preset {args.preset} ({dtype}), batch {args.batch}, prompt "
        f"{args.prompt_tokens}, max_new {args.max_new}, reply {args.reply_tokens} tokens"
    )
    for name, seconds, filled in rows:
        print(f"{name:6s} {seconds:8.3f} s  {filled:7d} slots  {filled / seconds:10.0f} tokens/s")
    forced = int((tools.mask & ~tools.sampled).sum())
    print(
        f"tools: {len(pauses)} pauses, {forced} forced tokens ({forced / max(int(tools.mask.sum()), 1):.0%} of slots)"
    )
    plain_rate = slots / plain_s
    print(
        f"tools_tokens_per_s={rows[2][2] / tools_s:.0f} ratio_vs_plain={rows[2][2] / tools_s / plain_rate:.3f} "
        f"turns_ratio_vs_plain={rows[1][2] / turns_s / plain_rate:.3f} pauses={len(pauses)}"
    )


if __name__ == "__main__":
    main()

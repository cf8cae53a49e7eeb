"""Benchmark workload R1 on google-tunix 0.1.7 (Tunix's own GRPO stack, a real model).

Runs INSIDE the Tunix virtual environment (bench/.tunix-venv), not the
project's venv; bench/compare_tunix_real.py creates that venv and launches
this script with the R1 settings of configs/r1.yaml. By hand:

    bench/.tunix-venv/bin/python bench/tunix_r1.py --steps 6 \
        [--model var/models/smollm2-135m-instruct]

R1: the Hugging Face folder --model (default the fetched
SmolLM2-135M-Instruct; LlamaForCausalLM) loaded by Tunix's own Llama 3 code
(tunix.models.llama3: params.create_model_from_safe_tensors) in float32, as
actor and as reference (two loads); 8 prompts x G=4; the prompts of --data
(bench/r1_prompts.jsonl) rendered with the folder's ChatML chat template by
transformers' AutoTokenizer (44-48 tokens) and left-padded to 48; exactly 64
generated tokens (the EOS id is outside the vocabulary, so generation never
stops early); GRPO mu=1, beta=0.04, one optimizer update per step (mini batch
= full batch, no gradient accumulation); one CPU device. Anchor and target:
see bench/compare_tunix_real.py (ours <= 0.5 x Tunix in time and in memory).

Two corrections to Tunix 0.1.7 for this model, so both sides compute the same
function:
  * rope_theta: tunix.models.llama3.model.Attention calls apply_rope without
    the config's rope_theta, so every Llama runs with the default 1e6. Here
    the module's apply_rope is replaced by one bound to the folder's
    rope_theta (SmolLM2: 100000) before any model is traced.
  * pad id: Tunix masks every token equal to the tokenizer's pad id (in the
    prompt and in the completion). SmolLM2's pad token is <|im_end|>, which
    every ChatML prompt contains, so the prompts are passed as token ids
    (tunix_w1.IdTokenizer) with a pad id that no prompt contains: by default
    the highest-numbered added special token not in any prompt and not an
    end-of-turn token (SmolLM2: 16, <empty_output>). Generated tokens equal
    to it would be masked too; their count is reported
    (gen_tokens_equal_pad_per_step).

Timing is tunix_w1.run_timed's (start-to-start wall clock of each GRPO global
step; median after --warmup). Output: progress on stderr; the LAST line of
stdout is one JSON object {"framework": "tunix", "seconds_per_step": X,
"peak_rss_self_bytes": ..., "workload": "R1", ...}.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import time

import tunix_w1
from tunix_w1 import (
    IdTokenizer,
    build_learner,
    constant_reward,
    environment_fields,
    log,
    one_device_mesh,
    run_timed,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R1 = dict(
    model=os.path.join(REPO, "var", "models", "smollm2-135m-instruct"),
    data=os.path.join(REPO, "bench", "r1_prompts.jsonl"),
    num_prompts=8,
    num_generations=4,
    prompt_len=48,
    gen_len=64,
    num_iterations=1,
    beta=0.04,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=R1["model"], help="Hugging Face model folder (default %(default)s)")
    p.add_argument("--data", default=R1["data"], help="JSONL of {\"prompt\": ...} (default %(default)s)")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps to run (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="leading steps excluded from the median (default 2)")
    p.add_argument("--prompts", type=int, default=R1["num_prompts"], help="prompts per step (default %(default)s)")
    p.add_argument("--generations", type=int, default=R1["num_generations"], help="G (default %(default)s)")
    p.add_argument(
        "--prompt-len",
        type=int,
        default=R1["prompt_len"],
        help="prompts are left-padded to this many tokens (default %(default)s)",
    )
    p.add_argument(
        "--gen-len", type=int, default=R1["gen_len"], help="generated tokens per sequence (default %(default)s)"
    )
    p.add_argument("--beta", type=float, default=R1["beta"], help="KL weight (default %(default)s)")
    p.add_argument(
        "--pad-id", type=int, default=None, help="pad id (default: chosen automatically, see the module docstring)"
    )
    p.add_argument("--temperature", type=float, default=1.0, help="rollout sampling temperature (default 1.0)")
    p.add_argument(
        "--breakdown", action="store_true", help="also time rollout / reference logps / actor update per step"
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def llama_config(folder: str):
    """tunix.models.llama3 ModelConfig from the folder's config.json (and its
    rope_theta, which Tunix's model then ignores: see patch_rope_theta)."""
    from tunix.models.llama3 import model as llama_lib

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    arch = (c.get("architectures") or [c.get("model_type")])[0]
    if arch not in ("LlamaForCausalLM", "llama"):
        raise SystemExit(f"{folder}: {arch} is not a LlamaForCausalLM")
    if c.get("rope_scaling") or c.get("attention_bias") or c.get("mlp_bias"):
        raise SystemExit(f"{folder}: rope_scaling / attention_bias / mlp_bias are not supported by this benchmark")
    theta = c.get("rope_theta")
    if theta is None and isinstance(c.get("rope_parameters"), dict):
        theta = c["rope_parameters"].get("rope_theta")
    theta = float(theta if theta is not None else 10000.0)
    config = llama_lib.ModelConfig(
        num_layers=c["num_hidden_layers"],
        vocab_size=c["vocab_size"],
        embed_dim=c["hidden_size"],
        hidden_dim=c["intermediate_size"],
        num_heads=c["num_attention_heads"],
        head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
        num_kv_heads=c["num_key_value_heads"],
        rope_theta=theta,
        norm_eps=c["rms_norm_eps"],
        weight_tying=bool(c.get("tie_word_embeddings", False)),
    )
    return config, theta


def patch_rope_theta(theta: float) -> None:
    """Makes tunix.models.llama3.model.apply_rope use `theta` (Attention.block
    calls it without rope_theta, so the default 1e6 would apply)."""
    from tunix.models.llama3 import model as llama_lib

    original = getattr(llama_lib.apply_rope, "func", llama_lib.apply_rope)
    llama_lib.apply_rope = functools.partial(original, rope_theta=theta)


def chat_prompt_ids(folder: str, data_path: str) -> tuple[list[list[int]], dict]:
    """Each JSONL prompt as one user message through the folder's chat template
    (transformers' AutoTokenizer, generation prompt added) -> token ids; and
    the tokenizer's added special tokens {id: text}."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    ids = []
    with open(data_path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            prompt = json.loads(line)["prompt"]
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids.append(list(tok(text, add_special_tokens=False)["input_ids"]))
    added = {int(i): str(t) for i, t in tok.added_tokens_decoder.items()}
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    return ids, {i: t for i, t in added.items() if i not in eos}


def choose_pad_id(prompts: list[list[int]], candidates: dict) -> int:
    """The highest candidate id that no prompt contains."""
    used = {t for p in prompts for t in p}
    free = sorted(i for i in candidates if i not in used)
    if not free:
        raise SystemExit("no added special token is free to serve as pad id; pass --pad-id")
    return free[-1]


def main(argv=None):
    args = parse_args(argv)
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")
    tunix_w1.LOG_PREFIX = "tunix_r1"

    t_import = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import tunix
    from flax import nnx
    from tunix.models.llama3 import params as llama_params

    log(
        f"imports took {time.perf_counter() - t_import:.1f}s; "
        f"tunix {tunix.__version__}, jax {jax.__version__}, "
        f"devices {jax.devices()}"
    )

    B, G, P, T = args.prompts, args.generations, args.prompt_len, args.gen_len
    config, theta = llama_config(args.model)
    patch_rope_theta(theta)

    prompts, specials = chat_prompt_ids(args.model, args.data)
    lengths = [len(p) for p in prompts]
    if max(lengths) > P:
        raise SystemExit(f"a prompt has {max(lengths)} tokens, over --prompt-len {P}")
    pad_id = args.pad_id if args.pad_id is not None else choose_pad_id(prompts, specials)
    if any(pad_id in p for p in prompts):
        raise SystemExit(f"pad id {pad_id} occurs in a prompt; Tunix would mask it")
    log(
        f"{len(prompts)} prompts of {min(lengths)}-{max(lengths)} tokens "
        f"(padded to {P}); pad id {pad_id} ({specials.get(pad_id, '?')!r}); "
        f"rope_theta {theta:g}"
    )

    mesh = one_device_mesh()
    t_load = time.perf_counter()
    actor = llama_params.create_model_from_safe_tensors(args.model, config, mesh, dtype=jnp.float32)
    reference = llama_params.create_model_from_safe_tensors(args.model, config, mesh, dtype=jnp.float32)
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(actor, nnx.Param)))
    log(f"Llama3 model from {args.model}: {n_params:,} parameters, loaded twice in {time.perf_counter() - t_load:.1f}s")

    tokenizer = IdTokenizer(config.vocab_size, pad_id=pad_id)
    kv_cache_size = P + T
    cluster, learner = build_learner(
        actor,
        reference,
        tokenizer,
        mesh,
        steps=args.steps,
        num_prompts=B,
        num_generations=G,
        prompt_len=P,
        gen_len=T,
        kv_cache_size=kv_cache_size,
        temperature=args.temperature,
        num_iterations=R1["num_iterations"],
        beta=args.beta,
        reward_fn=constant_reward,
    )

    texts = [" ".join(map(str, p)) for p in prompts]

    def batches():
        for step in range(args.steps + 2):  # a little extra; max_steps stops it
            first = step * B
            yield {"prompts": np.array([texts[(first + i) % len(texts)] for i in range(B)])}

    log(
        f"running {args.steps} GRPO steps: {B} prompts x G={G}, prompt {P}, "
        f"gen {T}, kv cache {kv_cache_size}, beta={args.beta}, "
        f"mu={R1['num_iterations']}"
    )
    timing = run_timed(
        learner,
        cluster,
        tokenizer,
        batches(),
        steps=args.steps,
        warmup=args.warmup,
        gen_len=T,
        breakdown=args.breakdown,
    )
    result = {
        "framework": "tunix",
        "version": tunix.__version__,
        **timing,
        "peak_rss_self_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "model": args.model,
        "params": n_params,
        "rope_theta": theta,
        "pad_id": pad_id,
        "prompt_tokens_min": min(lengths),
        "prompt_tokens_max": max(lengths),
        "kv_cache_size": kv_cache_size,
        **environment_fields(),
        "workload": "R1",
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark workload R1 on TRL's GRPOTrainer (PyTorch's CPU build, a real model).

Runs INSIDE the TRL virtual environment (bench/.trl-venv), not the project's venv;
bench/compare_trl.py creates that venv and launches this script with the R1 settings of
configs/r1.yaml. By hand, from the repository root:

    bench/.trl-venv/bin/python bench/trl_r1.py --steps 3 [--model var/models/smollm2-135m-instruct]

R1 as TRL runs it: trl.GRPOTrainer with use_vllm=False (generation by transformers'
model.generate), the Hugging Face folder --model loaded by AutoModelForCausalLM in float32 as the
policy and, since beta > 0, again as the reference; the prompts of --data as one user message each
(a conversational dataset: TRL renders them with the folder's chat template, generation prompt
added), 8 prompts x G=4 a step (per_device_train_batch_size = 32 sequences, one generation per
optimizer step, no gradient accumulation); exactly --gen-len (64) new tokens, forced through
generation_kwargs min_new_tokens = max_new_tokens = 64 (generation never stops at EOS);
temperature 1.0, top_p 1.0, top_k off; mu = num_iterations = 1, beta = 0.04, PPO clip epsilon 0.2,
loss_type "dapo" (token mean over the batch, as ours), advantages scaled by the group's std; AdamW
lr 1e-6 constant (no warmup), b1 0.9, b2 0.99, weight decay 0.1, gradient clipping at norm 1.0;
gradient checkpointing off (TRL's default is on; ours does not recompute activations either);
float32 throughout (bf16=False; TRL's default is bf16); one process on the CPU (use_cpu=True).
Reward: exact match of the stripped completion with the stripped answer (our `exact_match`).

What TRL cannot match: it left-pads each step's prompts to the longest prompt of that step (44-48
tokens; ours pads to 48), and it runs no separate old-policy pass at mu = 1 (neither does ours).

Timing: wall clock from one optimizer step's end to the next (the first from its own start), taken
by a TrainerCallback; each step includes generation, rewards, the reference log-prob pass and the
update; the median after --warmup steps is reported. Output: progress on stderr; the LAST line of
stdout is one JSON object {"framework": "trl", "seconds_per_step": X, "steps_timed": N, ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

# No model hub is reachable: everything loads from local folders.
for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ.setdefault(_k, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
    learning_rate=1e-6,
    b1=0.9,
    b2=0.99,
    weight_decay=0.1,
    max_grad_norm=1.0,
    epsilon=0.2,
)


def log(msg: str) -> None:
    print(f"[trl_r1] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=R1["model"], help="Hugging Face model folder (default %(default)s)")
    p.add_argument("--data", default=R1["data"], help='JSONL of {"prompt": ..., "answer": ...} (default %(default)s)')
    p.add_argument("--steps", type=int, default=6, help="GRPO steps to run (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="leading steps excluded from the median (default 2)")
    p.add_argument("--prompts", type=int, default=R1["num_prompts"], help="prompts per step (default %(default)s)")
    p.add_argument("--generations", type=int, default=R1["num_generations"], help="G (default %(default)s)")
    p.add_argument(
        "--prompt-len",
        type=int,
        default=R1["prompt_len"],
        help="longest prompt allowed, in tokens (TRL pads to each step's longest; default %(default)s)",
    )
    p.add_argument(
        "--gen-len", type=int, default=R1["gen_len"], help="generated tokens per sequence (default %(default)s)"
    )
    p.add_argument("--beta", type=float, default=R1["beta"], help="KL weight (default %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    p.add_argument("--learning-rate", type=float, default=R1["learning_rate"], help="AdamW lr (default %(default)s)")
    p.add_argument("--b1", type=float, default=R1["b1"], help="Adam beta1 (default %(default)s)")
    p.add_argument("--b2", type=float, default=R1["b2"], help="Adam beta2 (default %(default)s)")
    p.add_argument("--weight-decay", type=float, default=R1["weight_decay"], help="(default %(default)s)")
    p.add_argument("--max-grad-norm", type=float, default=R1["max_grad_norm"], help="(default %(default)s)")
    p.add_argument("--epsilon", type=float, default=R1["epsilon"], help="PPO clip epsilon (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def load_examples(path: str) -> list[dict]:
    """Each JSONL line as a conversational TRL example: {"prompt": [user message], "answer": ...}."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            item = json.loads(line)
            prompt = item["prompt"]
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            rows.append({"prompt": messages, "answer": str(item.get("answer", ""))})
    return rows


def completion_text(completion) -> str:
    """A TRL completion (conversational: a list of messages; else a string) as text."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


class GeneratedTokens:
    """exact_match as a TRL reward function, counting the generated tokens of each completion it
    scores (TRL passes them as completion_ids, after its EOS masking)."""

    __name__ = "exact_match"

    def __init__(self):
        self.per_step: list[list[int]] = []

    def __call__(self, prompts, completions, completion_ids=None, answer=None, **kwargs):
        self.per_step.append([len(ids) for ids in (completion_ids or [])])
        answers = answer or [""] * len(completions)
        return [float(completion_text(c).strip() == a.strip()) for c, a in zip(completions, answers, strict=True)]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None):
    args = parse_args(argv)
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")

    t_import = time.perf_counter()
    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    log(
        f"imports took {time.perf_counter() - t_import:.1f}s; trl {trl.__version__}, torch {torch.__version__} "
        f"(cuda {torch.version.cuda}), transformers {transformers.__version__}, {torch.get_num_threads()} threads"
    )

    B, G, T = args.prompts, args.generations, args.gen_len
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    examples = load_examples(args.data)
    lengths = [
        len(tokenizer.apply_chat_template(e["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False))
        for e in examples
    ]
    if max(lengths) > args.prompt_len:
        raise SystemExit(f"a prompt has {max(lengths)} tokens, over --prompt-len {args.prompt_len}")
    log(f"{len(examples)} prompts of {min(lengths)}-{max(lengths)} tokens (TRL pads to each step's longest)")
    dataset = datasets.Dataset.from_list(examples)

    config = GRPOConfig(
        output_dir=os.path.join(REPO, "bench", "out", "trl-r1"),
        max_steps=args.steps,
        per_device_train_batch_size=B * G,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=G,
        max_completion_length=T,
        generation_kwargs={"min_new_tokens": T, "max_new_tokens": T},
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        beta=args.beta,
        num_iterations=R1["num_iterations"],
        epsilon=args.epsilon,
        loss_type="dapo",
        scale_rewards="group",
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=args.b1,
        adam_beta2=args.b2,
        weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        model_init_kwargs={"dtype": torch.float32},
        seed=args.seed,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_vllm=False,
    )

    marks: dict[str, list[float]] = {"begin": [], "end": [], "cpu": []}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kwargs):
            marks["begin"].append(time.perf_counter())

        def on_step_end(self, args_, state, control, **kwargs):
            marks["end"].append(time.perf_counter())
            marks["cpu"].append(cpu_seconds())
            i = len(marks["end"]) - 1
            start = marks["end"][i - 1] if i else marks["begin"][0]
            log(f"step {i + 1}: {marks['end'][i] - start:.3f} s")

    reward = GeneratedTokens()
    t_load = time.perf_counter()
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    n_params = sum(p.numel() for p in trainer.model.parameters())
    log(
        f"GRPOTrainer ready in {time.perf_counter() - t_load:.1f}s: {n_params:,} parameters, "
        f"dtype {trainer.model.dtype}, reference model {'loaded' if trainer.ref_model is not None else 'none'}; "
        f"running {args.steps} steps: {B} prompts x G={G}, {T} new tokens, beta={args.beta}, mu={R1['num_iterations']}"
    )
    cpu0 = cpu_seconds()
    trainer.train()

    ends = marks["end"]
    if len(ends) != args.steps:
        raise SystemExit(f"{len(ends)} optimizer steps ran, not {args.steps}")
    starts = [marks["begin"][0], *ends[:-1]]
    step_s = [e - s for s, e in zip(starts, ends, strict=True)]
    cpu_marks = [cpu0, *marks["cpu"]]
    cpu_s = [b - a for a, b in zip(cpu_marks[:-1], cpu_marks[1:], strict=True)]
    steady = step_s[args.warmup :]
    gen = [n for step in reward.per_step for n in step]
    last_logs = [h for h in trainer.state.log_history if "loss" in h]
    result = {
        "framework": "trl",
        "version": trl.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seconds_per_step": statistics.median(steady),
        "steps_timed": len(steady),
        "step_seconds": step_s,
        "cpu_seconds_per_step": statistics.median(cpu_s[args.warmup :]),
        "gen_tokens_per_seq_min": min(gen) if gen else None,
        "gen_tokens_per_seq_max": max(gen) if gen else None,
        "sequences_per_step": len(reward.per_step[0]) if reward.per_step else None,
        "peak_rss_self_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "model": args.model,
        "params": n_params,
        "prompt_tokens_min": min(lengths),
        "prompt_tokens_max": max(lengths),
        "torch_threads": torch.get_num_threads(),
        "last_log": last_logs[-1] if last_logs else None,
        "workload": "R1",
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The judge reward measured: how often a judge model agrees with hand labels, and what it costs per
step against generation.

    python bench/judge.py [--judge var/models/smollm2-135m-instruct] [--template TEXT]
                          [--chat-template true|false] [--run RUN_DIR] [--step PROMPTS G] [--skip-agreement]

Agreement: LABELLED holds 16 completions of arithmetic word problems, each marked right or wrong by
hand (8 of each); the judge scores them in both modes (yes_no; number with scale 10) and a score of
0.5 or more counts as "right"; --template and --chat-template replace judge.template and
judge.chat_template (a template is written for one mode: with --template, yes_no only). Printed per
mode: the agreement, the mean score of the right and of the wrong completions, and the judge's
seconds for the 16 (after a first call that compiles).

Tokens: with --step PROMPTS G, a rollout's worth of PROMPTS arithmetic word problems x G completions
(each followed by 0 to 3 lines of working, up to the 48 tokens of configs/judge-arith.yaml) in yes_no mode:
the tokens the forward passes run (rows x padded width, summed over passes of 16 rows) with whole
prompts in row order and with each example's shared prefix run once (what the judge does), their
ratio, and the judge's CPU seconds for the step (after a first call that compiles).

Cost: with --run, a run directory trained with the judge reward (e.g. configs/judge-arith.yaml for
3 steps), each step's timing/reward_s (the judge) against its generation seconds
(timing/generation_prefill_s + timing/generation_decode_s) and timing/rollout_s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WORDS_1 = "Quinn had 13 marbles and gave 1 of them to Maya. How many marbles does Quinn have left?"
WORDS_2 = "Ana has 27 stamps and buys 18 more. Then Ana gives 43 stamps to David. How many stamps does Ana have now?"
WORDS_3 = "Tom has 3 apples and buys 5 more. How many apples does he have now?"
WORDS_4 = "A box holds 6 pens. How many pens are in 7 boxes?"
WORDS_5 = "Lena reads 9 pages a day. How many pages does she read in 5 days?"

LABELLED = [  # (question, reference answer, completion, right by hand)
    (WORDS_1, "12", "Quinn has 12 marbles left.", True),
    (WORDS_1, "12", "Quinn has 14 marbles left.", False),
    (WORDS_1, "12", "13 - 1 = 12, so the answer is 12.", True),
    (WORDS_1, "12", "Quinn gave away 1 marble.", False),
    (WORDS_2, "2", "Ana has 2 stamps now.", True),
    (WORDS_2, "2", "Ana has 45 stamps now.", False),
    (WORDS_2, "2", "27 + 18 - 43 = 2", True),
    (WORDS_2, "2", "Ana has 88 stamps.", False),
    ("What is 12 x 4?", "48", "48", True),
    ("What is 12 x 4?", "48", "The answer is 44.", False),
    (WORDS_3, "8", "Tom has 8 apples.", True),
    (WORDS_3, "8", "He has 15 apples.", False),
    (WORDS_4, "42", "There are 42 pens.", True),
    (WORDS_4, "42", "There are 13 pens.", False),
    (WORDS_5, "45", "She reads 45 pages.", True),
    (WORDS_5, "45", "She reads 14 pages.", False),
]


def agreement(judge_dir: str, mode: str, template: str | None, chat: bool | None) -> dict[str, float]:
    from trainers.config import parse_config
    from trainers.rollout.judge import load_judge

    judge_section = {"model_path": judge_dir, "mode": mode, "micro_batch_sequences": 16}
    judge_section.update({"template": template, "chat_template": chat})
    config = parse_config(
        {"data": {"task": "arithmetic"}, "rewards": [{"name": "judge", "weight": 1.0}], "judge": judge_section}
    )
    judge = load_judge(config)
    examples = [{"prompt": q, "answer": a} for q, a, _, _ in LABELLED]
    completions = [c for _, _, c, _ in LABELLED]
    judge(completions, examples)  # compiles
    t0 = time.perf_counter()
    scores, _ = judge(completions, examples)
    seconds = time.perf_counter() - t0
    labels = [right for *_, right in LABELLED]
    right = [float(s) for s, label in zip(scores, labels) if label]
    wrong = [float(s) for s, label in zip(scores, labels) if not label]
    return {
        "agreed": sum((s >= 0.5) == label for s, label in zip(scores, labels)),
        "cases": len(LABELLED),
        "mean_right": sum(right) / len(right),
        "mean_wrong": sum(wrong) / len(wrong),
        "seconds": seconds,
    }


def step_of(groups: int, group_size: int) -> tuple[list[dict], list[str]]:
    """A rollout's worth of arithmetic word problems: `groups` examples (one of WORDS_3's kind with its
    own numbers each), `group_size` completions each, every one followed by 0 to 3 lines of working
    so that lengths spread as a rollout's do."""
    examples, completions = [], []
    for g in range(groups):
        a, b = 3 + g, 5 + 2 * g
        example = {"prompt": f"Tom has {a} apples and buys {b} more. How many apples does he have now?"}
        example["answer"] = str(a + b)
        for k in range(group_size):
            answer = a + b if k % 3 else a + b + k
            working = f" Let me check: {a} + {b} = {a + b}." * ((g * group_size + k) * 7 % 4)
            examples.append(example)
            completions.append(f"Tom has {answer} apples.{working}")
    return examples, completions


def step_tokens(judge_dir: str, groups: int, group_size: int) -> dict[str, float]:
    from trainers.config import parse_config
    from trainers.data.encoding import PROMPT_BUCKET_TOKENS, bucket_width
    from trainers.data.judge_prompt import judge_prompt
    from trainers.rollout.judge import filled_rows, load_judge, shared_prefix_batches

    micro = 16
    config = parse_config(
        {
            "data": {"task": "arithmetic"},
            "rewards": [{"name": "judge", "weight": 1.0}],
            "judge": {"model_path": judge_dir, "mode": "yes_no", "micro_batch_sequences": micro},
        }
    )
    judge = load_judge(config)
    examples, completions = step_of(groups, group_size)
    rows = [
        judge.tokenizer.encode_prompt(judge_prompt(judge.template, e, c), chat=judge.chat)
        for e, c in zip(examples, completions)
    ]
    keys = [judge_prompt(judge.template, e, "") for e in examples]

    def width(token_lists) -> int:
        return min(bucket_width(max(1, *map(len, token_lists)), PROMPT_BUCKET_TOKENS), judge.max_prompt_tokens)

    whole = sum(
        filled_rows(len(rows[first : first + micro]), micro) * width(rows[first : first + micro])
        for first in range(0, len(rows), micro)
    )
    shared = sum(
        filled_rows(len(b.prefixes), micro) * width(b.prefixes)
        + filled_rows(len(b.suffixes), micro) * width(b.suffixes)
        for b in shared_prefix_batches(rows, keys, micro)
    )
    judge(completions, examples)  # compiles
    t0 = time.process_time()
    judge(completions, examples)
    return {"prompt_tokens": sum(map(len, rows)), "whole": whole, "shared": shared, "cpu_s": time.process_time() - t0}


def step_costs(run_dir: str) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    out = []
    for row in rows:
        if "timing/reward_s" not in row:
            continue
        generation_s = row.get("timing/generation_prefill_s", 0.0) + row.get("timing/generation_decode_s", 0.0)
        out.append(
            {
                "step": row["step"],
                "judge_s": row["timing/reward_s"],
                "generation_s": generation_s,
                "rollout_s": row["timing/rollout_s"],
                "step_s": row["timing/step_s"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", default=os.path.join(ROOT, "var", "models", "smollm2-135m-instruct"))
    parser.add_argument("--template", help="judge.template (default: the built-in one of each mode)")
    parser.add_argument("--chat-template", choices=("true", "false"), help="judge.chat_template (default: null)")
    parser.add_argument("--run", help="a run directory trained with the judge reward")
    parser.add_argument("--skip-agreement", action="store_true", help="only --run's or --step's figures")
    parser.add_argument(
        "--step", type=int, nargs=2, metavar=("PROMPTS", "G"), help="the tokens a step of PROMPTS x G completions runs"
    )
    args = parser.parse_args()
    chat = None if args.chat_template is None else args.chat_template == "true"
    if not ((args.run or args.step) and args.skip_agreement):
        print(f"judge {args.judge}: agreement with {len(LABELLED)} hand labels (score >= 0.5 counts as right)")
        print("| mode | agreed | mean score, right | mean score, wrong | seconds for 16 |")
        print("| --- | --- | --- | --- | --- |")
        for mode in ("yes_no", "number") if args.template is None else ("yes_no",):
            a = agreement(args.judge, mode, args.template, chat)
            print(
                f"| {mode} | {a['agreed']}/{a['cases']} | {a['mean_right']:.3f} | {a['mean_wrong']:.3f} | "
                f"{a['seconds']:.2f} |"
            )
    if args.step:
        groups, group_size = args.step
        t = step_tokens(args.judge, groups, group_size)
        print(
            f"\na step of {groups} x {group_size} completions, yes_no, passes of 16 rows: tokens the forward passes run"
        )
        print("| prompt tokens | whole prompts, row order | shared prefixes | shared / whole | judge CPU s |")
        print("| --- | --- | --- | --- | --- |")
        print(
            f"| {t['prompt_tokens']} | {t['whole']} | {t['shared']} | {t['shared'] / t['whole']:.2f} | "
            f"{t['cpu_s']:.1f} |"
        )
    if args.run:
        print(f"\nrun {args.run}: the judge's seconds per step against generation")
        print("| step | judge s | generation s | judge / generation | rollout s | step s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for c in step_costs(args.run):
            ratio = c["judge_s"] / c["generation_s"] if c["generation_s"] else float("nan")
            print(
                f"| {c['step']} | {c['judge_s']:.1f} | {c['generation_s']:.1f} | {ratio:.2f} | "
                f"{c['rollout_s']:.1f} | {c['step_s']:.1f} |"
            )


if __name__ == "__main__":
    main()

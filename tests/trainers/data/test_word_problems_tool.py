"""The arithmetic_words_calc task (the calculator demo's): two- and three-digit word problems whose
answers equal their expressions, deterministic in (seed, stream), held-out prompts disjoint from training,
every prompt ending with the answer format; and the older word-problem tasks draw exactly what they drew
before the task was added."""

import hashlib
import json
import re

import pytest

from tests.conftest import ROOT
from trainers.data import rewards, tasks, word_problems
from trainers.data.word_problems import ANSWER_FORMAT, make_problems


def _value(expression: str) -> int:
    """ "a op b [op c]" left to right, written out here rather than through word_problems._evaluate."""
    numbers = [int(n) for n in expression.split()[0::2]]
    ops = expression.split()[1::2]
    value = numbers[0]
    for op, n in zip(ops, numbers[1:]):
        value = {"+": value + n, "-": value - n, "*": value * n}[op]
    return value


def test_first_problems_of_seed_0_are_the_hand_checked_ones():
    rows = make_problems(0, 4, calculator=True)
    assert rows[0] == {
        "prompt": "Quinn had 23 marbles and gave 12 of them to Maya. How many marbles does Quinn have left? "
        "Answer in one short sentence that ends with the number.",
        "answer": "11",
        "expression": "23 - 12",
    }
    # 66 x 589 = 66 x 600 - 66 x 11 = 39600 - 726; 172 + 36 = 208, 208 - 89 = 119.
    assert [(r["expression"], r["answer"]) for r in rows[1:]] == [
        ("66 * 589", "38874"),
        ("88 - 69", "19"),
        ("172 + 36 - 89", "119"),
    ]
    assert rows[1]["prompt"].startswith("Priya buys 66 boxes of cookies with 589 cookies in each box. ")
    assert rows[3]["prompt"].startswith("Quinn has 172 apples and buys 36 more. Then Quinn gives 89 apples to Noah. ")


def test_problems_are_deterministic_in_seed_and_stream():
    assert make_problems(3, 50, calculator=True) == make_problems(3, 50, calculator=True)
    assert make_problems(3, 50, calculator=True) != make_problems(4, 50, calculator=True)
    assert make_problems(3, 50, word_problems.EVAL_STREAM, calculator=True) != make_problems(3, 50, calculator=True)
    # Prefix-stable: the first k of n problems are the k problems.
    assert make_problems(3, 50, calculator=True)[:20] == make_problems(3, 20, calculator=True)


def test_answers_equal_the_expressions_and_numbers_have_their_sizes():
    rows = make_problems(1, 2000, calculator=True)
    assert len({r["prompt"] for r in rows}) == 2000
    kinds = {"+": 0, "-": 0, "*": 0, "+-": 0}
    digits = set()
    for row in rows:
        expression = row["expression"]
        numbers = [int(n) for n in expression.split()[0::2]]
        ops = "".join(expression.split()[1::2])
        kinds[ops] += 1
        assert row["prompt"].endswith(" " + ANSWER_FORMAT)
        # The story states exactly the expression's numbers, in its order.
        assert [int(n) for n in re.findall(r"\d+", row["prompt"])] == numbers
        assert row["answer"] == str(_value(expression)) and int(row["answer"]) >= 1
        if ops == "*":
            boxes, per_box = numbers
            assert 2 <= boxes <= 99 and 10 <= per_box <= 999
        else:
            assert all(10 <= n <= 999 for n in numbers)
            if ops == "-":
                assert numbers[1] < numbers[0]
            if ops == "+-":
                assert numbers[2] < numbers[0] + numbers[1]
        digits.update(len(str(n)) for n in numbers)
    assert digits == {1, 2, 3}  # one-digit numbers only as multiplication counts
    # CALCULATOR_KINDS: +, -, * 2/7 each, a + b - c 1/7 (standard error about 0.01 at 2000 draws).
    assert abs(kinds["+"] / 2000 - 2 / 7) < 0.04 and abs(kinds["-"] / 2000 - 2 / 7) < 0.04
    assert abs(kinds["*"] / 2000 - 2 / 7) < 0.04 and abs(kinds["+-"] / 2000 - 1 / 7) < 0.03


def test_the_task_is_registered_held_out_and_scored_by_math_answer():
    task = tasks.get_task("arithmetic_words_calc")
    assert task.default_rewards == [("math_answer", 1.0)]
    assert task.make_examples(0, 30) == make_problems(0, 30, calculator=True)
    train, held_out = tasks.make_train_eval("arithmetic_words_calc", 0, 4000, 100)
    assert len(held_out) == 100
    assert not {e["prompt"] for e in train} & {e["prompt"] for e in held_out}
    assert held_out == make_problems(0, 100, word_problems.EVAL_STREAM, {e["prompt"] for e in train}, calculator=True)
    assert all(rewards.is_correct(f"So the answer is {e['answer']}.", e) for e in train[:200])
    # A big product written with a thousands separator is still right; the calculator episode's text
    # (tool call, tool response, then the sentence) is scored by its last number.
    example = {"prompt": "", "answer": "38874"}
    assert rewards.math_answer("Priya has 38,874 cookies in all.", example) == 1.0
    episode = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "66 * 589"}}</tool_call>'
        "<tool_response>\n38874\n</tool_response>That is 38874 cookies."
    )
    assert rewards.math_answer(episode, example) == 1.0
    assert rewards.math_answer("66 * 589 = 38864 cookies.", example) == 0.0


def test_only_one_variant_at_a_time():
    with pytest.raises(ValueError, match="at most one of two_step_only, mostly_two_step and calculator"):
        make_problems(0, 5, two_step_only=True, calculator=True)


# sha256 of json.dumps(make_problems(0, 300, stream, **variant)) computed with word_problems.py as it was
# before arithmetic_words_calc was added (commit e750c79): the older tasks must draw byte-identical rows.
_BEFORE = {
    ("mixed", 0): "14d8816f9ef16250a9e713094458e352c7909e939468d77d8bb6eb94603c4405",
    ("mixed", 1): "a6cca9bc06e53c88565984d2481875426d65a7efa3d79b19a4f89459d28aa71a",
    ("two_step_only", 0): "3f7b05e92ee6d0ffc3a6c1714adac8f2d669801f7c646f16e1c4df7e53a44c78",
    ("two_step_only", 1): "938532c098fbc95e3bdbf471e99466ed0e3a1094b37923f2a21158a9cc5c3a72",
    ("mostly_two_step", 0): "fba505160258d36b4343d315e0488a58a069940e84b1cc29f69540562c850071",
    ("mostly_two_step", 1): "cae8ad7f8c3626d857bef439e8d2d5989a33973dcb4f6bdb9ceb69d48d30dac6",
}


@pytest.mark.parametrize("variant,stream", sorted(_BEFORE))
def test_older_word_problem_tasks_are_byte_identical(variant, stream):
    flags = {} if variant == "mixed" else {variant: True}
    rows = make_problems(0, 300, stream, **flags)
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == _BEFORE[(variant, stream)]


def _config_dict(name: str) -> dict:
    import os

    import yaml

    root = ROOT
    with open(os.path.join(root, "configs", name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_demo_configs_differ_only_in_the_tool():
    from trainers.config import load_config

    tool, notool = _config_dict("calculator-arith.yaml"), _config_dict("calculator-arith-notool.yaml")
    assert tool["data"]["task"] == "arithmetic_words_calc"
    assert tool["env"] == {
        "name": "calculator",
        "settings": {"demonstration": True, "call_bonus": 0.2},
        "max_turns": 3,
        "max_total_tokens": 160,
    }
    # The twin: the calculator switched off (one turn, the demonstration answered without the tool), the
    # same total budget as the tool run's episode and as its single-turn completion budget.
    assert notool["env"] == {
        "name": "calculator",
        "settings": {"demonstration": True, "enabled": False},
        "max_turns": 1,
        "max_total_tokens": 160,
    }
    assert tool["rollout"]["max_new_tokens"] == 160
    # The comparison's system prompt is the calculator's with its tool sentences cut off the front.
    assert tool["data"]["system_prompt"].endswith(" " + notool["data"]["system_prompt"])
    assert "calculator" not in notool["data"]["system_prompt"]
    for config in (tool, notool):
        del config["env"], config["data"]["system_prompt"]
    assert tool == notool
    for name in ("calculator-arith.yaml", "calculator-arith-notool.yaml"):
        load_config(f"configs/{name}", [])  # both pass the schema


def test_demo_configs_prompts_fit_max_prompt_tokens(smollm2_dir):
    """The longest prompt of either run (system prompt, demonstration, problem; train and held-out) fits
    data.max_prompt_tokens: 255 tokens for the tool run, 146 for the twin, measured with SmolLM2's tokenizer."""
    from trainers.config import load_config
    from trainers.data.hf_tokenizer import HFTokenizer
    from trainers.envs.registry import make_environment

    tok = HFTokenizer.from_folder(smollm2_dir)
    train, held_out = tasks.make_train_eval("arithmetic_words_calc", 0, 4000, 100)
    longest = {}
    for name in ("calculator-arith.yaml", "calculator-arith-notool.yaml"):
        config = load_config(f"configs/{name}", [])
        env = make_environment(config.env.name, config.env.settings)
        longest[name] = max(
            len(tok.encode_prompt(env.reset(e), chat=True, system_prompt=config.data.system_prompt))
            for e in train + held_out
        )
        assert longest[name] <= config.data.max_prompt_tokens
    assert longest == {"calculator-arith.yaml": 255, "calculator-arith-notool.yaml": 146}


def test_demo_config_carries_the_calculators_system_prompt():
    calculator = pytest.importorskip("trainers.envs.calculator")
    assert _config_dict("calculator-arith.yaml")["data"]["system_prompt"] == calculator.SYSTEM_PROMPT

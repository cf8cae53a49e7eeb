"""The calculator environment: the safe arithmetic evaluator, the tool-call parser and the replies
(values computed by hand)."""

import time
from fractions import Fraction

import pytest

from trainers.data import rewards
from trainers.data.word_problems import ANSWER_FORMAT, make_problems
from trainers.envs.arithmetic import ArithmeticRefused, evaluate, format_number, normalize
from trainers.envs.base import EpisodeState
from trainers.envs.calculator import (
    DEMO_QUESTION,
    DEMONSTRATION_NO_TOOL,
    EXAMPLE_CALL,
    SYSTEM_PROMPT,
    Calculator,
    CalculatorSettings,
    answer_tool_call,
    find_tool_calls,
)


def refused(expression, **limits):
    with pytest.raises(ArithmeticRefused) as info:
        evaluate(expression, **limits)
    return str(info.value)


# ---------------------------------------------------------------- the evaluator


@pytest.mark.parametrize(
    "expression, value",
    [
        ("39 - 28", Fraction(11)),
        ("2 + 3 * 4", Fraction(14)),
        ("(2 + 3) * 4", Fraction(20)),
        ("7 / 2", Fraction(7, 2)),
        ("7 // 2", Fraction(3)),
        ("-7 // 2", Fraction(-4)),
        ("-7 % 3", Fraction(2)),
        ("2 ** 10", Fraction(1024)),
        ("2 ** -2", Fraction(1, 4)),
        ("-2 ** 2", Fraction(-4)),  # ** binds tighter than unary minus, as in Python
        ("(-2) ** 3", Fraction(-8)),
        ("1 / 3 * 3", Fraction(1)),  # exact: no 0.9999...
        ("0.1 + 0.2", Fraction(3, 10)),
        ("+5 - -5", Fraction(10)),
        ("1_000 + 1", Fraction(1001)),
        ("2.5e2", Fraction(250)),
        ("1e-5", Fraction(1, 100_000)),
        ("0e999999999", Fraction(0)),  # zero, however it is written, never builds 10**999999999
        ("(-1) ** 100000000000000000000", Fraction(1)),
        ("((((1))))", Fraction(1)),
    ],
)
def test_evaluate_by_hand(expression, value):
    assert evaluate(expression) == value


def test_unicode_signs_and_a_trailing_equals_sign_are_read():
    assert normalize(" 39 \u2212 28 = ") == "39 - 28"
    assert evaluate("39 \u2212 28") == 11  # the unicode minus
    assert evaluate("6 \u00d7 7") == 42  # times
    assert evaluate("84 \u00f7 2") == 42  # division sign
    assert evaluate("12 + 5 =") == 17


def test_nine_to_the_nine_to_the_nine_is_refused_by_its_estimated_size():
    started = time.perf_counter()
    message = refused("9**9**9")
    assert time.perf_counter() - started < 0.5
    # The estimate, 9**9 * log10(9) = 387420489 * 0.9542... digits, is in the refusal: it was never computed.
    assert message == "result too large: about 369693100 digits; at most 30"
    # 2**100 and 10**30 pass the estimate (30.1 and 30 digits) and are refused by the exact count.
    assert refused("2 ** 100") == "result too large: 31 digits; at most 30"
    assert refused("10 ** 30") == "result too large: 31 digits; at most 30"
    assert evaluate("10 ** 29") == 10**29


def test_power_needs_a_whole_number_exponent():
    assert refused("2 ** (1/2)") == "** needs a whole-number exponent"
    assert refused("4 ** 0.5") == "** needs a whole-number exponent"
    assert refused("0 ** -1") == "division by zero"
    assert evaluate("0 ** 0") == 1


def test_division_by_zero_is_refused():
    assert refused("1/0") == "division by zero"
    assert refused("5 // (2 - 2)") == "division by zero"
    assert refused("5 % 0") == "division by zero"


def test_huge_numbers_are_refused_before_they_are_built():
    assert refused("1e400") == "1e400 has too many digits; at most 30"
    assert refused("1e-400") == "1e-400 has too many digits; at most 30"
    assert refused("1e9999999999") == "1e9999999999 has too many digits; at most 30"
    zeros = "1e" + "0" * 4400  # int() refuses over 4300 digits: this was a ValueError, not a refusal
    assert refused(zeros, max_chars=5000) == f"{zeros} has too many digits; at most 30"
    assert refused("2.5e-0000001") == "2.5e-0000001 has too many digits; at most 30"
    assert evaluate("2.5e-000001") == Fraction(1, 4)
    assert refused("9" * 31) == f"{'9' * 31} has too many digits; at most 30"
    assert evaluate("9" * 30) == 10**30 - 1
    assert refused("9" * 30 + " * 10") == "result too large: 31 digits; at most 30"
    assert evaluate("1 / 3 ** 40") == Fraction(1, 3**40)  # 20 digits: under the limit
    assert refused("1 / 7 ** 20", max_result_digits=10) == "result too large: about 17 digits; at most 10"
    assert refused("1 + 1", max_result_digits=30, max_chars=3) == "expression is 5 characters; at most 3"


def test_syntax_the_calculator_does_not_read_is_refused_with_the_fix():
    assert refused("((((") == "cannot parse '(((('; use numbers and + - * / // % ** ( )"
    assert refused("") == "empty expression"
    assert refused("2^3") == "^ is not a power here: write ** (2**3 is 8)"
    assert refused("1,234") == "commas are not allowed: write 1234, not 1,234"
    assert refused("x + 1").startswith("unknown name 'x'")
    assert refused("__import__('os')").startswith("function calls are not supported")
    assert refused("'a' * 3") == "'a' is not a number; use numbers and + - * / // % ** ( )"
    assert refused("True + 1") == "True is not a number; use numbers and + - * / // % ** ( )"
    assert refused("0x10") == "0x10 is not a decimal number"
    assert refused("1 < 2").startswith("Compare is not supported")
    assert refused("3 & 4").startswith("this operator is not supported")


def test_depth_and_size_limits():
    assert refused("-" * 70 + "1") == "expression nested too deeply: more than 64 levels"
    assert evaluate("-" * 60 + "1") == 1
    assert refused("+".join(["1"] * 60)) == "expression too long: more than 100 numbers and operators"
    assert evaluate("+".join(["1"] * 50)) == 50  # 50 numbers + 49 operators = 99 nodes
    assert refused("(" * 300 + "1" + ")" * 300, max_chars=1000).startswith("cannot parse")


@pytest.mark.parametrize(
    "value, text",
    [
        (Fraction(11), "11"),
        (Fraction(-4), "-4"),
        (Fraction(0), "0"),
        (Fraction(5, 2), "2.5"),
        (Fraction(-1, 8), "-0.125"),
        (Fraction(1, 100_000), "0.00001"),
        (Fraction(1, 3), "1/3"),
        (Fraction(-22, 7), "-22/7"),
        (Fraction(1, 2**13), "1/8192"),  # 13 decimal places: more than 12, so a fraction
        (Fraction(1, 2**12), "0.000244140625"),  # exactly 12 places
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


# ---------------------------------------------------------------- tool calls


def test_find_tool_calls():
    message = (
        'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "39 - 28"}}\n</tool_call>'
    )
    assert find_tool_calls(message) == ['{"name": "calculator", "arguments": {"expression": "39 - 28"}}']
    assert find_tool_calls("The answer is 11.") == []
    two = "<tool_call>{}</tool_call> and <tool_call> [1] </tool_call>"
    assert find_tool_calls(two) == ["{}", "[1]"]
    # The closing tag cut off as the turn's stop string: the call runs to the end of the message.
    assert find_tool_calls('<tool_call>{"name": "calculator"}') == ['{"name": "calculator"}']


SETTINGS = CalculatorSettings()


@pytest.mark.parametrize(
    "body, reply, failed",
    [
        ('{"name": "calculator", "arguments": {"expression": "39 - 28"}}', "11", False),
        ('{"name": "calculator", "arguments": {"expression": "7 / 2"}}', "3.5", False),
        (
            '{"name": "calculator", "arguments": "{\\"expression\\": \\"2 * 21\\"}"}',
            "42",
            False,
        ),  # arguments as a string
        ('{"name": "calculator", "arguments": {"expression": "1/0"}}', "error: division by zero", True),
        (
            '{"name": "calculator", "arguments": {"expression": "9**9**9"}}',
            "error: result too large: about 369693100 digits; at most 30",
            True,
        ),
        (
            '{"name": "calculator", "arguments": {"expression": 39}}',
            'error: "arguments" needs "expression", a string such as "12 + 7"',
            True,
        ),
        (
            '{"name": "calculator", "arguments": {}}',
            'error: "arguments" needs "expression", a string such as "12 + 7"',
            True,
        ),
        ('{"name": "calculator"}', 'error: "arguments" needs "expression", a string such as "12 + 7"', True),
        (
            '{"name": "search", "arguments": {"query": "x"}}',
            'error: unknown tool "search"; the only tool is "calculator"',
            True,
        ),
        ('{"arguments": {"expression": "1"}}', 'error: unknown tool no name; the only tool is "calculator"', True),
    ],
)
def test_answer_tool_call(body, reply, failed):
    assert answer_tool_call(body, SETTINGS) == (reply, failed)


def test_bad_json_gets_an_error_reply_with_the_format():
    reply, failed = answer_tool_call('{"name": "calculator", "arguments": {"expression": "1+1"}', SETTINGS)
    assert failed and reply.startswith("error: the tool call is not valid JSON; write <tool_call>{")
    reply, failed = answer_tool_call("[1, 2]", SETTINGS)
    assert failed and reply.startswith("error: a tool call is a JSON object")
    reply, failed = answer_tool_call("[" * 100_000, SETTINGS)  # deep nesting: an error reply, not a crash
    assert failed and reply.startswith("error: the tool call is not valid JSON")


def test_expression_and_digit_limits_come_from_the_settings():
    long = '{"name": "calculator", "arguments": {"expression": "' + "1+" * 150 + '1"}}'
    assert answer_tool_call(long, SETTINGS) == ("error: the expression is 301 characters; at most 200", True)
    small = CalculatorSettings(max_result_digits=3, max_expression_chars=10)
    call = '{"name": "calculator", "arguments": {"expression": "%s"}}'
    assert answer_tool_call(call % "999 + 1", small) == ("error: result too large: 4 digits; at most 3", True)
    assert answer_tool_call(call % "999 + 0", small) == ("999", False)
    assert answer_tool_call(call % "1 + 2 + 3 + 4", small) == (
        "error: the expression is 13 characters; at most 10",
        True,
    )


# ---------------------------------------------------------------- the environment


def call(expression):
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


def test_a_turn_with_a_call_gets_its_result_and_goes_on():
    env = Calculator()
    assert env.stop_strings == ("</tool_call>",) and env.multi_turn
    state = EpisodeState(example={"prompt": "Ana has 39 apples ...", "answer": "11"}, turn=1)
    result = env.step(state, "I will compute it.\n" + call("39 - 28"))
    assert result.messages == [{"role": "tool", "content": "11"}]
    assert (result.done, result.tool_calls, result.tool_errors, result.reward_parts) == (False, 1, 0, {})


def test_a_turn_without_a_call_is_the_final_answer():
    result = Calculator().step(EpisodeState(example={"prompt": "p", "answer": "11"}, turn=2), "The answer is 11.")
    assert (result.messages, result.done, result.tool_calls, result.tool_errors, result.reward_parts) == (
        [],
        True,
        0,
        0,
        {},
    )


def test_errors_are_replies_and_the_episode_goes_on():
    result = Calculator().step(
        EpisodeState(example={}, turn=1), call("1/0") + call("2 + 2") + "<tool_call>oops</tool_call>"
    )
    assert [m["content"] for m in result.messages][:2] == ["error: division by zero", "4"]
    assert result.messages[2]["content"].startswith("error: the tool call is not valid JSON")
    assert (result.done, result.tool_calls, result.tool_errors) == (False, 3, 2)


def test_call_bonus_is_paid_once_per_episode_for_a_call_that_works():
    env = Calculator(CalculatorSettings(call_bonus=0.2))
    assert env.reward_parts == ("tool_call",) and Calculator().reward_parts == ()
    state = EpisodeState(example={}, turn=1)
    assert env.step(state, call("1/0")).reward_parts == {}  # an error earns nothing
    assert env.step(state, call("1/0") + call("2 + 2") + call("3 + 3")).reward_parts == {"tool_call": 0.2}
    assert env.step(state, call("5 + 5")).reward_parts == {}  # paid already in this episode
    assert Calculator().step(EpisodeState(example={}, turn=1), call("2 + 2")).reward_parts == {}


def test_calls_over_the_limit_get_one_error_reply():
    env = Calculator(CalculatorSettings(max_calls_per_turn=2))
    result = env.step(EpisodeState(example={}, turn=1), "".join(call(f"{n} + 1") for n in range(5)))
    assert [m["content"] for m in result.messages] == [
        "1",
        "2",
        "error: at most 2 tool calls per turn; the other 3 were not run",
    ]
    assert (result.done, result.tool_calls, result.tool_errors) == (False, 5, 3)


def test_system_prompt_shows_the_call_format_and_an_answer_the_rewards_read():
    assert '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>' in SYSTEM_PROMPT
    assert "<tool_response>" in SYSTEM_PROMPT
    # The example call in the prompt is itself a call the calculator answers.
    body = find_tool_calls(SYSTEM_PROMPT)[0]
    assert answer_tool_call(body, SETTINGS) == ("19", False)
    # An episode that ends like the prompt says is scored right by numeric_match (the last number).
    episode = call("12 + 7") + "\n<tool_response>\n19\n</tool_response>\nThe answer is 19."
    assert rewards.numeric_match(episode, {"answer": "19"}) == 1.0


# ---------------------------------------------------------------- the demonstration and the no-tool twin

QUESTION = "Ben has 39 apples and gives Maya 28. How many apples does Ben have left? " + ANSWER_FORMAT
DEMO_USER = {
    "role": "user",
    "content": "Ana has 12 apples. Ben gives Ana 7 more. How many apples does Ana have now? "
    "Answer in one short sentence that ends with the number.",
}


def test_reset_without_demonstration_is_the_prompt_as_it_is():
    example = {"prompt": QUESTION, "answer": "11"}
    assert Calculator().reset(example) == QUESTION
    assert Calculator(CalculatorSettings(enabled=False)).reset(example) == QUESTION
    messages = [{"role": "user", "content": QUESTION}]
    assert Calculator().reset({"prompt": messages}) is messages


def test_reset_with_demonstration_puts_one_worked_example_first():
    env = Calculator(CalculatorSettings(demonstration=True))
    assert env.reset({"prompt": QUESTION, "answer": "11"}) == [
        DEMO_USER,
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>',
        },
        {"role": "tool", "content": "19"},
        {"role": "assistant", "content": "Ana has 19 apples now."},
        {"role": "user", "content": QUESTION},
    ]


def test_the_no_tool_twins_demonstration_answers_directly():
    env = Calculator(CalculatorSettings(demonstration=True, enabled=False))
    assert env.reset({"prompt": QUESTION}) == [
        DEMO_USER,
        {"role": "assistant", "content": "Ana has 12 + 7 = 19 apples now."},
        {"role": "user", "content": QUESTION},
    ]


def test_a_message_list_prompt_keeps_its_system_message_first():
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    messages = Calculator(CalculatorSettings(demonstration=True)).reset({"prompt": prompt})
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[0] == prompt[0] and messages[1] == DEMO_USER and messages[-1] == prompt[1]
    with pytest.raises(ValueError, match="message 0 has no 'role'"):
        Calculator(CalculatorSettings(demonstration=True)).reset({"prompt": [{"content": "x"}]})


def test_the_demonstration_is_what_the_calculator_and_the_reward_would_do():
    """The example's call gets the example's result from `step`, its question is not an
    arithmetic_words_calc prompt (7 is one digit), and its answer is scored right by math_answer."""
    env = Calculator(CalculatorSettings(demonstration=True))
    demo = env.reset({"prompt": QUESTION})
    result = env.step(EpisodeState(example={}, turn=1), demo[1]["content"])
    assert result.messages == [demo[2]] and not result.done
    assert rewards.math_answer(demo[3]["content"], {"answer": "19"}) == 1.0
    assert rewards.math_answer(DEMONSTRATION_NO_TOOL[1]["content"], {"answer": "19"}) == 1.0
    assert DEMO_QUESTION not in {e["prompt"] for e in make_problems(0, 4000, calculator=True)}


def test_without_the_tool_the_first_turn_is_the_final_answer():
    env = Calculator(CalculatorSettings(enabled=False))
    assert env.stop_strings == () and Calculator.stop_strings == ("</tool_call>",)  # the class keeps its stop
    result = env.step(EpisodeState(example={}, turn=1), call("39 - 28"))  # a call is not answered
    assert (result.messages, result.done, result.tool_calls, result.tool_errors) == ([], True, 0, 0)
    result = env.step(EpisodeState(example={}, turn=1), "Ben has 11 apples left.")
    assert (result.messages, result.done) == ([], True)


def test_the_demonstration_renders_like_a_real_episode(smollm2_dir):
    """With SmolLM2's chat template, the prompt up to the demonstration's tool reply is token for token
    what a real episode is after the model wrote the same call and got its reply (`encode_reply`)."""
    from trainers.data.chat_template import conversation
    from trainers.data.encoding import encode_reply
    from trainers.data.hf_tokenizer import HFTokenizer

    tok = HFTokenizer.from_folder(smollm2_dir)
    demo = Calculator(CalculatorSettings(demonstration=True)).reset({"prompt": QUESTION})
    start = conversation(DEMO_USER["content"], SYSTEM_PROMPT)
    history = start + [demo[1]]
    real = (
        tok.encode(tok.apply_chat_template(start), add_bos=False)
        + tok.encode(demo[1]["content"], add_bos=False)
        + encode_reply(tok, history, [demo[2]], chat=True)
    )
    assert tok.encode(tok.apply_chat_template(start + demo[1:3]), add_bos=False) == real
    text = tok.apply_chat_template(conversation(demo, SYSTEM_PROMPT))
    assert text.endswith(
        "<|im_start|>assistant\n" + EXAMPLE_CALL + "<|im_end|>\n"
        "<|im_start|>tool\n<tool_response>\n19\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nAna has 19 apples now.<|im_end|>\n"
        "<|im_start|>user\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n"
    )

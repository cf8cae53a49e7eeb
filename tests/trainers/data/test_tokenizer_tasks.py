"""Tests for trainers/data/tokenizer.py and trainers/data/tasks.py."""

import numpy as np
import pytest

from trainers.data import rewards, tasks
from trainers.data.tokenizer import CharTokenizer, get_tokenizer

# ---------------------------------------------------------------- tokenizer


def test_special_ids_and_vocab_size():
    tokenizer = get_tokenizer("char")
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == 100
    assert tokenizer.vocab_size <= 128


def test_encode_layout():
    tokenizer = CharTokenizer()
    assert tokenizer.encode("\n", add_bos=False) == [4]
    assert tokenizer.encode(" ", add_bos=False) == [5]  # ASCII 32
    assert tokenizer.encode("~", add_bos=False) == [99]  # ASCII 126
    assert tokenizer.encode("ab") == [1, 5 + ord("a") - 32, 5 + ord("b") - 32]
    assert tokenizer.encode("é", add_bos=False) == [tokenizer.unk_id]


def test_round_trip_all_printable_characters():
    tokenizer = CharTokenizer()
    text = "\n" + "".join(chr(code) for code in range(32, 127))
    ids = tokenizer.encode(text)
    assert len(ids) == len(text) + 1
    assert len(set(ids)) == len(ids)
    assert max(ids) == tokenizer.vocab_size - 1
    assert tokenizer.decode(ids) == text


def test_decode_stops_at_first_eos_and_skips_pad_bos():
    tokenizer = CharTokenizer()
    a, b, c = tokenizer.encode("abc", add_bos=False)
    assert tokenizer.decode([0, 0, 1, a, b, 2, c, 2]) == "ab"
    assert tokenizer.decode([a, 0, b, 1, c]) == "abc"
    assert tokenizer.decode([2, a]) == ""
    assert tokenizer.decode(np.array([a, b, 2], dtype=np.int32)) == "ab"


def test_decode_unknown_ids_are_replacement_chars():
    tokenizer = CharTokenizer()
    assert tokenizer.decode([3, 100, 127]) == "\ufffd" * 3


def test_get_tokenizer_rejects_unknown_name():
    with pytest.raises(ValueError, match="unknown tokenizer"):
        get_tokenizer("bpe")


# ---------------------------------------------------------------- tasks


@pytest.mark.parametrize("name", tasks.TASKS.names())
def test_task_is_deterministic_and_prefix_stable(name):
    task = tasks.TASKS[name]
    first = task.make_examples(7, 50)
    assert first == task.make_examples(7, 50)
    assert first[:20] == task.make_examples(7, 20)
    assert first != task.make_examples(8, 50)
    assert len({example["prompt"] for example in first}) == 50


@pytest.mark.parametrize("name", tasks.TASKS.names())
def test_train_eval_disjoint_and_deterministic(name):
    train, eval_examples = tasks.make_train_eval(name, 3, 500, 200)
    assert len(train) == 500 and len(eval_examples) == 200
    assert not {e["prompt"] for e in train} & {e["prompt"] for e in eval_examples}
    assert (train, eval_examples) == tasks.make_train_eval(name, 3, 500, 200)


@pytest.mark.parametrize("name", tasks.TASKS.names())
def test_every_answer_is_correct(name):
    task = tasks.TASKS[name]
    # a python_functions answer is code, checked by running its tests in the sandbox: fewer of them
    for example in task.make_examples(11, 20 if name == "python_functions" else 300):
        assert isinstance(example["prompt"], str)
        if name == "python_functions":
            assert rewards.is_correct(example["answer"], example)
            total, _ = rewards.score([example["answer"]], [example], task.default_rewards)
            assert total[0] == 1.0
            continue
        if not name.startswith(
            ("arithmetic_words", "guess_number")
        ):  # the toy tasks' prompts end where the answer starts
            assert example["prompt"].endswith("=")
        assert rewards.is_correct(example["answer"], example)
        total, _ = rewards.score([example["answer"]], [example], task.default_rewards)
        assert total[0] == pytest.approx(sum(weight for _, weight in task.default_rewards))
        if name != "countdown":
            assert rewards.exact_match(example["answer"], example) == 1.0


@pytest.mark.parametrize("name", tasks.TASKS.names())
def test_task_metadata(name):
    task = tasks.TASKS[name]
    assert task.name == name
    assert task.description
    rewards.check_specs(task.default_rewards)
    if name.startswith("arithmetic_words"):  # for pretrained chat models: the answer is checked as math
        assert task.default_rewards == [("math_answer", 1.0)]
        return
    if name == "guess_number":  # a game: its environment's "solved" part is the reward
        assert task.default_rewards == [("numeric_match", 0.0)]
        return
    if name == "python_functions":  # code: the fraction of its unit tests that pass
        assert task.default_rewards == [("code_tests", 1.0)]
        return
    # A toy task includes a partial-credit reward for early signal.
    assert {"prefix_match", "alphabet_match", "countdown_partial"} & {n for n, _ in task.default_rewards}
    longest_answer = max(len(e["answer"]) for e in task.make_examples(0, 500))
    assert task.max_new_tokens >= longest_answer + 1  # room for EOS


def test_task_examples_by_hand():
    arithmetic = tasks.TASKS["arithmetic"].make_examples(0, 300)
    for example in arithmetic:
        a_text, op, b_text = (
            example["prompt"][:-1].partition("+") if "+" in example["prompt"] else example["prompt"][:-1].partition("-")
        )
        a, b = int(a_text), int(b_text)
        assert 0 <= a <= 99 and 0 <= b <= 99
        assert int(example["answer"]) == (a + b if op == "+" else a - b) >= 0
        assert 1 <= len(example["answer"]) <= 3
    for example in tasks.TASKS["reverse"].make_examples(0, 100):
        word = example["prompt"][len("rev ") : -1]
        assert 3 <= len(word) <= 6 and word.isalpha() and word.islower()
        assert example["answer"] == word[::-1]
    for example in tasks.TASKS["sort"].make_examples(0, 100):
        assert example["answer"] == "".join(sorted(example["prompt"][len("sort ") : -1]))
    for example in tasks.TASKS["copy"].make_examples(0, 100):
        assert example["answer"] == example["prompt"][len("copy ") : -1]


def test_fixed_length_prompts_are_32_tokens():
    tokenizer = CharTokenizer()
    for example in tasks.TASKS["fixed_length"].make_examples(0, 50):
        assert len(tokenizer.encode(example["prompt"])) == 32
        assert example["answer"] == example["prompt"][:-1][::-1]


def test_countdown_examples_are_consistent():
    for example in tasks.TASKS["countdown"].make_examples(5, 300):
        numbers_text, _, rest = example["prompt"].partition(">")
        assert [int(n) for n in numbers_text.split()] == example["numbers"] == sorted(example["numbers"])
        assert rest == f"{example['target']}="
        assert rewards.countdown_value(example["answer"], example["numbers"]) == example["target"]
        assert rewards.countdown(example["answer"], example) == 1.0


def test_exhausted_prompt_space_raises():
    def make_one(rng):
        return {"prompt": f"{int(rng.integers(0, 3))}=", "answer": ""}

    assert len(tasks._unique_examples(make_one, "tiny", 0, 3, (), 0)) == 3
    with pytest.raises(ValueError, match="found only 3 distinct prompts of 4"):
        tasks._unique_examples(make_one, "tiny", 0, 4, (), 0)
    with pytest.raises(ValueError, match="found only 2 distinct prompts of 3"):
        tasks._unique_examples(make_one, "tiny", 0, 3, {"0="}, 0)


def test_get_task_unknown():
    with pytest.raises(ValueError, match="unknown task"):
        tasks.get_task("chess")

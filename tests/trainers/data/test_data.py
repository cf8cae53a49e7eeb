"""Tests for trainers/data: examples, the prompt stream, prompt encoding."""

import functools
import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainers.data import tasks
from trainers.data.encoding import encode_prompts
from trainers.data.examples import DataError, load_examples
from trainers.data.prompt_stream import PromptStream
from trainers.data.tokenizer import CharTokenizer


def numbered(count):
    return [{"prompt": f"p{i}=", "answer": str(i)} for i in range(count)]


# ---------------------------------------------------------------- PromptStream


def test_every_example_once_per_epoch_and_epochs_differ():
    examples = numbered(37)
    stream = PromptStream(examples, seed=5)
    assert len(stream) == 37
    orders = []
    for epoch in range(4):
        taken = stream.take(epoch * 37, 37)
        assert sorted(e["prompt"] for e in taken) == sorted(e["prompt"] for e in examples)
        orders.append([e["prompt"] for e in taken])
    assert len({tuple(order) for order in orders}) == 4
    assert orders[0] != [e["prompt"] for e in examples]  # shuffled


def test_same_seed_same_order_other_seed_other_order():
    examples = numbered(50)
    first = [e["prompt"] for e in PromptStream(examples, seed=1).take(0, 150)]
    again = [e["prompt"] for e in PromptStream(examples, seed=1).take(0, 150)]
    other = [e["prompt"] for e in PromptStream(examples, seed=2).take(0, 150)]
    assert first == again
    assert first != other


def test_take_across_epoch_boundary():
    examples = numbered(10)
    stream = PromptStream(examples, seed=0)
    epoch0 = stream.take(0, 10)
    epoch1 = stream.take(10, 10)
    crossing = stream.take(7, 6)
    assert crossing == epoch0[7:] + epoch1[:3]
    assert stream.epoch_of(9) == 0 and stream.epoch_of(10) == 1 and stream.epoch_of(25) == 2


def test_take_far_position_and_empty():
    stream = PromptStream(numbered(3), seed=0)
    assert len(stream.take(10**12, 4)) == 4
    assert stream.take(5, 0) == []
    with pytest.raises(ValueError):
        stream.take(-1, 2)


def test_take_returns_copies():
    examples = numbered(3)
    stream = PromptStream(examples, seed=0)
    stream.take(0, 3)[0]["prompt"] = "changed"
    assert "changed" not in {e["prompt"] for e in stream.take(0, 3)}
    assert examples == numbered(3)


def test_materialised_and_per_element_paths_agree():
    examples = numbered(23)
    cached = PromptStream(examples, seed=9)
    direct = PromptStream(examples, seed=9)
    direct.MATERIALISE_MAX_EXAMPLES = 0  # force element-by-element reads from grain
    for position, count in [(0, 23), (20, 10), (100, 30), (5, 3)]:
        assert cached.take(position, count) == direct.take(position, count)


def test_large_stream_reads_per_element():
    stream = PromptStream(numbered(PromptStream.MATERIALISE_MAX_EXAMPLES + 1), seed=0)
    taken = stream.take(len(stream) - 2, 4)
    assert len(taken) == 4 and stream._epoch_cache == {}


def test_prompt_stream_rejects_bad_input():
    with pytest.raises(DataError):
        PromptStream([], seed=0)
    with pytest.raises(DataError, match="seed"):
        PromptStream(numbered(3), seed=-1)


@functools.cache
def shared_stream(size, seed):
    """One stream per (size, seed) for the property test, caching every epoch it reads
    (grain's index_shuffle costs ~40 ms per epoch of a small dataset)."""
    stream = PromptStream(numbered(size), seed=seed)
    stream._CACHED_EPOCHS = 10**6
    return stream


@settings(max_examples=60, deadline=None)
@given(
    size=st.sampled_from([4, 9, 30]),
    seed=st.sampled_from([0, 2**32 - 1]),
    position=st.integers(0, 40),
    chunks=st.lists(st.integers(0, 10), min_size=1, max_size=4),
)
def test_take_equals_concatenated_smaller_takes(size, seed, position, chunks):
    stream = shared_stream(size, seed)
    whole = stream.take(position, sum(chunks))
    pieces = []
    start = position
    for count in chunks:
        pieces += stream.take(start, count)
        start += count
    assert whole == pieces
    # Each epoch the range touches is a permutation of the examples.
    for epoch in {stream.epoch_of(p) for p in range(position, position + sum(chunks))}:
        counts = Counter(e["prompt"] for e in stream.take(epoch * size, size))
        assert len(counts) == size and set(counts.values()) == {1}


def test_single_example_stream():
    stream = PromptStream(numbered(1), seed=0)
    assert stream.take(0, 3) == numbered(1) * 3
    assert stream.epoch_of(2) == 2


# ---------------------------------------------------------------- load_examples


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_load_builtin_task():
    train, eval_examples = load_examples("reverse", None, None, 100, 20, seed=3)
    assert len(train) == 100 and len(eval_examples) == 20
    assert (train, eval_examples) == tasks.make_train_eval("reverse", 3, 100, 20)
    assert not {e["prompt"] for e in train} & {e["prompt"] for e in eval_examples}
    _, no_eval = load_examples("reverse", None, None, 10, 0, seed=3)
    assert no_eval == []


def test_load_builtin_task_errors():
    with pytest.raises(DataError, match="unknown task"):
        load_examples("chess", None, None, 10, 0, seed=0)
    with pytest.raises(DataError, match="not both"):
        load_examples("reverse", "x.jsonl", None, 10, 0, seed=0)
    with pytest.raises(DataError, match="train_prompts"):
        load_examples("reverse", None, None, 0, 0, seed=0)
    with pytest.raises(DataError, match="no data"):
        load_examples(None, None, None, 10, 0, seed=0)


def test_load_jsonl_happy_path(tmp_path):
    train_path = write_lines(
        tmp_path / "train.jsonl",
        [
            json.dumps({"prompt": "1+1=", "answer": "2"}),
            "",
            json.dumps({"prompt": "3 5 7>22=", "answer": "3*5+7", "numbers": [3, 5, 7], "target": 22}),
            json.dumps({"prompt": "2+2=", "answer": "4"}),
        ],
    )
    eval_path = write_lines(tmp_path / "eval.jsonl", [json.dumps({"prompt": "5+5=", "answer": "10"})])
    train, eval_examples = load_examples(None, train_path, eval_path, 0, 0, seed=0)
    assert [e["prompt"] for e in train] == ["1+1=", "3 5 7>22=", "2+2="]
    assert train[1]["numbers"] == [3, 5, 7] and train[1]["target"] == 22
    assert eval_examples == [{"prompt": "5+5=", "answer": "10"}]
    capped, no_eval = load_examples(None, train_path, None, 2, 5, seed=0)
    assert [e["prompt"] for e in capped] == ["1+1=", "3 5 7>22="]
    assert no_eval == []


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"prompt": "a=", "answer": "b"}', '{"prompt": "a=", "answer": '], r"train.jsonl:2: bad JSON"),
        (['{"answer": "b"}'], r"train.jsonl:1: missing 'prompt'"),
        (['{"prompt": "a="}'], r"train.jsonl:1: missing 'answer'"),
        (['{"prompt": 5, "answer": "b"}'], r"train.jsonl:1: 'prompt' must be a string, got int"),
        (['{"prompt": "a=", "answer": 7}'], r"train.jsonl:1: 'answer' must be a string, got int"),
        (['["a=", "b"]'], r"train.jsonl:1: expected a JSON object"),
        ([""], r"train.jsonl: empty file"),
    ],
)
def test_load_jsonl_errors(tmp_path, lines, message):
    path = write_lines(tmp_path / "train.jsonl", lines)
    with pytest.raises(DataError, match=message):
        load_examples(None, path, None, 0, 0, seed=0)


def test_load_jsonl_missing_file_and_empty(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        load_examples(None, str(tmp_path / "absent.jsonl"), None, 0, 0, seed=0)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty file"):
        load_examples(None, str(empty), None, 0, 0, seed=0)
    good = write_lines(tmp_path / "good.jsonl", ['{"prompt": "a=", "answer": "b"}'])
    with pytest.raises(DataError, match="empty.jsonl: empty file"):
        load_examples(None, good, str(empty), 0, 0, seed=0)


def test_data_error_is_value_error():
    assert issubclass(DataError, ValueError)


# ---------------------------------------------------------------- encode_prompts


def test_encode_prompts_left_pads_to_longest():
    tokenizer = CharTokenizer()
    tokens, valid = encode_prompts(tokenizer, ["ab", "abcd", ""], max_prompt_tokens=8)
    a, b, c, d = tokenizer.encode("abcd", add_bos=False)
    expected = np.array(
        [
            [0, 0, 1, a, b],
            [1, a, b, c, d],
            [0, 0, 0, 0, 1],
        ],
        dtype=np.int32,
    )
    assert tokens.dtype == np.int32 and valid.dtype == np.bool_
    np.testing.assert_array_equal(tokens, expected)
    np.testing.assert_array_equal(valid, expected != 0)
    assert [tokenizer.decode(row) for row in tokens] == ["ab", "abcd", ""]


def test_encode_prompts_no_extra_padding():
    tokens, valid = encode_prompts(CharTokenizer(), ["abc", "xyz"], max_prompt_tokens=100)
    assert tokens.shape == (2, 4) and valid.all()


def test_encode_prompts_limit():
    tokenizer = CharTokenizer()
    tokens, _ = encode_prompts(tokenizer, ["abc"], max_prompt_tokens=4)  # BOS + 3 = 4 fits
    assert tokens.shape == (1, 4)
    with pytest.raises(DataError, match="prompt 1 is 5 tokens .* max_prompt_tokens=4"):
        encode_prompts(tokenizer, ["abc", "abcd"], max_prompt_tokens=4)
    with pytest.raises(DataError):
        encode_prompts(tokenizer, [], max_prompt_tokens=4)

"""Dataset names in a config (`data.train_dataset` / `data.eval_dataset`, resolved by the caller's
`datasets`) and the one per-line check of JSONL training data (`parse_example_line`)."""

import json

import pytest

from trainers.config import ConfigError, parse_config
from trainers.data.examples import (
    MAX_EXAMPLE_NESTING,
    MAX_LINE_BYTES,
    DataError,
    jsonl_lines,
    parse_example_line,
    parse_jsonl_line,
    read_jsonl,
)

REWARDS = [{"name": "exact_match", "weight": 1.0}]


def _problems(raw, **kwargs) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, **kwargs)
    return info.value.as_dict()


@pytest.fixture
def root(tmp_path):
    for name in ("train", "eval", "other"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    return tmp_path


def test_a_name_resolves_to_its_file_and_means_jsonl(root):
    names = {"arith": str(root / "train.jsonl"), "bob/held-out": str(root / "eval.jsonl")}
    config = parse_config(
        {"data": {"train_dataset": "arith", "eval_dataset": "bob/held-out"}, "rewards": REWARDS},
        datasets=names,
        dataset_dirs=[str(root)],
    )
    assert config.data.task is None  # a dataset name, like a path, turns the default task off
    assert (config.data.train_path, config.data.eval_path) == (str(root / "train.jsonl"), str(root / "eval.jsonl"))
    assert config.data.train_dataset == "arith"


def test_a_callable_resolver_and_an_unknown_name(root):
    def lookup(name):
        return str(root / "train.jsonl") if name == "arith" else None

    assert parse_config(
        {"data": {"train_dataset": "arith"}, "rewards": REWARDS}, datasets=lookup
    ).data.train_path == str(root / "train.jsonl")
    problems = _problems(
        {"data": {"train_dataset": "arith", "eval_dataset": "alice/secret"}, "rewards": REWARDS}, datasets=lookup
    )
    assert list(problems) == ["data.eval_dataset"]
    assert "no dataset named 'alice/secret'" in problems["data.eval_dataset"]


def test_without_a_resolver_a_name_alone_is_refused_naming_the_field():
    problems = _problems({"data": {"train_dataset": "arith"}, "rewards": REWARDS})
    assert problems == {
        "data.train_dataset": "dataset names are resolved by the platform; the CLI reads data.train_path (a JSONL file)"
    }


def test_without_a_resolver_a_name_beside_a_path_is_a_label(root):
    # a platform run directory's config.yaml holds both; the CLI (export, generate) reads the path
    config = parse_config(
        {"data": {"train_dataset": "arith", "train_path": str(root / "train.jsonl")}, "rewards": REWARDS}
    )
    assert config.data.train_path == str(root / "train.jsonl")


def test_a_name_and_a_path_must_agree(root):
    names = {"arith": str(root / "train.jsonl")}
    agreeing = {"data": {"train_dataset": "arith", "train_path": "train.jsonl"}, "rewards": REWARDS}
    assert parse_config(agreeing, datasets=names, dataset_dirs=[str(root)]).data.train_path == str(root / "train.jsonl")
    problems = _problems(
        {"data": {"train_dataset": "arith", "train_path": "other.jsonl"}, "rewards": REWARDS},
        datasets=names,
        dataset_dirs=[str(root)],
    )
    assert problems == {
        "data.train_dataset": "names another file than data.train_path (other.jsonl); set only one of them"
    }


def test_a_resolved_file_outside_the_roots_is_still_refused(root, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "x.jsonl"
    elsewhere.write_text(json.dumps({"prompt": "a", "answer": "b"}) + "\n")
    problems = _problems(
        {"data": {"train_dataset": "x"}, "rewards": REWARDS}, datasets={"x": str(elsewhere)}, dataset_dirs=[str(root)]
    )
    assert list(problems) == ["data.train_path"]


def test_parse_example_line():
    assert parse_example_line('{"prompt": "2+2=", "answer": "4", "id": 7}') == {
        "prompt": "2+2=",
        "answer": "4",
        "id": 7,
    }
    assert parse_example_line("  \r") is None
    chat = parse_example_line('{"prompt": [{"role": "user", "content": "hi"}], "answer": "x"}')
    assert chat["prompt"] == [{"role": "user", "content": "hi"}]
    for line, message in [
        ('{"prompt": "a", ', "bad JSON: Expecting property name enclosed in double quotes (column 17)"),
        ("[1]", "expected a JSON object, got list"),
        ('{"answer": "4"}', "missing 'prompt' (fields: ['answer'])"),
        ('{"prompt": "a"}', "missing 'answer' (fields: ['prompt'])"),
        ('{"prompt": "a", "answer": 4}', "'answer' must be a string, got int 4"),
        ('{"prompt": [], "answer": "4"}', "'prompt' is not a valid message list"),
    ]:
        with pytest.raises(DataError) as info:
            parse_example_line(line)
        assert str(info.value).startswith(message), (line, str(info.value))


def test_read_jsonl_ends_lines_at_newline_only(tmp_path):
    # U+2028 inside a JSON string is valid JSON; str.splitlines would cut the line there
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"prompt": "a\u2028b", "answer": "c"}, ensure_ascii=False)
        + "\r\n\n"
        + json.dumps({"prompt": "d", "answer": "e"})
        + "\n",
        encoding="utf-8",
    )
    assert [e["prompt"] for e in read_jsonl(str(path))] == ["a\u2028b", "d"]
    path.write_text('{"prompt": "a", "answer": "b"}\n{"prompt": 1, "answer": "b"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:2: 'prompt' must be a string"):
        read_jsonl(str(path))


DEEP = "[" * 100_000 + "]" * 100_000
TOO_DEEP = f"nested deeper than {MAX_EXAMPLE_NESTING} levels of lists and objects"


@pytest.mark.parametrize(
    "line",
    [
        DEEP,  # the decoder's own RecursionError
        '{"prompt": "a", "answer": "b", "x": ' + DEEP + "}",
        '{"prompt": "a", "answer": "b", "x": ' + "[" * 100 + "]" * 100 + "}",  # 101 levels: parses, still refused
    ],
)
def test_deep_nesting_is_a_data_error_not_a_recursion_error(line):
    with pytest.raises(DataError) as info:
        parse_example_line(line)
    assert str(info.value).startswith(TOO_DEEP)
    deepest_allowed = '{"prompt": "a", "answer": "b", "x": ' + "[" * 99 + "]" * 99 + "}"  # 100 levels
    assert parse_example_line(deepest_allowed)["answer"] == "b"


def test_jsonl_lines_splits_chunks_at_newlines_and_never_holds_a_long_line():
    assert list(jsonl_lines([b"ab\ncd", b"ef\n", b"x" * 10, b"y\nz"], max_line_bytes=5)) == [
        (b"ab", 2),
        (b"cdef", 4),
        (None, 11),
        (b"z", 1),
    ]
    assert list(jsonl_lines([b"ab\n"], max_line_bytes=5)) == [(b"ab", 2), (b"", 0)]
    assert list(jsonl_lines([], max_line_bytes=5)) == [(b"", 0)]
    assert list(jsonl_lines([b"12345\n123456"], max_line_bytes=5)) == [(b"12345", 5), (None, 6)]

    held = []

    def endless_line():  # 64 MiB without a newline, one 1 MiB chunk at a time
        for _ in range(64):
            held.append(1)
            yield b"x" * (1 << 20)

    lines = jsonl_lines(endless_line(), max_line_bytes=1000)
    assert next(lines) == (None, 64 << 20) and len(held) == 64


def test_a_line_over_the_limit_is_refused_before_parsing_naming_its_size():
    with pytest.raises(DataError) as info:
        parse_jsonl_line(None, MAX_LINE_BYTES + 7)
    assert str(info.value) == (
        f"the line is {MAX_LINE_BYTES + 7} bytes, over the limit of {MAX_LINE_BYTES} bytes a "
        "line; shorten it or split the example"
    )
    with pytest.raises(DataError, match="not UTF-8 text \\(invalid start byte at byte 2 of the line\\)"):
        parse_jsonl_line(b"{\xff", 2)
    assert parse_jsonl_line(b'{"prompt": "a", "answer": "b"}', 30) == {"prompt": "a", "answer": "b"}


def test_read_jsonl_refuses_long_and_deep_lines_naming_file_and_line(tmp_path):
    path = tmp_path / "d.jsonl"
    good = json.dumps({"prompt": "a", "answer": "b"})
    long_line = json.dumps({"prompt": "a" * MAX_LINE_BYTES, "answer": "b"})
    path.write_text(good + "\n" + long_line + "\n")
    with pytest.raises(DataError) as info:
        read_jsonl(str(path))
    assert str(info.value) == (
        f"{path}:2: the line is {len(long_line)} bytes, over the limit of {MAX_LINE_BYTES} "
        "bytes a line; shorten it or split the example"
    )
    path.write_text(good + "\n\n" + DEEP + "\n")
    with pytest.raises(DataError, match=f"d.jsonl:3: {TOO_DEEP}"):
        read_jsonl(str(path))
    path.write_bytes(good.encode() + b"\n" + b'{"prompt": "\xff", "answer": "b"}')
    with pytest.raises(DataError, match="d.jsonl:2: not UTF-8 text"):
        read_jsonl(str(path))


# ---------------------------------------------------------------- private_dirs: uploads only by name


@pytest.fixture
def uploads(root):
    """root/users/1/secret.jsonl (an upload) and a symlink in the root leading to it."""
    secret = root / "users" / "1" / "secret.jsonl"
    secret.parent.mkdir(parents=True)
    secret.write_text(json.dumps({"prompt": "victim's prompt", "answer": "victim's answer"}) + "\n")
    (root / "link.jsonl").symlink_to(secret)
    (root / "sub").mkdir()
    return secret


PRIVATE_MESSAGE = (
    "not allowed: {path} is in the uploaded datasets; name an uploaded dataset in data.{field} "
    "instead (your own by name, one shared with you as owner/name)"
)


@pytest.mark.parametrize(
    "path",
    [
        "users/1/secret.jsonl",
        "users/1/missing.jsonl",
        "users/999/x.jsonl",
        "users",
        "sub/../users/1/secret.jsonl",
        "./users//1/./secret.jsonl",
        "link.jsonl",
        "{root}/users/1/secret.jsonl",
        "{root}/sub/../users/1/missing.jsonl",
    ],
)
def test_a_path_into_the_private_dirs_is_refused_naming_the_dataset_field(root, uploads, path):
    path = path.format(root=root)
    for path_field, name_field in (("train_path", "train_dataset"), ("eval_path", "eval_dataset")):
        data = {"train_path": "train.jsonl", path_field: path}
        problems = _problems(
            {"data": data, "rewards": REWARDS},
            dataset_dirs=[str(root)],
            datasets={},
            private_dirs=[str(root / "users")],
        )
        # one message whether or not the file exists
        assert problems == {f"data.{path_field}": PRIVATE_MESSAGE.format(path=path, field=name_field)}


def test_a_path_a_dataset_name_resolved_to_may_lie_in_the_private_dirs(root, uploads):
    private = {"dataset_dirs": [str(root)], "private_dirs": [str(root / "users")]}
    names = {"secret": str(uploads)}
    config = parse_config({"data": {"train_dataset": "secret"}, "rewards": REWARDS}, datasets=names, **private)
    assert config.data.train_path == str(uploads)
    # validated again (a run directory's config holds both): the path agrees with the name
    again = parse_config(config.model_dump(mode="json", by_alias=True), datasets=names, **private)
    assert again.data.train_path == str(uploads)
    # a name that resolves elsewhere does not let a private path through beside it
    names["mine"] = str(root / "train.jsonl")
    problems = _problems(
        {"data": {"train_dataset": "mine", "train_path": "users/1/secret.jsonl"}, "rewards": REWARDS},
        datasets=names,
        **private,
    )
    assert list(problems) == ["data.train_dataset", "data.train_path"]
    assert "data.train_dataset" in problems["data.train_path"]
    # nor does a name the resolver does not know
    problems = _problems(
        {"data": {"train_dataset": "alice/secret", "train_path": str(uploads)}, "rewards": REWARDS},
        datasets=names,
        **private,
    )
    assert list(problems) == ["data.train_dataset", "data.train_path"]


def test_without_private_dirs_paths_in_the_uploads_tree_are_only_checked_against_the_roots(root, uploads):
    config = parse_config(
        {"data": {"train_path": "users/1/secret.jsonl"}, "rewards": REWARDS}, dataset_dirs=[str(root)]
    )
    assert config.data.train_path == str(uploads)
    assert parse_config(
        {"data": {"train_path": "train.jsonl"}, "rewards": REWARDS},
        dataset_dirs=[str(root)],
        private_dirs=[str(root / "users")],
    ).data.train_path == str(root / "train.jsonl")

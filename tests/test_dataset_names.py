"""Dataset names in a config (`data.train_dataset` / `data.eval_dataset`, resolved by the caller's
`datasets`) and the one per-line check of JSONL training data (`parse_example_line`)."""

import json

import pytest

from trainers.config import ConfigError, parse_config
from trainers.data.examples import DataError, parse_example_line, read_jsonl

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
    config = parse_config({"data": {"train_dataset": "arith", "eval_dataset": "bob/held-out"}, "rewards": REWARDS},
                          datasets=names, dataset_dirs=[str(root)])
    assert config.data.task is None  # a dataset name, like a path, turns the default task off
    assert (config.data.train_path, config.data.eval_path) == (str(root / "train.jsonl"), str(root / "eval.jsonl"))
    assert config.data.train_dataset == "arith"


def test_a_callable_resolver_and_an_unknown_name(root):
    def lookup(name):
        return str(root / "train.jsonl") if name == "arith" else None

    assert parse_config({"data": {"train_dataset": "arith"}, "rewards": REWARDS}, datasets=lookup).data.train_path \
        == str(root / "train.jsonl")
    problems = _problems({"data": {"train_dataset": "arith", "eval_dataset": "alice/secret"}, "rewards": REWARDS},
                         datasets=lookup)
    assert list(problems) == ["data.eval_dataset"]
    assert "no dataset named 'alice/secret'" in problems["data.eval_dataset"]


def test_without_a_resolver_a_name_alone_is_refused_naming_the_field():
    problems = _problems({"data": {"train_dataset": "arith"}, "rewards": REWARDS})
    assert problems == {"data.train_dataset": "dataset names are resolved by the platform; the CLI reads "
                                              "data.train_path (a JSONL file)"}


def test_without_a_resolver_a_name_beside_a_path_is_a_label(root):
    # a platform run directory's config.yaml holds both; the CLI (export, generate) reads the path
    config = parse_config({"data": {"train_dataset": "arith", "train_path": str(root / "train.jsonl")},
                           "rewards": REWARDS})
    assert config.data.train_path == str(root / "train.jsonl")


def test_a_name_and_a_path_must_agree(root):
    names = {"arith": str(root / "train.jsonl")}
    agreeing = {"data": {"train_dataset": "arith", "train_path": "train.jsonl"}, "rewards": REWARDS}
    assert parse_config(agreeing, datasets=names, dataset_dirs=[str(root)]).data.train_path == str(root / "train.jsonl")
    problems = _problems({"data": {"train_dataset": "arith", "train_path": "other.jsonl"}, "rewards": REWARDS},
                         datasets=names, dataset_dirs=[str(root)])
    assert problems == {"data.train_dataset": "names another file than data.train_path (other.jsonl); "
                                              "set only one of them"}


def test_a_resolved_file_outside_the_roots_is_still_refused(root, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "x.jsonl"
    elsewhere.write_text(json.dumps({"prompt": "a", "answer": "b"}) + "\n")
    problems = _problems({"data": {"train_dataset": "x"}, "rewards": REWARDS},
                         datasets={"x": str(elsewhere)}, dataset_dirs=[str(root)])
    assert list(problems) == ["data.train_path"]


def test_parse_example_line():
    assert parse_example_line('{"prompt": "2+2=", "answer": "4", "id": 7}') == {"prompt": "2+2=", "answer": "4", "id": 7}
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
    path.write_text(json.dumps({"prompt": "a\u2028b", "answer": "c"}, ensure_ascii=False) + "\r\n\n"
                    + json.dumps({"prompt": "d", "answer": "e"}) + "\n", encoding="utf-8")
    assert [e["prompt"] for e in read_jsonl(str(path))] == ["a\u2028b", "d"]
    path.write_text('{"prompt": "a", "answer": "b"}\n{"prompt": 1, "answer": "b"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.jsonl:2: 'prompt' must be a string"):
        read_jsonl(str(path))

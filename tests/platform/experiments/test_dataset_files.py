"""experiments.dataset_files: an upload checked line by line (the trainer's own line check), with
hand-written files: good, bad JSON at line 3, missing "prompt" at line 2, not UTF-8, empty, too big."""

from __future__ import annotations

import hashlib
import io
import json
import tracemalloc

from experiments.dataset_files import MAX_ERRORS_SHOWN, check_jsonl, name_problem, relative_path, write_checked

GOOD = (
    b'{"prompt": "1+1=", "answer": "2"}\n'
    b'\n'
    b'{"prompt": [{"role": "user", "content": "2+2="}], "answer": "4", "id": 7}\r\n'
    b'{"prompt": "3+3=", "answer": "6"}'
)  # no newline at the end


def _check(content: bytes, max_bytes: int = 10_000, chunk_bytes: int = 7):
    chunks = [content[i : i + chunk_bytes] for i in range(0, len(content), chunk_bytes)]
    return check_jsonl(chunks, "d.jsonl", max_bytes)


def test_a_good_file():
    check = _check(GOOD)
    assert check.ok and check.errors == []
    assert (check.rows, check.size_bytes) == (3, len(GOOD))
    assert check.sha256 == hashlib.sha256(GOOD).hexdigest()
    assert check.preview == [
        {"prompt": "1+1=", "answer": "2"},
        {"prompt": [{"role": "user", "content": "2+2="}], "answer": "4", "id": 7},
        {"prompt": "3+3=", "answer": "6"},
    ]


def test_chunks_split_anywhere_give_the_same_check():
    results = {(c.rows, c.sha256, json.dumps(c.preview)) for c in (_check(GOOD, chunk_bytes=n) for n in (1, 2, 5, 64))}
    assert len(results) == 1


def test_bad_json_at_line_3():
    content = b'{"prompt": "a", "answer": "b"}\n{"prompt": "c", "answer": "d"}\n{"prompt": "e", "answer": }\n'
    assert _check(content).errors == ["d.jsonl:3: bad JSON: Expecting value (column 27)"]


def test_missing_prompt_at_line_2():
    content = b'{"prompt": "a", "answer": "b"}\n{"question": "c", "answer": "d"}\n'
    assert _check(content).errors == ["d.jsonl:2: missing 'prompt' (fields: ['answer', 'question'])"]


def test_not_utf8():
    content = b'{"prompt": "a", "answer": "b"}\n{"prompt": "caf\xe9", "answer": "d"}\n'
    assert _check(content).errors == ["d.jsonl:2: not UTF-8 text (invalid continuation byte at byte 16 of the line)"]


def test_empty_and_blank_files():
    assert _check(b"").errors == ["d.jsonl: empty file, no examples"]
    assert _check(b"\n \n").errors == ["d.jsonl: no examples (only blank lines)"]


def test_too_big_stops_reading():
    check = _check(GOOD, max_bytes=50, chunk_bytes=20)
    assert check.errors == [
        "d.jsonl: larger than this server's limit of 50 bytes (PLATFORM_DATASET_MAX_BYTES); split it or ask an admin"
    ]
    assert check.size_bytes == 60  # the chunk that crossed the limit is the last one read


def test_first_20_errors_then_a_count():
    content = b"".join(b"[%d]\n" % i for i in range(25))
    check = _check(content)
    assert len(check.errors) == MAX_ERRORS_SHOWN and check.more_errors == 5
    assert check.error_lines()[0] == "d.jsonl:1: expected a JSON object, got list"
    assert check.error_lines()[-1] == "and 5 more"


def test_a_long_string_is_cut_in_the_preview_only():
    long_prompt = "x" * 5000
    check = _check(json.dumps({"prompt": long_prompt, "answer": "y"}).encode(), chunk_bytes=1000)
    assert check.ok and check.preview[0]["prompt"] == "x" * 2000 + "…"


def test_names_and_paths():
    assert name_problem("arith-v1.2_x") == ""
    for bad in ("", "../x", "a/b", ".hidden", "x" * 65, "spa ce", None, 3):
        assert name_problem(bad), bad
    assert relative_path(12, "arith") == "users/12/arith.jsonl"


def test_write_checked_keeps_only_a_good_file(tmp_path):
    check, path = write_checked([GOOD], "d.jsonl", 10_000, str(tmp_path / "users" / "1"))
    assert check.ok and open(path, "rb").read() == GOOD
    check, path = write_checked([b"[1]\n"], "d.jsonl", 10_000, str(tmp_path / "users" / "1"))
    assert not check.ok and path == ""
    assert len(list((tmp_path / "users" / "1").iterdir())) == 1  # the bad one's temporary file is gone


def test_check_jsonl_writes_what_it_reads():
    sink = io.BytesIO()
    check_jsonl([GOOD[:10], GOOD[10:]], "d.jsonl", 10_000, sink)
    assert sink.getvalue() == GOOD


def test_a_line_over_the_limit_is_refused_without_being_held():
    """A 64 MiB line arriving in 1 MiB chunks: refused naming its line and size, and the check never
    holds more than a chunk or two of it beside MAX_LINE_BYTES."""
    from trainers.data.examples import MAX_LINE_BYTES

    good = b'{"prompt": "a", "answer": "b"}\n'
    chunks_made = []

    def chunks():
        yield good
        for _ in range(64):
            chunks_made.append(1)
            yield b"x" * (1 << 20)
        yield b"\n" + good

    tracemalloc.start()
    try:
        check = check_jsonl(chunks(), "d.jsonl", max_bytes=1 << 30)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak_bytes < 8 << 20  # a few chunks and at most MAX_LINE_BYTES of the line, not its 64 MiB
    assert check.errors == [
        f"d.jsonl:2: the line is {64 << 20} bytes, over the limit of {MAX_LINE_BYTES} bytes a "
        "line; shorten it or split the example"
    ]
    assert check.rows == 2 and len(chunks_made) == 64

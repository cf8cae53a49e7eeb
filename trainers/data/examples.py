"""Dataset items ("examples": `{"prompt", "answer", ...}` dicts; "prompt" a string or, from JSONL, a
list of chat messages) from a built-in task or JSONL files.
JAX-free: validation and the platform's plan preview count a dataset with it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from trainers.data import tasks
from trainers.data.chat_template import validate_messages


class DataError(ValueError):
    """A dataset file or prompt is unusable; the message says where and why."""


MAX_LINE_BYTES = 1 << 20  # one line of a JSONL dataset, checked before it is parsed (1 MiB)
MAX_EXAMPLE_NESTING = 100  # lists and objects inside one example (a chat prompt needs 3)
READ_CHUNK_BYTES = 1 << 16
TOO_DEEP = (
    f"nested deeper than {MAX_EXAMPLE_NESTING} levels of lists and objects; an example is an object of text fields"
)


def read_jsonl(path: str) -> list[dict]:
    """Reads examples from a JSONL file: one JSON object per line, each checked by
    `parse_jsonl_line` (at most MAX_LINE_BYTES, UTF-8, then `parse_example_line`: a string
    "answer"; a "prompt" that is a string or a chat conversation; extra fields kept). Lines
    end at "\\n" only (a JSON string may hold U+2028 and other characters str.splitlines
    would split at); blank lines are skipped. The file is read in chunks (`jsonl_lines`), so
    an over-long line is never held whole. Raises DataError naming file:line and the problem
    (missing file, a line too long, not UTF-8, bad JSON, nested too deep, not an object,
    missing or wrongly typed prompt/answer, a malformed message, no examples at all)."""
    examples = []
    try:
        with open(path, "rb") as stream:
            chunks = iter(lambda: stream.read(READ_CHUNK_BYTES), b"")
            for line_number, (line, size_bytes) in enumerate(jsonl_lines(chunks), start=1):
                try:
                    example = parse_jsonl_line(line, size_bytes)
                except DataError as error:
                    raise DataError(f"{path}:{line_number}: {error}") from error
                if example is not None:
                    examples.append(example)
    except OSError as error:
        raise DataError(f"{path}: cannot read: {error.strerror or error}") from error
    if not examples:
        raise DataError(f"{path}: empty file, no examples")
    return examples


def jsonl_lines(chunks: Iterable[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes | None, int]]:
    """Split bytes arriving as `chunks` (split anywhere) into lines at b"\\n" only: yields
    (line without its "\\n", its size in bytes) for every line, the last one after the final
    "\\n" included (b"" when the text ends with one). A line longer than `max_line_bytes` comes
    as (None, its size): it is counted, never held, so at most max_line_bytes of one line (plus
    the current chunk) are in memory."""
    head, size_bytes = b"", 0  # the current line so far (dropped once over the limit) and its size
    for chunk in chunks:
        *ended, rest = chunk.split(b"\n")
        for piece in ended:
            size_bytes += len(piece)
            yield (head + piece if size_bytes <= max_line_bytes else None), size_bytes
            head, size_bytes = b"", 0
        size_bytes += len(rest)
        head = head + rest if size_bytes <= max_line_bytes else b""
    yield (head if size_bytes <= max_line_bytes else None), size_bytes


def parse_jsonl_line(line: bytes | None, size_bytes: int, max_line_bytes: int = MAX_LINE_BYTES) -> dict | None:
    """One line from `jsonl_lines` -> its example (`parse_example_line`), or None for a blank
    line. Raises DataError (no location: the caller adds file:line) for a line over
    `max_line_bytes` (checked before anything is parsed) or one that is not UTF-8."""
    if line is None or size_bytes > max_line_bytes:
        raise DataError(
            f"the line is {size_bytes} bytes, over the limit of {max_line_bytes} bytes a line; "
            "shorten it or split the example"
        )
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"not UTF-8 text ({error.reason} at byte {error.start + 1} of the line)") from None
    return parse_example_line(text)


def parse_example_line(line: str) -> dict | None:
    """One line of a JSONL dataset -> its example, or None for a blank line (whitespace
    only). The one line check of training data: the platform's upload validation uses it
    too (through `parse_jsonl_line`), so an upload is accepted exactly when training would
    read it. An example is a JSON object, nested at most MAX_EXAMPLE_NESTING levels, with a
    string "answer" and a "prompt" that is a string or a non-empty list of {"role": str,
    "content": str} messages (chat_template.validate_messages, which normalises it); other
    fields are kept. Raises DataError with the problem (no location: the caller adds
    file:line)."""
    if not line.strip():
        return None
    try:
        example = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"bad JSON: {error.msg} (column {error.colno})") from error
    except RecursionError:  # the decoder's own guard against deep nesting
        raise DataError(TOO_DEEP) from None
    if _nesting_levels(example) > MAX_EXAMPLE_NESTING:
        raise DataError(TOO_DEEP)
    if not isinstance(example, dict):
        raise DataError(f"expected a JSON object, got {type(example).__name__}")
    if "prompt" not in example:
        raise DataError(f"missing 'prompt' (fields: {sorted(example)})")
    if isinstance(example["prompt"], list):
        try:
            example["prompt"] = validate_messages(example["prompt"])
        except ValueError as error:
            raise DataError(f"'prompt' is not a valid message list: {error}") from error
    elif not isinstance(example["prompt"], str):
        raise DataError(
            f"'prompt' must be a string, got {type(example['prompt']).__name__} "
            f"{example['prompt']!r} (or a list of {{\"role\", \"content\"}} chat messages)"
        )
    if "answer" not in example:
        raise DataError(f"missing 'answer' (fields: {sorted(example)})")
    if not isinstance(example["answer"], str):
        raise DataError(f"'answer' must be a string, got {type(example['answer']).__name__} {example['answer']!r}")
    return example


def _nesting_levels(value: object) -> int:
    """How deeply lists and objects nest in `value` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item if isinstance(child, (dict, list)))
    return deepest


def load_examples(
    task: str | None,
    train_path: str | None,
    eval_path: str | None,
    train_prompts: int,
    eval_prompts: int,
    seed: int,
) -> tuple[list[dict], list[dict]]:
    """Returns (train, eval) examples from a built-in task or from JSONL files.

    Built-in task (train_path and eval_path None): train_prompts (> 0) and
    eval_prompts (>= 0) examples generated from `seed`, disjoint by prompt.
    JSONL (task None): train from train_path, eval from eval_path (None gives an
    empty eval list); train_prompts / eval_prompts keep the first that many
    examples of each file when > 0, 0 keeps all. `seed` is unused for JSONL.
    """
    if train_prompts < 0 or eval_prompts < 0:
        raise DataError(f"train_prompts and eval_prompts must be >= 0, got {train_prompts}, {eval_prompts}")
    if task is not None:
        if train_path is not None or eval_path is not None:
            raise DataError("give either a built-in task or train_path/eval_path, not both")
        if task not in tasks.TASKS:
            raise DataError(tasks.TASKS.unknown(task))
        if train_prompts == 0:
            raise DataError(f"task {task!r}: train_prompts must be > 0 for a built-in task")
        try:
            return tasks.make_train_eval(task, seed, train_prompts, eval_prompts)
        except ValueError as error:
            raise DataError(str(error)) from error
    if train_path is None:
        raise DataError("no data: give a built-in task or a train_path")
    train = read_jsonl(train_path)
    eval_examples = read_jsonl(eval_path) if eval_path is not None else []
    if train_prompts > 0:
        train = train[:train_prompts]
    if eval_prompts > 0:
        eval_examples = eval_examples[:eval_prompts]
    return train, eval_examples

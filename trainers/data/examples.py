"""Dataset items ("examples": `{"prompt", "answer", ...}` dicts; "prompt" a string or, from JSONL, a
list of chat messages) from a built-in task or JSONL files.
JAX-free: validation and the platform's plan preview count a dataset with it."""

from __future__ import annotations

import json
from pathlib import Path

from trainers.data import tasks
from trainers.data.chat_template import validate_messages


class DataError(ValueError):
    """A dataset file or prompt is unusable; the message says where and why."""


def read_jsonl(path: str) -> list[dict]:
    """Reads examples from a JSONL file: one JSON object per line, each checked by
    `parse_example_line` (a string "answer"; a "prompt" that is a string or a chat
    conversation; extra fields kept). Lines end at "\\n" only (a JSON string may hold
    U+2028 and other characters str.splitlines would split at); blank lines are
    skipped. Raises DataError naming file:line and the problem (missing file, not
    UTF-8, bad JSON, not an object, missing or wrongly typed prompt/answer, a
    malformed message, no examples at all)."""
    file_path = Path(path)
    try:
        text = file_path.read_text(encoding="utf-8")
    except OSError as error:
        raise DataError(f"{path}: cannot read: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text: {error}") from error
    examples = []
    for line_number, line in enumerate(text.split("\n"), start=1):
        try:
            example = parse_example_line(line)
        except DataError as error:
            raise DataError(f"{path}:{line_number}: {error}") from error
        if example is not None:
            examples.append(example)
    if not examples:
        raise DataError(f"{path}: empty file, no examples")
    return examples


def parse_example_line(line: str) -> dict | None:
    """One line of a JSONL dataset -> its example, or None for a blank line (whitespace
    only). The one line check of training data: the platform's upload validation uses it
    too, so an upload is accepted exactly when training would read it. An example is a
    JSON object with a string "answer" and a "prompt" that is a string or a non-empty list
    of {"role": str, "content": str} messages (chat_template.validate_messages, which
    normalises it); other fields are kept. Raises DataError with the problem (no
    location: the caller adds file:line)."""
    if not line.strip():
        return None
    try:
        example = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"bad JSON: {error.msg} (column {error.colno})") from error
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
            raise DataError(f"unknown task {task!r}; known: {', '.join(tasks.TASK_NAMES)}")
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

"""Datasets of prompts: loading, the epoch-after-epoch prompt stream, prompt encoding.

The data position of a run is one integer: the number of prompts consumed so
far. PromptStream maps global position p to an example (epoch p // len, a
per-epoch shuffle from the seed), so resuming is continuing from the saved
integer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trainers import tasks

_MAX_SEED = 2**32 - 1  # grain's shuffle seed range is [0, 2**32 - 1]


class DataError(ValueError):
    """A dataset file or prompt is unusable; the message says where and why."""


def read_jsonl(path: str) -> list[dict]:
    """Reads examples from a JSONL file: one JSON object per line with string
    "prompt" and "answer" (extra fields, e.g. countdown "numbers"/"target", are
    kept). Blank lines are skipped. Raises DataError naming file:line and the
    problem (missing file, bad JSON, not an object, missing or non-string
    prompt/answer, no examples at all)."""
    file_path = Path(path)
    try:
        text = file_path.read_text(encoding="utf-8")
    except OSError as error:
        raise DataError(f"{path}: cannot read: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text: {error}") from error
    examples = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_number}"
        try:
            example = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{where}: bad JSON: {error.msg} (column {error.colno})") from error
        if not isinstance(example, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(example).__name__}")
        for field in ("prompt", "answer"):
            if field not in example:
                raise DataError(f"{where}: missing {field!r} (fields: {sorted(example)})")
            if not isinstance(example[field], str):
                raise DataError(
                    f"{where}: {field!r} must be a string, got {type(example[field]).__name__} "
                    f"{example[field]!r}"
                )
        examples.append(example)
    if not examples:
        raise DataError(f"{path}: empty file, no examples")
    return examples


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


class PromptStream:
    """An infinite stream over `examples`, epoch after epoch, reshuffled per epoch.

    Global position p (prompts consumed since the start of the run) holds the
    example at place p % len(self) of epoch p // len(self)'s permutation. The
    permutations come from grain, MapDataset.source(examples).shuffle(s).repeat(),
    which reshuffles each epoch (with grain seed s + epoch); s is derived from
    `seed` by hashing so that runs with adjacent seeds do not share epoch orders
    shifted by one. Everything depends only on (examples, seed): any position can
    be read again, so resuming a run needs only its position.

    grain's index_shuffle costs about 40 ms / len(examples) per call for small
    datasets (13 ms per element at 2 examples, 35 us at 1000, then ~30 us through
    grain's dataset layers), so a stream of at most MATERIALISE_MAX_EXAMPLES
    examples reads a whole epoch's order at once (~40-150 ms per epoch) and keeps
    the last two epochs; a larger one reads element by element. Both paths give
    the same examples.
    """

    MATERIALISE_MAX_EXAMPLES = 4096
    _CACHED_EPOCHS = 2

    def __init__(self, examples: list[dict], seed: int) -> None:
        if not examples:
            raise DataError("PromptStream needs at least one example")
        if not 0 <= seed <= _MAX_SEED:
            raise DataError(f"PromptStream seed must be in [0, 2**32 - 1], got {seed}")
        self._examples_per_epoch = len(examples)
        grain_seed = int(np.random.SeedSequence(seed).generate_state(1)[0])
        import grain  # loaded only when a run streams prompts (validation stays free of JAX)

        self._dataset = grain.MapDataset.source(list(examples)).shuffle(seed=grain_seed).repeat(None)
        self._epoch_cache: dict[int, list[dict]] = {}

    def __len__(self) -> int:
        """Examples per epoch."""
        return self._examples_per_epoch

    def epoch_of(self, position: int) -> int:
        """Epoch (0-based) of global position `position`."""
        if position < 0:
            raise ValueError(f"position must be >= 0, got {position}")
        return position // self._examples_per_epoch

    def _epoch_examples(self, epoch: int) -> list[dict]:
        """Returns the examples of `epoch` in stream order (shared, not copied)."""
        if epoch not in self._epoch_cache:
            start = epoch * self._examples_per_epoch
            order = [self._dataset[start + place] for place in range(self._examples_per_epoch)]
            if len(self._epoch_cache) >= self._CACHED_EPOCHS:
                del self._epoch_cache[min(self._epoch_cache)]
            self._epoch_cache[epoch] = order
        return self._epoch_cache[epoch]

    def take(self, position: int, count_prompts: int) -> list[dict]:
        """Returns the examples at global positions [position, position + count_prompts)
        as shallow copies; a range crossing an epoch boundary takes the end of one
        epoch then the start of the next (nothing dropped or repeated)."""
        if position < 0 or count_prompts < 0:
            raise ValueError(f"position and count_prompts must be >= 0, got {position}, {count_prompts}")
        indices = range(position, position + count_prompts)
        if self._examples_per_epoch > self.MATERIALISE_MAX_EXAMPLES:
            return [dict(self._dataset[index]) for index in indices]
        taken = []
        for index in indices:
            epoch, place = divmod(index, self._examples_per_epoch)
            taken.append(dict(self._epoch_examples(epoch)[place]))
        return taken


def encode_prompts(tokenizer, prompts: list[str], max_prompt_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Encodes prompts as BOS + characters, left-padded to the longest prompt here.

    Args:
      tokenizer: has encode(text, add_bos=True) and pad_id.
      prompts: B prompt strings (B >= 1).
      max_prompt_tokens: limit on one prompt's token count, BOS included.

    Returns:
      tokens: [B, Lp] int32, Lp = longest encoded prompt; padding (pad_id) on the left.
      valid: [B, Lp] bool, True on real tokens (BOS included), False on padding.

    Raises DataError if prompts is empty or a prompt exceeds max_prompt_tokens.
    """
    if not prompts:
        raise DataError("encode_prompts needs at least one prompt")
    encoded = [tokenizer.encode(prompt, add_bos=True) for prompt in prompts]
    for index, ids in enumerate(encoded):
        if len(ids) > max_prompt_tokens:
            raise DataError(
                f"prompt {index} is {len(ids)} tokens (BOS included), over the limit "
                f"max_prompt_tokens={max_prompt_tokens}: {prompts[index][:60]!r}"
            )
    length_tokens = max(len(ids) for ids in encoded)
    tokens = np.full((len(encoded), length_tokens), tokenizer.pad_id, dtype=np.int32)
    valid = np.zeros((len(encoded), length_tokens), dtype=bool)
    for row, ids in enumerate(encoded):
        tokens[row, length_tokens - len(ids) :] = ids
        valid[row, length_tokens - len(ids) :] = True
    return tokens, valid

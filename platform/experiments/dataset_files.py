"""An uploaded JSONL dataset, checked line by line as it streams in, and written atomically.

`check_jsonl` is pure (bytes in, a `DatasetCheck` out): every line goes through the trainer's own
line check (`trainers.data.examples.jsonl_lines` and `parse_jsonl_line`, which `read_jsonl` uses),
so an upload is accepted exactly when training would read the file. Lines end at "\\n" only; each
must be at most the trainer's MAX_LINE_BYTES (refused before it is parsed, and never held whole),
UTF-8, and nested at most MAX_EXAMPLE_NESTING levels. Problems read `name.jsonl:LINE: message`
(the first MAX_ERRORS_SHOWN, then "and N more"). `write_checked` streams an upload through
`check_jsonl` into a temporary file beside the destination; the caller renames it into place
(`os.replace`) once the dataset's row exists, or removes it."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from trainers.data.examples import DataError, jsonl_lines, parse_jsonl_line

MAX_ERRORS_SHOWN = 20
PREVIEW_ROWS = 5
PREVIEW_TEXT_CHARS = 2_000  # a preview's strings are cut to this many characters
NAME_MAX_CHARS = 64
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_RULE = f"1-{NAME_MAX_CHARS} letters, digits, '.', '_' or '-', starting with a letter or digit"


def name_problem(name: object) -> str:
    """Why `name` cannot name a dataset ('' when it can)."""
    if not isinstance(name, str) or not name:
        return f"required: {NAME_RULE}"
    if not NAME_PATTERN.fullmatch(name):
        return f"{name[:80]!r} is not a dataset name: {NAME_RULE}"
    return ""


UPLOADS_FOLDER = "users"  # the uploads tree inside the first dataset root: read through dataset names only


def relative_path(user_id: int, name: str) -> str:
    """Where a user's dataset lies, relative to the first dataset root."""
    return os.path.join(UPLOADS_FOLDER, str(int(user_id)), f"{name}.jsonl")


@dataclasses.dataclass
class DatasetCheck:
    """What `check_jsonl` found. `errors` is empty when the file is a usable dataset."""

    file_name: str
    size_bytes: int = 0
    rows: int = 0
    sha256: str = ""
    preview: list[dict] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    more_errors: int = 0  # problems found beyond the MAX_ERRORS_SHOWN in `errors`

    @property
    def ok(self) -> bool:
        return not self.errors

    def add_error(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS_SHOWN:
            self.errors.append(message)
        else:
            self.more_errors += 1

    def error_lines(self) -> list[str]:
        """The problems to show, one a line, with "and N more" when some were left out."""
        return self.errors + ([f"and {self.more_errors} more"] if self.more_errors else [])

    def error_text(self) -> str:
        return "\n".join(self.error_lines())


def check_jsonl(chunks: Iterable[bytes], file_name: str, max_bytes: int, sink: BinaryIO | None = None) -> DatasetCheck:
    """Check a JSONL dataset arriving as `chunks` of bytes (split anywhere), writing them to `sink`
    when given. Stops reading once more than `max_bytes` have arrived (then that is the one error).
    Lines come through the trainer's `jsonl_lines`, so a line over its MAX_LINE_BYTES is refused
    without being held in memory."""
    check = DatasetCheck(file_name=file_name)
    digest = hashlib.sha256()
    too_big = False

    def counted(chunks: Iterable[bytes]) -> Iterator[bytes]:
        nonlocal too_big
        for chunk in chunks:
            check.size_bytes += len(chunk)
            if check.size_bytes > max_bytes:
                too_big = True
                return
            digest.update(chunk)
            if sink is not None:
                sink.write(chunk)
            yield chunk

    for line_number, (line, size_bytes) in enumerate(jsonl_lines(counted(chunks)), start=1):
        if too_big:
            break
        _check_line(check, line, size_bytes, line_number)
    if too_big:
        check.errors, check.more_errors = (
            [
                f"{file_name}: larger than this server's limit of {max_bytes} bytes "
                "(PLATFORM_DATASET_MAX_BYTES); split it or ask an admin"
            ],
            0,
        )
        return check
    check.sha256 = digest.hexdigest()
    if check.size_bytes == 0:
        check.errors = [f"{file_name}: empty file, no examples"]
    elif check.ok and check.rows == 0:
        check.errors = [f"{file_name}: no examples (only blank lines)"]
    return check


def _check_line(check: DatasetCheck, line: bytes | None, size_bytes: int, line_number: int) -> None:
    try:
        example = parse_jsonl_line(line, size_bytes)
    except DataError as error:
        check.add_error(f"{check.file_name}:{line_number}: {error}")
        return
    if example is None:
        return
    check.rows += 1
    if len(check.preview) < PREVIEW_ROWS:
        check.preview.append(_shortened(example))


def _shortened(value):
    """`value` with every string cut to PREVIEW_TEXT_CHARS (a preview, not the data)."""
    if isinstance(value, str):
        return value if len(value) <= PREVIEW_TEXT_CHARS else value[:PREVIEW_TEXT_CHARS] + "…"
    if isinstance(value, list):
        return [_shortened(v) for v in value]
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    return value


def write_checked(chunks: Iterable[bytes], file_name: str, max_bytes: int, directory: str) -> tuple[DatasetCheck, str]:
    """Stream `chunks` through `check_jsonl` into a new temporary file in `directory` (created if
    missing). Returns the check and the temporary file's path; when the check failed, the file is
    already removed (the path is then ''). The caller renames a good file into place or removes it."""
    os.makedirs(directory, exist_ok=True)
    handle, temporary_path = tempfile.mkstemp(prefix=".upload-", suffix=".jsonl.part", dir=directory)
    try:
        with os.fdopen(handle, "wb") as sink:
            check = check_jsonl(chunks, file_name, max_bytes, sink)
            sink.flush()
            os.fsync(sink.fileno())
    except BaseException:
        os.unlink(temporary_path)
        raise
    if not check.ok:
        os.unlink(temporary_path)
        return check, ""
    return check, temporary_path

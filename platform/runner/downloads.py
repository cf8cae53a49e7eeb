"""A run's checkpoint as a downloadable zip of its Hugging Face folder
(`GET /api/runs/<id>/checkpoints/<step>/hf.zip`, linked from the run page).

The folder is the one runner.exports writes (`<PLATFORM_DATA_DIR>/exports/run-<id>-step-<N>/`:
config.json, model.safetensors, the tokenizer files, trained_by.json); a checkpoint not exported
yet is exported first, in the request (float32; seconds for a 135M model, see runner.exports).
An export done earlier from the page in bfloat16 is served as it is.

The zip is written to an anonymous temporary file (deleted once the answer is sent) and streamed
from there, so the web server never holds the model in memory. The weights are stored, not
deflated (float tensors hardly compress); the small files are deflated. Every entry lies under one
folder named like the export, `run-<id>-step-<N>/`.

Toy-preset runs (`model.preset`, the character tokenizer) cannot be downloaded: no Hugging Face
folder can hold their tokenizer (runner.exports.TOY_RUN), so they answer 409.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path
from typing import IO

from experiments.models import Run
from runner import exports

STORED_SUFFIXES = (".safetensors",)  # written as they are: deflating float weights gains little


class DownloadRefused(Exception):
    """Why no zip: `status` 404 (no checkpoint at that step), 409 (the run cannot be exported, or
    that checkpoint is being exported by another request), 500 (the export failed)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def hf_folder(run: Run, step: int) -> Path:
    """The Hugging Face folder of `run`'s checkpoint `step`, exported now if it was not; or
    DownloadRefused."""
    model = run.config.get("model") if isinstance(run.config, dict) else None
    if not (isinstance(model, dict) and model.get("path")):
        preset = model.get("preset") if isinstance(model, dict) else None
        raise DownloadRefused(409, exports.TOY_RUN.format(pk=run.pk, preset=preset))
    steps = exports.checkpoint_steps(exports.run_directory(run))
    if step not in steps:
        have = f"it has steps {', '.join(map(str, steps))}" if steps else "it has no checkpoint yet"
        raise DownloadRefused(404, f"run {run.pk} has no checkpoint at step {step}; {have}")
    folder = exports.export_folder(run, step)
    if is_complete(folder):
        return folder
    try:
        return Path(exports.export_checkpoint(run, step=step).path)
    except exports.ExportRefused as exc:
        if exc.status == 409:  # claimed by another request that is exporting it right now
            raise DownloadRefused(409, f"run {run.pk} step {step} is being exported right now; try again in a "
                                       f"few seconds (an empty {folder} left by a stopped server: delete it)") from None
        # 400: the run cannot be exported (its config is no longer valid here): a conflict for a GET
        raise DownloadRefused(409 if exc.status == 400 else exc.status, exc.message) from None


def is_complete(folder: Path) -> bool:
    """Whether an export folder is written (the trainer renames it into place whole, config.json included)."""
    return (folder / "config.json").is_file()


def zip_folder(folder: Path, root_name: str) -> IO[bytes]:
    """A zip of every file under `folder`, each named `root_name/<relative path>`, in an anonymous
    temporary file positioned at its start (the caller closes it)."""
    handle = tempfile.TemporaryFile()
    try:
        with zipfile.ZipFile(handle, "w") as archive:
            for path in sorted(folder.rglob("*")):
                if not path.is_file():
                    continue
                method = zipfile.ZIP_STORED if path.suffix in STORED_SUFFIXES else zipfile.ZIP_DEFLATED
                archive.write(path, f"{root_name}/{path.relative_to(folder).as_posix()}", compress_type=method)
        handle.seek(0)
    except BaseException:
        handle.close()
        raise
    return handle

"""A run's checkpoint as a downloadable zip of its Hugging Face folder
(`GET /api/runs/<id>/checkpoints/<step>/hf.zip`, linked from the run page).

A checkpoint exported earlier from the page or `POST /api/runs/<id>/export`
(`<PLATFORM_DATA_DIR>/exports/run-<id>-step-<N>/`, in the dtype it was exported in) is zipped as it
is. Any other is exported for this download only (float32; seconds for a 135M model, see
runner.exports) into a temporary folder, `<PLATFORM_DATA_DIR>/exports/.downloads/run-<id>-step-<N>/`,
which is removed as soon as it is zipped: a download leaves no copy behind and never counts against
the owner's storage quota (runner.storage). The temporary folder's name is the claim: a second
download of the same checkpoint while the first is being exported answers 409; one left by a
stopped server is taken over after runner.exports.TIMEOUT_S.

The zip is written to an anonymous temporary file in that same folder (it has no name on disk and
goes when the answer is sent or the process ends) and streamed from there with its Content-Length,
so the web server never holds the model in memory. The weights are stored, not deflated (float
tensors hardly compress); the small files are deflated. Every entry lies under one folder named
like the export, `run-<id>-step-<N>/`.

Toy-preset runs (`model.preset`, the character tokenizer) cannot be downloaded: no Hugging Face
folder can hold their tokenizer (runner.exports.TOY_RUN), so they answer 409.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import IO

from django.conf import settings

from experiments.models import Run
from experiments.refusals import Refused
from runner import exports

STORED_SUFFIXES = (".safetensors",)  # written as they are: deflating float weights gains little


class DownloadRefused(Refused):
    """Why no zip: `status` 404 (no checkpoint at that step), 409 (the run cannot be exported, or
    that checkpoint is being exported by another request), 500 (the export failed)."""


def downloads_dir() -> Path:
    """Where downloads write their temporary exports and zips (under settings.EXPORTS_DIR, named
    so that no export listing or quota counts it)."""
    return Path(settings.EXPORTS_DIR) / ".downloads"


def hf_zip(run: Run, step: int) -> IO[bytes]:
    """A zip of `run`'s checkpoint `step` as a Hugging Face folder, in an anonymous temporary file
    positioned at its start (the caller closes it); or DownloadRefused. A temporary export made for
    it is gone when this returns."""
    folder = hf_folder(run, step)
    try:
        return zip_folder(folder, f"run-{run.pk}-step-{step}")
    finally:
        discard(folder)


def hf_folder(run: Run, step: int) -> Path:
    """The Hugging Face folder of `run`'s checkpoint `step`: its export written earlier, else a new
    temporary export (which `discard` removes); or DownloadRefused."""
    model = run.config.get("model") if isinstance(run.config, dict) else None
    if not (isinstance(model, dict) and model.get("path")):
        preset = model.get("preset") if isinstance(model, dict) else None
        raise DownloadRefused(409, exports.TOY_RUN.format(pk=run.pk, preset=preset))
    steps = exports.checkpoint_steps(exports.run_directory(run))
    if step not in steps:
        have = f"it has steps {', '.join(map(str, steps))}" if steps else "it has no checkpoint yet"
        raise DownloadRefused(404, f"run {run.pk} has no checkpoint at step {step}; {have}")
    exported = exports.export_folder(run, step)
    if is_complete(exported):
        return exported
    temporary = downloads_dir() / exported.name
    _take_over_if_stale(temporary)
    try:
        return Path(exports.export_checkpoint(run, step=step, out=temporary).path)
    except exports.ExportRefused as exc:
        if exc.status == 409:  # claimed by another download that is exporting it right now
            raise DownloadRefused(
                409,
                f"run {run.pk} step {step} is being prepared for another download right "
                "now; try again in a few seconds",
            ) from None
        # 400: the run cannot be exported (its config is no longer valid here): a conflict for a GET
        raise DownloadRefused(409 if exc.status == 400 else exc.status, exc.message) from None


def discard(folder: Path) -> None:
    """Remove `folder` if it is a download's temporary export; an export made on purpose stays."""
    if folder.parent == downloads_dir():
        shutil.rmtree(folder, ignore_errors=True)


def _take_over_if_stale(folder: Path) -> None:
    """Remove a temporary export left by a server that stopped while writing it (older than any
    export may take), so that its checkpoint can be downloaded again."""
    try:
        age_s = time.time() - folder.stat().st_mtime
    except OSError:
        return
    if age_s > exports.TIMEOUT_S:
        shutil.rmtree(folder, ignore_errors=True)


def is_complete(folder: Path) -> bool:
    """Whether an export folder is written (the trainer renames it into place whole, config.json included)."""
    return (folder / "config.json").is_file()


def zip_folder(folder: Path, root_name: str) -> IO[bytes]:
    """A zip of every file under `folder`, each named `root_name/<relative path>`, in an anonymous
    temporary file in downloads_dir() positioned at its start (the caller closes it)."""
    downloads_dir().mkdir(parents=True, exist_ok=True)
    handle = tempfile.TemporaryFile(dir=downloads_dir())
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

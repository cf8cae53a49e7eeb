"""A run's checkpoint exported as a Hugging Face model folder (config.json, tokenizer files and
model.safetensors) that transformers and `python -m trainers generate` load (and this platform
too, as a `model.path`, once the folder is moved under a model root). The web page's Export button and `POST
/api/runs/<id>/export` call `export_checkpoint`.

Exports go to settings.EXPORTS_DIR (`<PLATFORM_DATA_DIR>/exports/`), one folder per checkpoint:
`run-<id>-step-<N>/`. An existing folder is never replaced: exporting the same checkpoint again is
refused with its location (delete it to export again). Exports count against the run owner's storage
quota (runner.storage): while the owner is at or over it, an export is refused (429). A download
(runner.downloads) exports into a temporary folder of its own instead (`out`), removed once zipped.

Synchronous, in the request: for a 135M model (SmolLM2-135M-Instruct) the export takes seconds
(12 s measured on a busy 2-core CPU, about a third of it starting JAX). The work runs in a child process (`python -m
trainers export`, the trainer's own command, `trainers.commands.export.export_run`), so the web server never imports
JAX and never holds the checkpoint or accelerator memory after the answer; the child is told not to
preallocate accelerator memory (a run may be training on the same device). Much larger models would
want this moved to a Celery task with a status to poll.

Every refusal is an `ExportRefused` with the HTTP status that fits: 400 (a toy-preset run, no
checkpoint yet, a bad dtype, a config no longer valid), 404 (no checkpoint at that step), 409
(already exported), 429 (the owner is over their storage quota). A failure of the export itself is
a 500 with the trainer's last error line.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from experiments import configs
from experiments.models import Run
from experiments.refusals import Refused
from runner import storage
from runner.storage import export_folder, run_directory  # noqa: F401 - where exports and run files lie

DTYPES = ("float32", "bfloat16")
TIMEOUT_S = 30 * 60
TOY_RUN = (
    "export needs a run on a Hugging Face model (model.path); run {pk} trained the toy preset "
    "'{preset}' with the character tokenizer, which no Hugging Face folder can hold"
)


class ExportRefused(Refused):
    """Why an export was not done, with the HTTP status that says so."""


@dataclasses.dataclass(frozen=True)
class Export:
    path: str  # absolute path of the written folder
    step: int
    dtype: str


def checkpoint_steps(run_dir: str) -> list[int]:
    """Steps with a finished checkpoint in `run_dir/checkpoints/` (directories named by step;
    orbax's temporary `<step>.orbax-checkpoint-tmp-*` directories do not count)."""
    folder = os.path.join(run_dir, "checkpoints")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isascii() and n.isdigit() and os.path.isdir(os.path.join(folder, n)))


def existing_exports(run: Run) -> list[Path]:
    """The run's export folders already written, by step."""
    return storage.export_folders([run.pk]).get(run.pk, [])


def export_checkpoint(run: Run, step: int | None = None, dtype: str = "float32", out: Path | None = None) -> Export:
    """Write checkpoint `step` (default: the newest) of `run` as a Hugging Face folder under
    settings.EXPORTS_DIR in `dtype` (float32 or bfloat16). Returns where and which step; raises
    ExportRefused (see the module docstring). Blocks until the folder is written. `out`: a new
    folder to write instead, which the caller removes (a download's); no quota check then."""
    if dtype not in DTYPES:
        raise ExportRefused(400, f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    try:
        config = configs.parse(run.config, run.experiment.owner)  # the model roots as they are now
    except configs.ConfigError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        raise ExportRefused(400, f"run {run.pk}'s config is not valid on this platform now ({problems})") from None
    if config.model.path is None:
        raise ExportRefused(400, TOY_RUN.format(pk=run.pk, preset=config.model.preset))
    run_dir = run_directory(run)
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise ExportRefused(
            400,
            f"run {run.pk} has no checkpoint yet; export once it has written one "
            f"(checkpoint.every_steps, and always at the last step)",
        )
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise ExportRefused(
            404, f"run {run.pk} has no checkpoint at step {step}; it has steps {', '.join(map(str, steps))}"
        )
    if out is None:
        out = export_folder(run, step)
        refusal = storage.over_quota_message(run.experiment.owner)
        if refusal:
            raise ExportRefused(429, refusal)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        out.mkdir()  # the claim: a second request for the same checkpoint finds it taken
    except FileExistsError:
        raise ExportRefused(
            409,
            f"run {run.pk} step {step} is already exported (or being exported) at {out}; "
            f"use that folder, or delete it to export again",
        ) from None
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainers",
                "export",
                run_dir,
                "--out",
                str(out),
                "--step",
                str(step),
                "--dtype",
                dtype,
            ],
            cwd=str(settings.REPO_ROOT),
            env={**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        _release(out)
        raise ExportRefused(
            500, f"export of run {run.pk} step {step} took over {TIMEOUT_S} s and was stopped"
        ) from None
    if result.returncode != 0:
        _release(out)
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        own = [line for line in lines if line.startswith("export: ")]  # the command's own message
        reason = (own or lines or [f"exit code {result.returncode}"])[-1]
        raise ExportRefused(500, f"export of run {run.pk} step {step} failed: {reason}")
    return Export(path=str(out), step=step, dtype=dtype)


def _release(out: Path) -> None:
    """Give up the claim on a failed export's folder (the trainer leaves it empty on failure)."""
    try:
        out.rmdir()
    except OSError:
        pass

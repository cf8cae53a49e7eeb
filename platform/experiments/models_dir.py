"""The pretrained models an experiment may train: Hugging Face folders one level below the model
roots (settings.PLATFORM_MODELS_DIRS, from PLATFORM_MODELS_DIR). The web form offers them for
`model.path` and `GET /api/models` lists them.

A folder is listed when the trainer's own check would accept it as `model.path` on the platform:
its real path (symlinks resolved) lies inside a root, and `describe_folder` reads a supported
architecture from its config.json. Hidden folders (a fetch in progress writes `.NAME.partial-*`)
and anything else are skipped. Reading a folder's description touches only config.json and
tokenizer_config.json (no weights, no JAX), so listing is cheap enough for every page view.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from django.conf import settings

from experiments.configs import model_dirs, stored_path
from trainers.models.hf_config import ModelFolderError, describe_folder


@dataclasses.dataclass(frozen=True)
class ModelFolder:
    """One listed model: `path` is what `model.path` names it as and is stored as: relative to the
    first model root when it lies there, else its resolved absolute path (configs.stored_path)."""

    name: str
    path: str
    architecture: str
    size: str  # "135M"
    parameters: int
    has_chat_template: bool

    @property
    def label(self) -> str:
        """ "smollm2-135m-instruct — LlamaForCausalLM, 135M" (the form's choice text)."""
        return f"{self.name} — {self.architecture}, {self.size}"

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _inside(path: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([path, root]) == root for root in roots)


def available_models() -> list[ModelFolder]:
    """The model folders directly under each model root, by root (in settings order), then by name.
    A folder reachable from two roots (a symlink) is listed once."""
    roots = [os.path.realpath(r) for r in settings.PLATFORM_MODELS_DIRS]
    found: list[ModelFolder] = []
    seen: set[str] = set()
    for root in roots:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = os.path.realpath(entry.path)
            if path in seen or not os.path.isdir(path) or not _inside(path, roots):
                continue
            try:
                description = describe_folder(path)
            except (ModelFolderError, OSError, ValueError):
                continue
            seen.add(path)
            found.append(
                ModelFolder(
                    name=entry.name,
                    path=stored_path(path, model_dirs()),
                    architecture=description["architecture"],
                    size=description["size"],
                    parameters=int(description["parameters"]),
                    has_chat_template=bool(description["has_chat_template"]),
                )
            )
    return found

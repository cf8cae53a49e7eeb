"""The platform's one way to read and validate an experiment config: every entry point (API
create/update and `config_yaml`, the web form and its YAML tab, the plan preview, import, clone,
restore, fork, export, the admin through `Experiment.clean`, and the worker before it trains,
retries included) comes through here, so all of
them get the trainer's one schema, its one guarded YAML loader (`trainers.config.load_yaml_data`:
no alias bombs, no deep nesting, no oversize text), the same dataset roots
(settings.PLATFORM_DATASET_DIRS: `data.train_path` / `data.eval_path` must lie inside one, and come
back as resolved absolute paths) and the same model roots (settings.PLATFORM_MODELS_DIRS, from
PLATFORM_MODELS_DIR: `model.path` must be a model folder inside one, and comes back resolved) and
the same environments (a dotted `env.name` only from settings.PLATFORM_ENVIRONMENT_MODULES,
refused by name before any import: the platform never imports a module a user names), and
the same datasets: `data.train_dataset` / `data.eval_dataset` name uploaded datasets the config's
owner may use (their own by name, one shared with them as owner/name; experiments.dataset_models),
which resolve into `data.train_path` / `data.eval_path`. Uploaded files are reachable only that
way: a `data.train_path` / `data.eval_path` given directly that resolves into the uploads tree
(`private_dirs`, `<dataset root>/users/`) is refused naming the dataset field to use. So every
caller passes the owner: the experiment's, or the request's user for a new one. The stored config
keeps the name and drops the path it resolved to (`stored`): the name is what the user chose, and
it resolves again each time (a retried or forked run too: the worker re-parses `run.config` with
the owner as they are at start). A path given directly is stored relative to its first root
(`stored_path`), so no server directory reaches the user through a stored config; `parse` resolves
it again."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings

from experiments import config_limits, dataset_models
from trainers.config import ConfigError, ExperimentConfig, load_yaml_data, parse_config

__all__ = [
    "ConfigError",
    "dataset_dirs",
    "environment_modules",
    "load_yaml",
    "model_dirs",
    "parse",
    "parse_text",
    "private_dirs",
    "stored",
    "stored_path",
    "validated",
    "with_stored_paths",
]


def dataset_dirs() -> list[str]:
    """The directories data paths may name files in (the first one is where relative paths start)."""
    return [str(d) for d in settings.PLATFORM_DATASET_DIRS]


def model_dirs() -> list[str]:
    """The directories `model.path` may name a folder in (the first one is where relative paths start)."""
    return [str(d) for d in settings.PLATFORM_MODELS_DIRS]


def load_yaml(text: str) -> Any:
    """YAML text -> plain data (unvalidated), or ConfigError with a "(yaml)" problem."""
    return load_yaml_data(text)


def private_dirs() -> list[str]:
    """The uploads tree: files there are read only through `data.train_dataset` / `eval_dataset`
    (the owner's datasets, or ones shared with them); a data path given directly is refused."""
    return [str(dataset_models.uploads_dir())]


def parse(raw: Any, owner=None) -> ExperimentConfig:
    """Config data -> the validated config, or ConfigError listing every problem. `owner`: the user
    whose datasets the config may name (None: none)."""
    return within_limits(
        parse_config(
            raw,
            dataset_dirs=dataset_dirs(),
            model_dirs=model_dirs(),
            datasets=dataset_models.resolver(owner),
            private_dirs=private_dirs(),
            env_modules=environment_modules(),
            model_path_bases=[str(settings.REPO_ROOT)],
        )
    )


def environment_modules() -> tuple[str, ...]:
    """The modules a config's dotted `env.name` may name here (settings.PLATFORM_ENVIRONMENT_MODULES;
    empty: the built-in environments only). Checked by name before any import."""
    return tuple(getattr(settings, "PLATFORM_ENVIRONMENT_MODULES", ()))


def parse_text(text: str, owner=None) -> ExperimentConfig:
    """YAML text -> the validated config, or ConfigError (`owner` as in `parse`)."""
    return parse(load_yaml_data(text), owner)


def within_limits(config: ExperimentConfig) -> ExperimentConfig:
    """The config, or ConfigError for fields above this server's PLATFORM_CONFIG_LIMITS (config_limits)."""
    return config_limits.checked(config, getattr(settings, "PLATFORM_CONFIG_LIMITS", {}))


def stored_path(path: str, roots: list[str]) -> str:
    """A resolved absolute `path` as a config should name it: relative to the first of `roots` when
    it lies inside that one (where `parse` starts a relative path, so the value names the same file
    again and no server directory reaches the user: the API, the YAML views, exports, diffs, the
    model picker); otherwise unchanged. A path in another, non-first root stays absolute, since a
    relative one would start in the first root (the default settings have one root of each kind).
    A path that is not normalised (`..`, `//`: only in a row stored long ago) stays as it is too."""
    first = os.path.realpath(roots[0]) if roots else None
    if (
        first is None
        or not os.path.isabs(path)
        or os.path.normpath(path) != path
        or os.path.commonpath([path, first]) != first
    ):
        return path
    return os.path.relpath(path, first)


def with_stored_paths(data: Any) -> Any:
    """Config data with `model.path`, `judge.model_path`, `data.train_path` and `data.eval_path` as
    `stored_path` writes them (the settings' roots as they are now); anything else, and data that is not a config's
    shape, unchanged. `stored` uses it; migration experiments/0006 rewrote the rows stored before."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for section, field, roots in (
        ("model", "path", model_dirs()),
        ("judge", "model_path", model_dirs()),
        ("data", "train_path", dataset_dirs()),
        ("data", "eval_path", dataset_dirs()),
    ):
        values = data.get(section)
        if isinstance(values, dict) and isinstance(values.get(field), str):
            data[section] = {**values, field: stored_path(values[field], roots)}
    return data


def stored(config: ExperimentConfig) -> dict[str, Any]:
    """A validated config as the plain data Experiment.config and Run.config hold: a data path that
    a dataset name resolved to is left out (the name resolves again whenever the config is read);
    `model.path` and the data paths given directly are written relative to their first root
    (`with_stored_paths`). Whoever needs the files parses the stored config again (`parse`: the
    worker, export, the plan preview), which gives them back resolved and absolute."""
    data = config.model_dump(mode="json", by_alias=True)
    for name_field, path_field in (("train_dataset", "train_path"), ("eval_dataset", "eval_path")):
        if data["data"].get(name_field) is not None:
            data["data"][path_field] = None
    return with_stored_paths(data)


def validated(raw: Any, owner=None) -> dict[str, Any]:
    """Config data -> its validated, normalised plain data, or ConfigError (`owner` as in `parse`)."""
    return stored(parse(raw, owner))

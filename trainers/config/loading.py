"""Loading a config: raw data (YAML text, JSON, a file) plus `--set` overrides -> a validated
`ExperimentConfig`, or a `ConfigError` whose problems name the dotted field and the fix."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from trainers.config.checks import check_config, check_prompt_format
from trainers.config.schema import MOVED_TO_MESH, AsyncSection, ExperimentConfig, parse_device_list
from trainers.config.yaml_guard import (
    MAX_NESTING,
    YamlRefused,
    guarded_yaml,
    load_yaml_data,
)
from trainers.errors import ConfigError, Problem
from trainers.models.hf_config import ModelFolderError, describe_folder

RAW_MAX_VALUES = 100_000  # values a raw (JSON) config may hold

# What `parse_config` resolves dataset names with: name -> JSONL path (None or absent: no such dataset).
DatasetResolver = Mapping[str, str] | Callable[[str], str | None]


def _plain_data_problems(raw: Any) -> list[Problem]:
    """Checks, without recursion, that `raw` is JSON-like data a config can be: at most MAX_NESTING
    deep, at most RAW_MAX_VALUES values (shared sub-objects counted each time they appear), text
    that is valid Unicode (no lone surrogates), numbers, booleans and null."""
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(raw, (), 1)]
    values = 0
    while stack:
        value, loc, depth = stack.pop()
        values += 1
        if values > RAW_MAX_VALUES:
            return [Problem("(config)", f"holds more than {RAW_MAX_VALUES} values; a config is a few dozen")]
        if isinstance(value, (dict, list)) and depth > MAX_NESTING:
            return [Problem(_dotted(loc), f"is nested deeper than {MAX_NESTING} levels")]
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or not _is_unicode(key):
                    return [Problem(_dotted(loc), "has a key that is not valid text")]
                stack.append((item, loc + (key,), depth + 1))
        elif isinstance(value, list):
            stack.extend((item, loc + (i,), depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            if not _is_unicode(value):
                return [
                    Problem(
                        _dotted(loc),
                        "contains characters that are not valid Unicode text (a lone surrogate); remove them",
                    )
                ]
        elif not (value is None or isinstance(value, (bool, int, float))):
            return [
                Problem(
                    _dotted(loc),
                    f"must be plain data (text, number, boolean, list or mapping), got {type(value).__name__}",
                )
            ]
    return []


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_config(
    raw: dict[str, Any] | None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    dataset_dirs: list[str] | tuple[str, ...] | None = None,
    model_dirs: list[str] | tuple[str, ...] | None = None,
    datasets: DatasetResolver | None = None,
    private_dirs: list[str] | tuple[str, ...] | None = None,
    env_modules: list[str] | tuple[str, ...] | None = None,
    model_path_bases: list[str] | tuple[str, ...] | None = None,
) -> ExperimentConfig:
    """Validate a raw dict (from YAML/JSON) plus `--set` overrides; raise ConfigError listing every problem.

    dataset_dirs (the platform's dataset roots): when given, `data.train_path` / `data.eval_path`
    resolve relative to dataset_dirs[0], with `..` and symlinks resolved, and must name a file inside
    one of the roots; the returned config holds the resolved absolute paths. One message covers
    "missing" and "not allowed", so validation never tells whether a file exists. Without it (the
    CLI on a user's own machine) paths are relative to the working directory and unrestricted.
    model_dirs (the platform's model roots) restrict `model.path` the same way; the folder must be a
    Hugging Face model of a supported architecture either way. A relative model.path starts in the
    first root; where it names no folder there, it is tried from each of `model_path_bases` (the
    platform's checkout, where the shipped configs' var/models/<name> lies), and must still end
    inside a root.
    datasets (the platform's datasets this config's owner may use): resolves `data.train_dataset` /
    `data.eval_dataset` names into `data.train_path` / `data.eval_path` (then checked like any path);
    see `_resolve_dataset_names`.
    private_dirs (the platform's uploads tree): files there are reached only through a dataset name,
    which `datasets` resolves with its ownership check; `data.train_path` / `data.eval_path` given
    directly (or beside a name that does not resolve to the same file) that resolve into one of
    them (after `..` and symlinks) are refused naming the field and the dataset field to use
    instead, whether or not the file exists.
    env_modules (the modules the platform's administrator lets configs name): a dotted `env.name`
    must name a class of one of them, decided by name before anything is imported; the built-ins
    are always allowed. Without it (the CLI) any importable module may be named."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError([Problem("(config)", f"must be a mapping of sections, got {type(raw).__name__}")])
    problems = _plain_data_problems(raw)
    if problems:
        raise ConfigError(problems)
    raw = apply_overrides(raw, overrides)
    try:
        config = ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_problems_from_pydantic(exc, raw)) from None
    problems, named = _resolve_dataset_names(config, datasets, dataset_dirs)
    problems += _resolve_data_paths(config, dataset_dirs, private_dirs, named)
    problems += _resolve_model_path(config, model_dirs, model_path_bases) + check_config(config, env_modules)
    if problems:
        raise ConfigError(problems)
    problems = check_prompt_format(config)  # the paths are accepted: their first examples may be read now
    if problems:
        raise ConfigError(problems)
    return config


def parse_yaml(
    text: str,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    dataset_dirs: list[str] | tuple[str, ...] | None = None,
    model_dirs: list[str] | tuple[str, ...] | None = None,
    datasets: DatasetResolver | None = None,
    private_dirs: list[str] | tuple[str, ...] | None = None,
    env_modules: list[str] | tuple[str, ...] | None = None,
) -> ExperimentConfig:
    """Parse YAML text with the guarded loader (`load_yaml_data`) and validate it (`parse_config`)."""
    return parse_config(
        load_yaml_data(text),
        overrides,
        dataset_dirs=dataset_dirs,
        model_dirs=model_dirs,
        datasets=datasets,
        private_dirs=private_dirs,
        env_modules=env_modules,
    )


def load_config(path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read a YAML (or JSON) config file and validate it with overrides applied."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError([Problem("(file)", f"cannot read {path}: {exc.strerror}")]) from None
    return parse_yaml(text, overrides)


DATA_PATH_REFUSED = "missing or not allowed: {path}; put the file under the platform's dataset directory"
DATASET_NAMES_NEED_PLATFORM = (
    "dataset names are resolved by the platform; the CLI reads data.{path_field} (a JSONL file)"
)
DATASET_UNKNOWN = (
    "no dataset named '{name}' that you may use: give one of your datasets by name, or one "
    "shared with you as owner/name"
)
DATASET_PATH_DISAGREES = "names another file than data.{path_field} ({path}); set only one of them"
PRIVATE_PATH_REFUSED = (
    "not allowed: {path} is in the uploaded datasets; name an uploaded dataset in "
    "data.{name_field} instead (your own by name, one shared with you as owner/name)"
)


def _resolve_dataset_names(
    config: ExperimentConfig, datasets: DatasetResolver | None, dataset_dirs: list[str] | tuple[str, ...] | None
) -> tuple[list[Problem], set[str]]:
    """Turn `data.train_dataset` / `data.eval_dataset` into `data.train_path` / `data.eval_path`;
    returns the problems and the path fields a name set (those came through `datasets`' check).

    With `datasets` (the platform): an unknown name is a problem naming the field; a known one sets
    the path, and a path already set must name the same file (a config validated once holds both,
    so validating it again agrees). Without it (the CLI): a name alone is a problem naming the field;
    a name beside a path is only a label (a platform run directory's config.yaml holds both), and
    the CLI reads the path."""
    lookup = datasets.get if isinstance(datasets, Mapping) else datasets
    problems, named = [], set()
    for name_field, path_field in (("train_dataset", "train_path"), ("eval_dataset", "eval_path")):
        name, path = getattr(config.data, name_field), getattr(config.data, path_field)
        if name is None:
            continue
        if lookup is None:
            if path is None:
                problems.append(
                    Problem(f"data.{name_field}", DATASET_NAMES_NEED_PLATFORM.format(path_field=path_field))
                )
            continue
        resolved = lookup(name)
        if resolved is None:
            problems.append(Problem(f"data.{name_field}", DATASET_UNKNOWN.format(name=name)))
            continue
        if path is not None and _real_path(path, dataset_dirs) != os.path.realpath(resolved):
            problems.append(
                Problem(f"data.{name_field}", DATASET_PATH_DISAGREES.format(path_field=path_field, path=path))
            )
            continue
        setattr(config.data, path_field, resolved)
        named.add(path_field)
    return problems, named


def _real_path(path: str, roots: list[str] | tuple[str, ...] | None) -> str:
    """`path` resolved as `_inside_roots` would (relative to roots[0]), without the checks."""
    base = os.path.realpath(roots[0]) if roots else os.getcwd()
    return os.path.realpath(os.path.join(base, path))


def _resolve_data_paths(
    config: ExperimentConfig,
    dataset_dirs: list[str] | tuple[str, ...] | None,
    private_dirs: list[str] | tuple[str, ...] | None,
    named: set[str],
) -> list[Problem]:
    """Check `data.train_path` / `data.eval_path` (see `parse_config`); with dataset_dirs, replace
    each by its resolved absolute path inside a root. A path field not in `named` (given directly,
    not set by a dataset name) must not resolve into `private_dirs`."""
    problems = []
    for name, name_field in (("train_path", "train_dataset"), ("eval_path", "eval_dataset")):
        path = getattr(config.data, name)
        if path is None:
            continue
        if name not in named and private_dirs and _is_private(path, dataset_dirs, private_dirs):
            problems.append(Problem(f"data.{name}", PRIVATE_PATH_REFUSED.format(path=path, name_field=name_field)))
            continue
        if dataset_dirs is None:
            if not os.path.isfile(path):
                problems.append(Problem(f"data.{name}", f"file not found: {path}"))
            continue
        resolved = _inside_roots(path, dataset_dirs)
        if resolved is None:
            problems.append(Problem(f"data.{name}", DATA_PATH_REFUSED.format(path=path)))
        else:
            setattr(config.data, name, resolved)
    return problems


def _is_private(
    path: str, dataset_dirs: list[str] | tuple[str, ...] | None, private_dirs: list[str] | tuple[str, ...]
) -> bool:
    """Whether `path` (resolved as `_inside_roots` would: `..` and symlinks followed) lies in one of
    `private_dirs`. Decided from the path alone, never from whether the file exists."""
    if "\0" in path:
        return False  # refused as not allowed anyway
    candidate = _real_path(path, dataset_dirs)
    return any(
        os.path.commonpath([candidate, private]) == private for private in (os.path.realpath(d) for d in private_dirs)
    )


MODEL_PATH_REFUSED = "missing or not allowed: {path}; put the model folder under the platform's models directory"


def _resolve_model_path(
    config: ExperimentConfig,
    model_dirs: list[str] | tuple[str, ...] | None,
    model_path_bases: list[str] | tuple[str, ...] | None = None,
) -> list[Problem]:
    """Check `model.path` and `judge.model_path` (see `parse_config`): each inside a root when model_dirs
    are given (then replaced by its resolved absolute path), a Hugging Face folder of a supported
    architecture, and with a chat template when data.chat_template (judge.chat_template) is true."""
    folders = (
        ("model.path", config.model, "path", config.data.chat_template, "data.chat_template"),
        ("judge.model_path", config.judge, "model_path", config.judge.chat_template, "judge.chat_template"),
    )
    problems = []
    for name, section, field, chat, chat_field in folders:
        path = getattr(section, field)
        if path is None:
            continue
        if model_dirs is not None:
            resolved = _inside_roots(path, model_dirs, want_dir=True)
            for base in () if os.path.isabs(path) else model_path_bases or ():
                if resolved is None:  # configs/*.yaml name var/models/<name>, written for the CLI in the checkout
                    resolved = _inside_roots(os.path.join(os.path.realpath(base), path), model_dirs, want_dir=True)
            if resolved is None:
                problems.append(Problem(name, MODEL_PATH_REFUSED.format(path=path)))
                continue
            path = resolved
        else:
            path = os.path.abspath(path)  # a run directory's config.yaml then works anywhere
        setattr(section, field, path)
        try:
            description = describe_folder(path)
        except ModelFolderError as exc:
            problems.append(Problem(name, str(exc)))
            continue
        if chat and not description["has_chat_template"]:
            problems.append(
                Problem(chat_field, f"the tokenizer in {path} has no chat_template; set {chat_field} to false or null")
            )
    return problems


def _inside_roots(path: str, roots: list[str] | tuple[str, ...], want_dir: bool = False) -> str | None:
    """The real path of `path` (relative to roots[0]) if it is a file (a directory, with want_dir)
    inside one of `roots`, else None."""
    if not roots or not path or "\0" in path:
        return None
    real_roots = [os.path.realpath(r) for r in roots]
    candidate = os.path.realpath(os.path.join(real_roots[0], path))
    inside = any(os.path.commonpath([candidate, r]) == r for r in real_roots)
    exists = os.path.isdir(candidate) if want_dir else os.path.isfile(candidate)
    return candidate if inside and exists else None


def apply_overrides(raw: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A copy of the raw config data with each `dotted.path=value` (`--set`) applied, unvalidated
    (the platform applies a client's `--set` before it validates); ConfigError naming the path of
    any that does not fit the schema's sections."""
    raw = json.loads(json.dumps(raw))  # deep copy: overrides never touch the caller's dict
    problems = [p for o in overrides for p in _apply_override(raw, o)]
    if problems:
        raise ConfigError(problems)
    return raw


def _apply_override(raw: dict[str, Any], override: str) -> list[Problem]:
    """Apply one `dotted.path=value` to `raw` in place; the value is parsed as YAML (8 -> int, true -> bool)."""
    if "=" not in override:
        return [Problem("(--set)", f"'{override}' is not of the form dotted.path=value")]
    path, _, text = override.partition("=")
    path = path.strip()
    try:
        value = guarded_yaml(text) if text.strip() else None
    except yaml.YAMLError:
        value = text  # not YAML: the text itself
    except YamlRefused as exc:
        return [Problem(path, f"refused: the value {exc}")]
    keys = path.split(".")
    section_model: type[BaseModel] = ExperimentConfig
    node = raw
    for i, key in enumerate(keys):
        fields = _field_names(section_model)
        if section_model is AsyncSection and key in MOVED_TO_MESH:
            if i < len(keys) - 1:
                return [Problem(".".join(keys[: i + 1]), moved_to_mesh_message(key, None))]
            node[key] = value  # validation drops an empty list and names the new place of a listed device
            return []
        if key not in fields:
            return [Problem(".".join(keys[: i + 1]), _unknown_key_message(key, fields))]
        name = _python_name(section_model, key)
        annotation = section_model.model_fields[name].annotation
        if i == len(keys) - 1:
            node[key] = value
            return []
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return [Problem(".".join(keys[: i + 1]), "is a value, not a section; drop the rest of the path")]
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node, section_model = child, annotation
    return []


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _python_name(model: type[BaseModel], key: str) -> str:
    for name, f in model.model_fields.items():
        if (f.alias or name) == key:
            return name
    raise KeyError(key)


def _unknown_key_message(key: str, fields: list[str]) -> str:
    close = difflib.get_close_matches(str(key), fields, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "known keys: " + ", ".join(fields)
    return f"unknown key; {hint}"


def moved_to_mesh_message(name: str, value: Any) -> str:
    """The problem of a listed `async.<name>` (train_devices, rollout_devices): where it lives now,
    and the mesh section that means what it meant (the devices of a list split the batch: data
    parallel), e.g. "moved to mesh.train_devices; write mesh: {train_devices: [0, 1], data: 2}"."""
    try:
        parsed = parse_device_list(value)
        devices = [int(d) for d in parsed] if isinstance(parsed, list) and 0 < len(parsed) <= 16 else None
    except (TypeError, ValueError):
        devices = None
    if devices is None or any(d < 0 for d in devices):
        devices = [0]
    listed = "[" + ", ".join(str(d) for d in devices) + "]"
    mesh = f"{name}: {listed}" + (f", data: {len(devices)}" if name == "train_devices" and len(devices) > 1 else "")
    return (
        f"async.{name} moved to mesh.{name}; write mesh: {{{mesh}}} (--set mesh.{name}={listed}) and remove "
        f"async.{name}"
    )


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(config)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the key at the end of `loc`."""
    model: type[BaseModel] = ExperimentConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        try:
            annotation = model.model_fields[_python_name(model, part)].annotation
        except KeyError:
            return None
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        sub = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if sub is None:
            return None
        model = sub
    return model


def _problems_from_pydantic(exc: ValidationError, raw: dict[str, Any]) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = _dotted(loc)
        if err["type"] == "extra_forbidden" and len(loc) == 2 and loc[0] == "async" and loc[1] in MOVED_TO_MESH:
            problems.append(Problem(field, moved_to_mesh_message(str(loc[1]), err.get("input"))))
            continue
        if err["type"] == "extra_forbidden":
            model = _model_at(loc)
            fields = _field_names(model) if model else []
            problems.append(Problem(field, _unknown_key_message(str(loc[-1]), fields)))
            continue
        value = err.get("input")
        shown = (
            json.dumps(value) if isinstance(value, (int, float, str, bool)) or value is None else type(value).__name__
        )
        if len(shown) > 80:
            shown = shown[:60] + f"... ({len(shown)} characters)"
        message = err["msg"]
        if err["type"] == "literal_error":
            message = f"{shown} is not allowed; {message[0].lower()}{message[1:]}"
        elif err["type"] in ("model_type", "dict_type"):
            message = f"must be a mapping of fields, got {shown}"
        elif err["type"] == "missing":
            message = "is required"
        else:
            message = f"{shown}: {message[0].lower()}{message[1:]}"
        problems.append(Problem(field, message))
    return problems

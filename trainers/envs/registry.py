"""Environments by name: the built-ins, or a project's own class by dotted path.

`env.name` is a built-in name (ENVIRONMENTS) or "package.module:Class" (also "package.module.Class"),
imported when the config is checked and again when the run starts. Whoever checks a config for
somebody else (the platform) passes `allowed_modules`: then a dotted path is accepted only when its
module is one of those (or inside one of those packages), decided from the name alone before any
import, and every other name gets the same answer whether or not such a module is installed. The
CLI passes none: on the user's own machine any importable module may be named. `env.settings` is checked against
the class's pydantic `Settings`, unknown keys refused. Every failure is an `EnvError`: a config
problem (a `FieldError`, so the CLI and the platform show it like any invalid field) naming
`env.name` or `env.settings.<field>` and the fix.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ValidationError

from trainers.envs.base import Environment
from trainers.envs.calculator import Calculator
from trainers.envs.guess_number import GuessNumber
from trainers.envs.single_turn import SingleTurn
from trainers.errors import FieldError

ENVIRONMENTS: dict[str, type[Environment]] = {
    SingleTurn.name: SingleTurn,
    Calculator.name: Calculator,
    GuessNumber.name: GuessNumber,
}
ENVIRONMENT_NAMES: tuple[str, ...] = tuple(ENVIRONMENTS)


class EnvError(FieldError):
    """An environment that cannot be used: `field` is the config field to change ("env.name",
    "env.settings.max_result_digits"), `message` says why and the fix. A ValueError."""


def resolve(name: str, allowed_modules: Collection[str] | None = None) -> type[Environment]:
    """The environment class of `env.name`: a built-in, or a dotted path imported with importlib
    ("package.module:Class" or "package.module.Class"). EnvError (field env.name) when the name is
    unknown, the module cannot be imported, it has no such attribute, or that is not an
    Environment subclass. With `allowed_modules` (None: any module), a dotted path whose module is
    not one of them nor inside one of those packages is refused before anything is imported."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    module_name, attribute = split_dotted(name)
    if allowed_modules is not None and not module_allowed(module_name, allowed_modules):
        raise EnvError("env.name", refused_message(name, allowed_modules))
    if module_name is None:
        raise EnvError(
            "env.name",
            f"unknown environment '{name}'; {_did_you_mean(name)}built in: "
            f"{', '.join(ENVIRONMENT_NAMES)}; or your own Environment class as a dotted path "
            "package.module:Class",
        )
    if not module_name or not attribute:
        raise EnvError("env.name", f"'{name}' is not a dotted path; write package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # an import runs the module's code: anything may fail there
        raise EnvError(
            "env.name",
            f"cannot import module '{module_name}' of '{name}': {type(error).__name__}: "
            f"{error}; check the module is on the Python path (PYTHONPATH) and imports "
            "cleanly",
        ) from error
    cls = getattr(module, attribute, None)
    if cls is None:
        raise EnvError("env.name", f"module '{module_name}' has no attribute '{attribute}'; name a class defined in it")
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise EnvError(
            "env.name",
            f"'{name}' is not an Environment subclass; subclass "
            "trainers.envs.base.Environment (a name, Settings, reset and step)",
        )
    if not (isinstance(cls.Settings, type) and issubclass(cls.Settings, BaseModel)):
        raise EnvError(
            "env.name",
            f"'{name}'.Settings is not a pydantic model; make it a pydantic BaseModel (or leave it out: no settings)",
        )
    return cls


def split_dotted(name: str) -> tuple[str | None, str]:
    """("package.module", "Class") of "package.module:Class" or "package.module.Class"; (None, name)
    for a name with neither ':' nor '.'. Pure text: nothing is imported."""
    if ":" in name:
        module_name, _, attribute = name.partition(":")
    elif "." in name:
        module_name, _, attribute = name.rpartition(".")
    else:
        return None, name
    return module_name, attribute


def module_allowed(module_name: str | None, allowed_modules: Collection[str]) -> bool:
    """Whether `module_name` is one of `allowed_modules` or a submodule of one ("envs.games" under
    "envs"); decided on the text of the names alone."""
    if not module_name:
        return False
    return any(module_name == allowed or module_name.startswith(allowed + ".") for allowed in allowed_modules)


def refused_message(name: str, allowed_modules: Collection[str]) -> str:
    """What a platform answers for an env.name it will not import: the same text whether or not a
    module of that name exists, so the answer tells nothing about what is installed."""
    listed = (
        f"or a class of the modules this server's administrator lists: {', '.join(sorted(allowed_modules))}"
        if allowed_modules
        else "this server runs no other environments (its administrator lists the "
        "modules it may load in PLATFORM_ENVIRONMENT_MODULES)"
    )
    return f"unknown environment '{name}'; {_did_you_mean(name)}built in: {', '.join(ENVIRONMENT_NAMES)}; {listed}"


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, ENVIRONMENT_NAMES, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'? " if close else ""


def settings_problems(cls: type[Environment], settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for each thing wrong with `settings` for environment `cls`: an unknown key
    (whether or not the class's Settings forbids extra keys) or a value its Settings refuses, each
    field named env.settings.<field>. Empty when they validate."""
    known = cls.Settings.model_fields
    problems = []
    for key in settings:
        if key not in known:
            choices = f"known: {', '.join(known)}" if known else f"{cls.name or cls.__name__} has no settings"
            problems.append((f"env.settings.{key}", f"unknown setting; {choices}"))
    if problems:
        return problems
    try:
        cls.Settings.model_validate(settings)
    except ValidationError as error:
        for detail in error.errors():
            location = ".".join(str(part) for part in detail["loc"])
            field = f"env.settings.{location}" if location else "env.settings"
            problems.append((field, detail["msg"].removeprefix("Value error, ")))
    return problems


def make_settings(cls: type[Environment], settings: dict[str, Any]) -> BaseModel:
    """`settings` validated by the class's Settings; EnvError naming the first field that is wrong."""
    problems = settings_problems(cls, settings)
    if problems:
        field, message = problems[0]
        raise EnvError(field, message)
    return cls.Settings.model_validate(settings)


def make_environment(
    name: str, settings: dict[str, Any] | None = None, allowed_modules: Collection[str] | None = None
) -> Environment:
    """The environment `name` (see `resolve`) with its settings validated (see `make_settings`)."""
    cls = resolve(name, allowed_modules)
    return cls(make_settings(cls, settings or {}))

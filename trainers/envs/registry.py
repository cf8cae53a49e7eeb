"""Environments by name: the built-ins, or a project's own class by dotted path.

`env.name` is a built-in name (ENVIRONMENTS) or "package.module:Class" (also "package.module.Class"),
imported when the config is checked and again when the run starts. `env.settings` is checked against
the class's pydantic `Settings`, unknown keys refused. Every failure is an `EnvError`: a config
problem (a `FieldError`, so the CLI and the platform show it like any invalid field) naming
`env.name` or `env.settings.<field>` and the fix.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from pydantic import BaseModel, ValidationError

from trainers.config.errors import FieldError
from trainers.envs.base import Environment
from trainers.envs.calculator import Calculator
from trainers.envs.guess_number import GuessNumber
from trainers.envs.single_turn import SingleTurn

ENVIRONMENTS: dict[str, type[Environment]] = {
    SingleTurn.name: SingleTurn,
    Calculator.name: Calculator,
    GuessNumber.name: GuessNumber,
}
ENVIRONMENT_NAMES: tuple[str, ...] = tuple(ENVIRONMENTS)


class EnvError(FieldError):
    """An environment that cannot be used: `field` is the config field to change ("env.name",
    "env.settings.max_result_digits"), `message` says why and the fix. A ValueError."""


def resolve(name: str) -> type[Environment]:
    """The environment class of `env.name`: a built-in, or a dotted path imported with importlib
    ("package.module:Class" or "package.module.Class"). EnvError (field env.name) when the name is
    unknown, the module cannot be imported, it has no such attribute, or that is not an
    Environment subclass."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    if ":" in name:
        module_name, _, attribute = name.partition(":")
    elif "." in name:
        module_name, _, attribute = name.rpartition(".")
    else:
        close = difflib.get_close_matches(name, ENVIRONMENT_NAMES, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise EnvError("env.name", f"unknown environment '{name}'; {hint}built in: {', '.join(ENVIRONMENT_NAMES)}; "
                                   "or your own Environment class as a dotted path package.module:Class")
    if not module_name or not attribute:
        raise EnvError("env.name", f"'{name}' is not a dotted path; write package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # an import runs the module's code: anything may fail there
        raise EnvError("env.name", f"cannot import module '{module_name}' of '{name}': {type(error).__name__}: "
                                   f"{error}; check the module is on the Python path (PYTHONPATH) and imports "
                                   "cleanly") from error
    cls = getattr(module, attribute, None)
    if cls is None:
        raise EnvError("env.name", f"module '{module_name}' has no attribute '{attribute}'; name a class defined "
                                   "in it")
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise EnvError("env.name", f"'{name}' is not an Environment subclass; subclass "
                                   "trainers.envs.base.Environment (a name, Settings, reset and step)")
    if not (isinstance(cls.Settings, type) and issubclass(cls.Settings, BaseModel)):
        raise EnvError("env.name", f"'{name}'.Settings is not a pydantic model; make it a pydantic BaseModel "
                                   "(or leave it out: no settings)")
    return cls


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


def make_environment(name: str, settings: dict[str, Any] | None = None) -> Environment:
    """The environment `name` (see `resolve`) with its settings validated (see `make_settings`)."""
    cls = resolve(name)
    return cls(make_settings(cls, settings or {}))

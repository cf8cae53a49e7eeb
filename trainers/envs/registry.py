"""Environments by name: the built-ins, or a project's own class by dotted path.

`env.name` is a built-in name (ENVIRONMENTS) or "package.module:Class" (also "package.module.Class"),
imported when the config is checked and again when the run starts, by the registries' one rule for
dotted paths (`trainers.registry.Registry.resolve`): whoever checks a config for somebody else (the
platform) passes `allowed_modules`, and then a dotted path is accepted only when its module is one of
those (or inside one of those packages), decided from the name alone before any import, and every
other name gets the same answer whether or not such a module is installed. The CLI passes none: on
the user's own machine any importable module may be named. `env.settings` is checked against the
class's pydantic `Settings`, unknown keys refused. Every failure is an `EnvError`: a config problem
(a `FieldError`, so the CLI and the platform show it like any invalid field) naming `env.name` or
`env.settings.<field>` and the fix.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ValidationError

from trainers.envs.base import Environment
from trainers.envs.calculator import Calculator
from trainers.envs.guess_number import GuessNumber
from trainers.envs.single_turn import SingleTurn
from trainers.errors import FieldError
from trainers.registry import Registry, RegistryError, closest

ENVIRONMENTS = Registry("environment", dotted="Environment class", allow_list_setting="PLATFORM_ENVIRONMENT_MODULES")
"""The built-in environments by name (`trainers.registry`); each entry's object is its class."""
for _cls in (SingleTurn, Calculator, GuessNumber):
    ENVIRONMENTS.add(_cls.name, _cls)


class EnvError(FieldError):
    """An environment that cannot be used: `field` is the config field to change ("env.name",
    "env.settings.max_result_digits"), `message` says why and the fix. A ValueError."""


def resolve(name: str, allowed_modules: Collection[str] | None = None) -> type[Environment]:
    """The environment class of `env.name`: a built-in, or a dotted path imported with importlib
    ("package.module:Class" or "package.module.Class"). EnvError (field env.name) when the name is
    unknown, the module cannot be imported, it has no such attribute, or that is not an
    Environment subclass. With `allowed_modules` (None: any module), a dotted path whose module is
    not one of them nor inside one of those packages is refused before anything is imported."""
    try:
        cls = ENVIRONMENTS.resolve(name, allowed_modules)
    except RegistryError as error:
        raise EnvError("env.name", str(error)) from error.__cause__
    if name in ENVIRONMENTS:
        return cls
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


def settings_problems(cls: type[Environment], settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for each thing wrong with `settings` for environment `cls`: an unknown key
    (whether or not the class's Settings forbids extra keys) or a value its Settings refuses, each
    field named env.settings.<field>. Empty when they validate."""
    known = cls.Settings.model_fields
    problems = []
    for key in settings:
        if key not in known:
            near = closest(str(key), known)
            choices = f"known: {', '.join(known)}" if known else f"{cls.name or cls.__name__} has no settings"
            hint = f"did you mean '{near}'? " if near else ""
            problems.append((f"env.settings.{key}", f"unknown setting; {hint}{choices}"))
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

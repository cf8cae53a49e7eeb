"""One registry for named things: losses, advantages, aggregations, KL estimators, optimizers and
schedules, rewards, tasks, environments, and the platform's sweep samplers and pruners.

A `Registry` of one kind ("policy loss", "reward", ...) maps names to objects (a function, a class,
a value), in registration order. Each entry carries its object, its name, its docstring (the formula
and the paper) and its metadata. An entry is added next to its code, by decorator or, for a value,
by `add`:

    REWARDS = Registry("reward")

    @REWARDS.register("exact_match")
    def exact_match(completion, example): ...

`names()` lists the names (the config schema, the web form and error messages read them there),
`get(name)` gives the entry and `REWARDS[name]` the object; an unknown name raises `RegistryError`
"unknown reward 'x'; did you mean 'y'? known: a, b, c".

Names without the home module. A registry whose functions need JAX is declared in a JAX-free place
with its names and the module that registers them: `Registry("policy loss", names=(...),
home="trainers.algo.loss")`. `names()` and `in` answer from the declared names and import nothing;
`get`, `[]` and `entries()` import the home module on first use and then check that it registered
every declared name. Registering a name that is not declared is refused at once, so the two never
differ silently.

Dotted paths. A registry built with `dotted=` (what a path names, e.g. "Environment class") also
accepts "package.module:Class" (or "package.module.Class") in `resolve(name, allowed_modules)`. One
rule for everyone: the CLI passes no `allowed_modules` (any importable module on the user's own
machine); whoever checks a name for somebody else (the platform) passes an allow-list, and a module
that is not one of those (or inside one of those packages) is refused from the name alone, before
anything is imported, with the same answer whether or not such a module exists.

Pure Python (no JAX, no NumPy, nothing of `trainers`): every layer may import it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any


class RegistryError(ValueError):
    """A name a registry cannot give (unknown, refused, not importable), or a registry declared
    inconsistently (a name registered twice, or declared and registered differently)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered thing. `obj`: the function, class or value; `doc`: its docstring (or the
    doc given to `add`); `metric_keys`: the metrics it adds to a step's (the algorithm's pieces);
    `meta`: anything else given at registration."""

    name: str
    obj: Any
    doc: str
    metric_keys: tuple[str, ...] = ()
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Registry:
    """Entries of one kind, by name, in registration order (in declared order with `names`).

    kind: what one entry is, for messages ("policy loss"); names + home: the declared names and the
    module that registers them (imported on the first `get`); dotted: what a dotted path names
    ("Environment class"; None: no dotted paths); allow_list_setting: where an administrator lists
    the modules a server may import (named in the refusal)."""

    def __init__(
        self,
        kind: str,
        *,
        names: Collection[str] | None = None,
        home: str | None = None,
        dotted: str | None = None,
        allow_list_setting: str = "",
    ):
        if (names is None) != (home is None):
            raise TypeError("a registry's declared names and its home module go together")
        self.kind = kind
        self.home = home
        self.dotted = dotted
        self.allow_list_setting = allow_list_setting
        self._declared = None if names is None else tuple(names)
        self._names = self._declared or ()
        self._entries: dict[str, Entry] = {}
        self._loaded = home is None

    # ------------------------------------------------------------ registering

    def register(self, name: str, metric_keys: tuple[str, ...] = (), **meta: Any) -> Callable[[Any], Any]:
        """Decorator: add the function or class under `name`; it is returned unchanged."""

        def decorate(obj: Any) -> Any:
            self.add(name, obj, metric_keys=metric_keys, **meta)
            return obj

        return decorate

    def add(self, name: str, obj: Any, *, doc: str | None = None, metric_keys: tuple[str, ...] = (), **meta: Any):
        """Add `obj` under `name` (`register` without the decorator, e.g. for a value). RegistryError
        for a name registered twice or, in a registry with declared names, one not declared."""
        if name in self._entries:
            raise RegistryError(f"{self.kind} {name!r} is registered twice")
        if self._declared is not None and name not in self._declared:
            raise RegistryError(
                f"{self.kind} {name!r} is registered in {self.home} but not declared; add it to the "
                f"registry's names (declared: {', '.join(self._declared)})"
            )
        text = (inspect.getdoc(obj) or "") if doc is None else doc
        self._entries[name] = Entry(name, obj, text, tuple(metric_keys), dict(meta))
        if self._declared is None:
            self._names = tuple(self._entries)
        return obj

    # ------------------------------------------------------------ reading

    def names(self) -> tuple[str, ...]:
        """Every name, without importing a home module."""
        return self._names

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def get(self, name: str) -> Entry:
        """The entry of `name`; RegistryError (a ValueError) listing the known names otherwise."""
        if not self._loaded:
            self._load()
        entry = self._entries.get(name)
        if entry is None:
            raise RegistryError(self.unknown(name))
        return entry

    def __getitem__(self, name: str) -> Any:
        """The registered object of `name` (see `get`)."""
        return self.get(name).obj

    def entries(self) -> tuple[Entry, ...]:
        if not self._loaded:
            self._load()
        return tuple(self._entries.values())

    def unknown(self, name: str) -> str:
        """What to answer for a name that is not registered: the close one, then every name."""
        return f"unknown {self.kind} {name!r}; {self._did_you_mean(name)}known: {', '.join(self.names())}"

    def _load(self) -> None:
        """Import the home module, then check it registered every declared name; entries then
        stand in declared order."""
        importlib.import_module(self.home)
        missing = [name for name in self._declared if name not in self._entries]
        if missing:
            raise RegistryError(
                f"{self.kind} {', '.join(map(repr, missing))} declared but not registered in {self.home}; "
                "register each there or remove it from the declared names"
            )
        self._entries = {name: self._entries[name] for name in self._declared}
        self._loaded = True

    # ------------------------------------------------------------ dotted paths

    def resolve(self, name: str, allowed_modules: Collection[str] | None = None) -> Any:
        """The object of `name`: a registered name, or (with `dotted`) a dotted path imported with
        importlib. With `allowed_modules` (None: any module), a path whose module is not one of
        them nor inside one of those packages is refused before anything is imported.
        RegistryError when the name is unknown or refused, the module cannot be imported or has no
        such attribute; checking what the attribute is stays with the caller."""
        if name in self or self.dotted is None:
            return self[name]
        module_name, attribute = split_dotted(name)
        if allowed_modules is not None and not module_allowed(module_name, allowed_modules):
            raise RegistryError(self.refused_message(name, allowed_modules))
        if module_name is None:
            raise RegistryError(
                f"unknown {self.kind} '{name}'; {self._did_you_mean(name)}built in: {', '.join(self.names())}; "
                f"or your own {self.dotted} as a dotted path package.module:Class"
            )
        if not module_name or not attribute:
            raise RegistryError(f"'{name}' is not a dotted path; write package.module:Class")
        try:
            module = importlib.import_module(module_name)
        except (Exception, SystemExit) as error:  # an import runs the module's code: anything may fail there
            raise RegistryError(
                f"cannot import module '{module_name}' of '{name}': {type(error).__name__}: "
                f"{error}; check the module is on the Python path (PYTHONPATH) and imports "
                "cleanly",
            ) from error
        obj = getattr(module, attribute, None)
        if obj is None:
            raise RegistryError(f"module '{module_name}' has no attribute '{attribute}'; name a class defined in it")
        return obj

    def refused_message(self, name: str, allowed_modules: Collection[str]) -> str:
        """What a server answers for a name it will not import: the same text whether or not a
        module of that name exists, so the answer tells nothing about what is installed."""
        listed = (
            f"or a class of the modules this server's administrator lists: {', '.join(sorted(allowed_modules))}"
            if allowed_modules
            else f"this server runs no other {self.kind}s (its administrator lists the "
            f"modules it may load in {self.allow_list_setting})"
        )
        return f"unknown {self.kind} '{name}'; {self._did_you_mean(name)}built in: {', '.join(self.names())}; {listed}"

    def _did_you_mean(self, name: str) -> str:
        near = closest(name, self.names())
        return f"did you mean '{near}'? " if near else ""


def closest(name: str, names: Collection[str]) -> str | None:
    """The name of `names` closest to `name` (difflib, ratio >= 0.5), or None: the one "did you
    mean" of registry names and config choices."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.5)
    return close[0] if close else None


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

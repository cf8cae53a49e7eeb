"""A name -> pure function table, in the style of optax and of verl's `core_algos.py` registries.

Each entry carries its name, its function, the metric keys it contributes to a step's metrics and
its docstring (the formula and the paper). `get` of an unknown name raises ValueError listing the
known names, so a config typo reads as a list of choices. JAX-free and NumPy-free.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    fn: Callable
    metric_keys: tuple[str, ...]
    doc: str


class Registry:
    """Entries of one kind ("advantage estimator", "policy loss", ...), in registration order."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, metric_keys: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
        """Decorator: add `fn` under `name`; the function itself is returned unchanged."""

        def decorate(fn: Callable) -> Callable:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, fn, tuple(metric_keys), inspect.getdoc(fn) or "")
            return fn

        return decorate

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self._entries)
            raise ValueError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

"""What is wrong with a config: `Problem(field, message)`, `ConfigError` listing them, and
`FieldError`, one of them found only when the run starts.

A leaf (it imports nothing of `trainers`): every package may raise these, including those that
the config itself imports to check names (envs, parallel)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: the dotted field and what would fix it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ConfigError(ValueError):
    """Raised for an invalid config; `problems` lists every field that is wrong."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def as_dict(self) -> dict[str, str]:
        """{dotted.field: message}, the shape the REST API returns."""
        out: dict[str, str] = {}
        for p in self.problems:
            out[p.field] = f"{out[p.field]}; {p.message}" if p.field in out else p.message
        return out


class FieldError(ConfigError):
    """A `ConfigError` of one problem, raised where only the run itself can tell (its devices, its
    checkpoint): `field` names the config field to change, `message` says why and the fix. The CLI
    and the platform's worker show it like any invalid config (one line, no traceback)."""

    def __init__(self, field: str, message: str):
        super().__init__([Problem(field, message)])
        self.field = field
        self.message = message

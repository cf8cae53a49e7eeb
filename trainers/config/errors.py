"""What is wrong with a config: `Problem(field, message)` and `ConfigError` listing them."""

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

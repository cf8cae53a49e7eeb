"""Differences between two configs, on their YAML text (schema key order, so the diff is stable
on every database back end) and field by field."""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

from web.config_form import to_yaml


@dataclasses.dataclass(frozen=True)
class DiffLine:
    kind: str  # "add" | "del" | "hunk" | "ctx" | "head"
    text: str


def unified_lines(
    old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str, context_lines: int = 3
) -> list[DiffLine]:
    """difflib's unified diff of the two YAML dumps, each line tagged for highlighting."""
    lines = difflib.unified_diff(
        to_yaml(old).splitlines(), to_yaml(new).splitlines(), old_label, new_label, n=context_lines, lineterm=""
    )
    out = []
    for line in lines:
        if line.startswith(("+++", "---")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append(DiffLine(kind, line))
    return out


def side_by_side_table(old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str) -> str:
    """difflib.HtmlDiff's side-by-side table (it escapes the text itself), changes in context."""
    return difflib.HtmlDiff(wrapcolumn=70).make_table(
        to_yaml(old).splitlines(), to_yaml(new).splitlines(), old_label, new_label, context=True, numlines=3
    )


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """{"batch": {"prompts_per_step": 4}} -> {"batch.prompts_per_step": 4}; lists stay whole."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(dotted field, old value, new value) for each field that differs, in the new config's order."""
    a, b = flatten(old), flatten(new)
    missing = object()
    keys = list(b) + [k for k in a if k not in b]
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k, missing) != b.get(k, missing)]


MISSING = "-"
"""How a page shows a field one config lacks."""


def shown_value(value: Any) -> str:
    """A config value as the YAML and JSON the user writes spell it: true / false / null, lists and
    mappings as JSON; numbers and text as they are (never Python's True, None or ['a'])."""
    if isinstance(value, (list, dict, bool)) or value is None:
        return json.dumps(value)
    return str(value)


def changed_field_rows(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """changed_fields as the page shows them: (dotted field, old, new), each value by `shown_value`,
    MISSING where a config lacks the field."""
    a, b = flatten(old), flatten(new)
    return [
        (field, shown_value(a[field]) if field in a else MISSING, shown_value(b[field]) if field in b else MISSING)
        for field, _, _ in changed_fields(old, new)
    ]


@dataclasses.dataclass(frozen=True)
class FieldRow:
    field: str  # dotted path
    values: list[str]  # one per config, as shown ("-" where the config lacks the field)
    differs: bool


def fields_side_by_side(configs: list[dict[str, Any]]) -> list[FieldRow]:
    """Every dotted field of any of `configs` (first config's order, then the others' new ones)
    with each config's value, and whether they are not all equal (a missing field differs)."""
    flat = [flatten(c) for c in configs]
    fields: dict[str, None] = {}
    for f in flat:
        fields.update(dict.fromkeys(f))
    missing = object()
    rows = []
    for name in fields:
        raw = [f.get(name, missing) for f in flat]
        shown = [MISSING if v is missing else shown_value(v) for v in raw]
        rows.append(FieldRow(name, shown, any(v != raw[0] for v in raw[1:])))
    return rows

"""The experiment config as form data, driven by the trainer's one schema.

Nothing here knows a config field by name: the fields, their kinds, defaults, help and choices all
come from `trainers.config.field_specs()`, and reading YAML and validating are experiments.configs
alone (the trainer's guarded loader and schema). This module only converts between three shapes of the same config:

- *config data*: the nested plain dict that YAML, JSON and `Experiment.config` hold;
- *form values*: one text (or bool) per field, keyed by HTML field name (`batch__prompts_per_step`;
  Django style, `__` for the dot), with `rewards` as "name: weight" lines; a nullable bool
  (`data.chat_template`: null means "decide for me") is the text "", "true" or "false", not a checkbox;
  a mapping (`env.settings`) is the text of a JSON object (empty: `{}`);
- *YAML text*: what the YAML tab, import and export show.

Text to value is deliberately lax (numbers are parsed when they look like numbers, everything else
is passed through as text) so that the schema, not the platform, says what is wrong.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from trainers.config import FieldSpec, field_specs, iter_field_specs

NULL_TEXTS = ("", "null", "~")  # what a nullable field's text means as null
NULLABLE_BOOL_VALUES = {"": None, "null": None, "true": True, "false": False}  # a three-state select's texts


# --- names ---------------------------------------------------------------------------------------


def html_name(path: str) -> str:
    """`batch.mini_batch_prompts` -> `batch__mini_batch_prompts` (the form field's name)."""
    return path.replace(".", "__")


def specs_by_name() -> dict[str, FieldSpec]:
    """HTML field name -> spec, in schema order."""
    return {html_name(spec.path): spec for spec in iter_field_specs()}


def error_target(key: str) -> str | None:
    """The form field that shows the schema's error for dotted `key`, or None (a form-wide error).
    `rewards[1].weight` goes to the `rewards` field; `env.settings.low` (a key inside a mapping) to
    the `env.settings` field; `batch.nonsense` (unknown key) to none."""
    names = specs_by_name()
    path = key.split("[", 1)[0]
    candidates = [key, path] + [path.rsplit(".", n)[0] for n in range(1, path.count(".") + 1)]
    for candidate in candidates:
        name = html_name(candidate)
        if name in names and (candidate in (key, path) or names[name].kind == "mapping"):
            return name
    return None


# --- text <-> value ------------------------------------------------------------------------------


def _number(text: str) -> Any:
    """'8' -> 8, '1e-3' -> 0.001, anything else stays text (the schema reports it)."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def value_from_text(spec: FieldSpec, text: Any) -> Any:
    """One form value -> config data for `spec` (lax: the schema judges the result)."""
    if spec.kind == "bool" and spec.nullable:
        if isinstance(text, str):
            return NULLABLE_BOOL_VALUES.get(text.strip().lower(), text)  # anything else: the schema says
        return text
    if spec.kind == "bool":
        return bool(text)
    if spec.kind == "list":
        return rewards_from_text(spec, text or "")
    if spec.kind == "mapping":
        return mapping_from_text(spec, text)
    text = "" if text is None else str(text).strip()
    if spec.multiline:  # a text area sends CR LF line breaks
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if spec.nullable and text.lower() in NULL_TEXTS:
        return None
    if spec.kind in ("int", "float"):
        return None if text == "" else _number(text)
    return text


def text_from_value(spec: FieldSpec, value: Any) -> Any:
    """Config data -> the form's text (bool for a checkbox)."""
    if spec.kind == "bool" and spec.nullable:
        return (
            {None: "", True: "true", False: "false"}[value] if value is None or isinstance(value, bool) else str(value)
        )
    if spec.kind == "bool":
        return bool(value)
    if spec.kind == "list":
        return rewards_to_text(value)
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def is_default(spec: FieldSpec, text: Any) -> bool:
    """Whether a form value means the field's schema default (`1e-3` and `0.001` alike)."""
    try:
        return value_from_text(spec, text) == value_from_text(spec, text_from_value(spec, spec.default))
    except (KeyError, TypeError, ValueError):
        return False


def mapping_from_text(spec: FieldSpec, text: Any) -> Any:
    """A JSON object's text -> the dict; empty -> {} (null when the field is nullable); anything
    else (not JSON, or JSON that is not an object) stays text, for the schema to refuse naming the
    field (mapping_problem says what is wrong in words)."""
    if text is None:
        return None if spec.nullable else {}
    if not isinstance(text, str):
        return text
    text = text.strip()
    if spec.nullable and text.lower() in NULL_TEXTS:
        return None
    if text == "":
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def mapping_problem(text: Any) -> str:
    """What is wrong with a mapping field's text ('' when it is a JSON object, or empty)."""
    if not isinstance(text, str) or text.strip() in ("", *NULL_TEXTS):
        return ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f'not valid JSON ({exc}); write a JSON object such as {{"name": 1}}, or {{}} for none'
    if not isinstance(value, dict):
        return f'must be a JSON object such as {{"name": 1}} ({{}} for none), got a JSON {_JSON_TYPES[type(value)]}'
    return ""


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "true/false", type(None): "null"}


def rewards_from_text(spec: FieldSpec, text: str) -> list[dict[str, Any]]:
    """'exact_match: 1.0' lines (weight optional, '#' comments) -> [{name, weight}, ...]."""
    items = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, weight = line.partition(":")
        item: dict[str, Any] = {"name": name.strip()}
        if sep and weight.strip():
            item["weight"] = _number(weight.strip())
        items.append(item)
    return items


def rewards_to_text(items: Any) -> str:
    if not isinstance(items, list):
        return "" if items is None else json.dumps(items)
    lines = []
    for item in items:
        if isinstance(item, dict) and "name" in item:
            weight = item.get("weight")
            lines.append(f"{item['name']}: {weight}" if weight is not None else str(item["name"]))
        else:
            lines.append(json.dumps(item))
    return "\n".join(lines)


# --- config data <-> form values -----------------------------------------------------------------


def _get(config: dict[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def form_values(config: dict[str, Any] | None) -> dict[str, Any]:
    """Config data (possibly partial) -> {html name: text}; missing fields show their default."""
    config = config if isinstance(config, dict) else {}
    values = {}
    for name, spec in specs_by_name().items():
        found, value = _get(config, spec.path)
        values[name] = text_from_value(spec, value if found else spec.default)
    return values


def config_from_values(values: dict[str, Any]) -> dict[str, Any]:
    """{html name: text} -> nested config data (every field; unvalidated)."""
    raw: dict[str, Any] = {}
    for name, spec in specs_by_name().items():
        node = raw
        *parents, leaf = spec.path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value_from_text(spec, values.get(name))
    return raw


def ordered(config: dict[str, Any]) -> dict[str, Any]:
    """The same data with keys in schema order (PostgreSQL's jsonb does not keep key order);
    keys the schema does not know come last, unchanged."""
    if not isinstance(config, dict):
        return config
    out: dict[str, Any] = {}
    for section in field_specs():
        for spec in section.fields:
            found, value = _get(config, spec.path)
            if not found:
                continue
            node = out
            *parents, leaf = spec.path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            if spec.kind == "list" and isinstance(value, list):
                keys = [f.path for f in spec.item_fields]
                value = [
                    {**{k: v[k] for k in keys if k in v}, **{k: x for k, x in v.items() if k not in keys}}
                    if isinstance(v, dict)
                    else v
                    for v in value
                ]
            node[leaf] = value
    for key, value in config.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key].update({k: v for k, v in value.items() if k not in out[key]})
    return out


def to_yaml(config: dict[str, Any]) -> str:
    """YAML text of config data, keys in schema order."""
    return yaml.safe_dump(ordered(config), sort_keys=False, allow_unicode=True)

"""Field specs: the schema described as plain data, so a form can be generated from it (the web
platform's experiment form has no field list of its own)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel

from trainers.config.metric_names import METRIC_NAMES
from trainers.config.schema import ExperimentConfig
from trainers.data.rewards import REWARDS
from trainers.data.tasks import TASKS
from trainers.envs.registry import ENVIRONMENTS
from trainers.models.presets import PRESETS


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One config field as a form needs it.

    `path` is the dotted YAML path (`batch.mini_batch_prompts`; a field of a sub-section has the
    whole path, `async.importance_sampling.max`; an item field of a list is just its key, `name`).
    `kind` is one of "int", "float", "bool", "str", "choice" (a Literal: see `choices`), "list" (a
    list of mappings: see `item_fields`), "int_list" (a list of integers, which the schema also
    accepts as text: "0,1" or "[0, 1]") or "mapping" (a JSON object: `env.settings`); `nullable` says whether null is
    allowed (so "optional int" is kind "int", nullable True). `default` is JSON-able plain data.
    `required` fields have no default (`default` is then None). `bounds` holds the numeric
    limits among ge/gt/le/lt. `suggestions` lists the known values of
    a free-text field (model presets, tasks, reward and metric names, built-in environments) - the
    same lists the cross-field checks accept. `multiline` marks a "str" field whose text may hold
    line breaks (`data.system_prompt`: a form shows a text area), from the schema's
    `json_schema_extra={"multiline": True}`.
    """

    path: str
    kind: str
    nullable: bool
    default: Any
    description: str
    choices: tuple[Any, ...] = ()
    bounds: tuple[tuple[str, float], ...] = ()
    suggestions: tuple[str, ...] = ()
    item_fields: tuple[FieldSpec, ...] = ()
    required: bool = False
    multiline: bool = False

    @property
    def key(self) -> str:
        """The path within its section (`mini_batch_prompts`, `importance_sampling.max`)."""
        return self.path.split(".", 1)[-1]

    @property
    def section(self) -> str:
        """The top-level section (`batch`), or "" for a top-level field such as `seed`."""
        return self.path.split(".", 1)[0] if "." in self.path else ""

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for a page's script)."""
        out = dataclasses.asdict(self)
        out["bounds"] = dict(self.bounds)
        out["item_fields"] = [f.as_dict() for f in self.item_fields]
        return out


@dataclasses.dataclass(frozen=True)
class SectionSpec:
    """A group of fields in schema order: a section (`batch`), a top-level list (`rewards`), or
    key "" for the top-level values (`seed`)."""

    key: str
    description: str
    fields: tuple[FieldSpec, ...]


def _known_values() -> dict[str, tuple[str, ...]]:
    """Dotted path -> the names its cross-field check accepts."""

    return {
        "model.preset": tuple(PRESETS),
        "data.task": TASKS.names(),
        "rewards.name": REWARDS.names(),
        "checkpoint.keep_best_metric": tuple(METRIC_NAMES),
        "env.name": ENVIRONMENTS.names(),  # the built-ins; a dotted path "package.module:Class" is accepted too
    }


def _bounds(field: Any) -> tuple[tuple[str, float], ...]:
    out = []
    for meta in field.metadata:
        for name in ("ge", "gt", "le", "lt"):
            value = getattr(meta, name, None)
            if value is not None:
                out.append((name, value))
    return tuple(out)


def _scalar(annotation: Any) -> Any:
    """`Annotated[int, ...]` -> int; anything else unchanged."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _section_field_specs(model: type[BaseModel], prefix: str, known: dict[str, tuple[str, ...]]) -> list[FieldSpec]:
    """The leaf fields of a section, in schema order; a sub-section's fields (`async.importance_sampling`)
    come flattened in its place, with their full dotted paths."""
    out: list[FieldSpec] = []
    for n, f in model.model_fields.items():
        path = f"{prefix}.{f.alias or n}"
        if _is_section(f.annotation):
            out += _section_field_specs(f.annotation, path, known)
        else:
            out.append(_field_spec(model, n, path, known))
    return out


def _field_spec(model: type[BaseModel], name: str, path: str, known: dict[str, tuple[str, ...]]) -> FieldSpec:
    field = model.model_fields[name]
    annotation = field.annotation
    args = typing.get_args(annotation)
    nullable = type(None) in args and typing.get_origin(annotation) in (typing.Union, types.UnionType)
    if nullable:
        rest = [a for a in args if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    choices: tuple[Any, ...] = ()
    item_fields: tuple[FieldSpec, ...] = ()
    if typing.get_origin(annotation) is Literal:
        kind, choices = "choice", typing.get_args(annotation)
    elif typing.get_origin(annotation) is list and _scalar(typing.get_args(annotation)[0]) is int:
        kind = "int_list"
    elif typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        kind = "list"
        item_known = {k.split(".", 1)[1]: v for k, v in known.items() if k.startswith(path + ".")}
        item_fields = tuple(_field_spec(item, n, f.alias or n, item_known) for n, f in item.model_fields.items())
    elif annotation in (bool, int, float, str):
        kind = annotation.__name__
    elif typing.get_origin(annotation) is dict:
        kind = "mapping"  # a JSON object (env.settings), checked by its owner's schema in the config checks
    else:  # pragma: no cover - a new field type needs a kind here
        raise TypeError(f"{path}: no form kind for {annotation!r}")
    required = field.is_required()
    default = None if required else field.get_default(call_default_factory=True)
    if isinstance(default, list):
        default = [d.model_dump(mode="json", by_alias=True) if isinstance(d, BaseModel) else d for d in default]
    return FieldSpec(
        path=path,
        kind=kind,
        nullable=nullable,
        default=default,
        description=field.description or "",
        choices=choices,
        bounds=_bounds(field),
        suggestions=known.get(path, ()),
        item_fields=item_fields,
        required=required,
        multiline=kind == "str"
        and bool(isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("multiline")),
    )


@functools.lru_cache(maxsize=1)
def field_specs() -> tuple[SectionSpec, ...]:
    """Every field of ExperimentConfig, in schema order, grouped by section.

    Sections are the nested models (`model`, `data`, ..., `async`, ...) and the top-level list
    `rewards`; top-level values (`seed`) form the section with key "" at the place of the first
    one. A sub-section inside a section (`async.importance_sampling`) is not a section of its
    own: its fields are listed in the outer section, in its place, with their full dotted paths.
    Section descriptions are the section class's own docstring, if any.
    """
    known = _known_values()
    sections: list[SectionSpec] = []
    top_values: list[FieldSpec] = []
    top_index: int | None = None
    for name, field in ExperimentConfig.model_fields.items():
        key = field.alias or name
        annotation = field.annotation
        if _is_section(annotation):
            fields = tuple(_section_field_specs(annotation, key, known))
            doc = annotation.__dict__.get("__doc__") or field.description or ""
            sections.append(SectionSpec(key, inspect.cleandoc(doc), fields))
            continue
        spec = _field_spec(ExperimentConfig, name, key, known)
        if spec.kind == "list":
            sections.append(SectionSpec(key, spec.description, (spec,)))
        else:
            if top_index is None:
                top_index = len(sections)
            top_values.append(spec)
    if top_values:
        sections.insert(top_index or 0, SectionSpec("", "", tuple(top_values)))
    return tuple(sections)


def iter_field_specs() -> list[FieldSpec]:
    """Every field of `field_specs()`, flattened in order (a list field counts once)."""
    return [f for section in field_specs() for f in section.fields]

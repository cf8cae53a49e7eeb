"""A request's inputs, read through the shapes its operation declares (api/contract.py's `Op.query`
and `Op.body`), so what the OpenAPI document says an endpoint takes is what it checks: the query
parameters before the view runs (it reads `request.query`, the shape), the JSON body when the view
asks (api.endpoint.payload, after it has found its object). A parameter the shape lacks cannot be
read.

A value the shape refuses is a 400 naming it, {"errors": {"limit": "must be at least 1, got '0'"}}
(a query's also with one line, "error": "limit: must be at least 1, got '0'"); the views then check
what only they can know (that a run exists, that a name is free) with their own messages. A body's
booleans are JSON's (StrictBool in its shape: "no" is not false); its whole numbers may also come as
text of digits, as the forms send them, but never as true or false.

Query parameters arrive as text: an empty one is absent (`?limit=` reads as the default), a list field
takes every value of a repeated parameter (`?tag=a&tag=b`; those a shape lists in `comma_separated`
also split at commas, `?tag=a,b`, as the web pages' addresses write them), any other field the last
one, and parameters the shape does not name are ignored (a client may send more than this server
knows)."""

from __future__ import annotations

import typing
from typing import Annotated, Any, ClassVar

from django.http import QueryDict
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

INT_LIMIT = 2**53  # a whole number beyond this would overflow the databases' integers


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):  # pydantic reads true as 1; a count or an id is never a yes/no
        raise ValueError(f"must be a whole number, got {value!r}")
    return value


WholeNumber = Annotated[int, BeforeValidator(_not_a_bool)]
"""An input's whole number: JSON's, or text of digits (a query's, a form's); never true or false."""


class Query(BaseModel):
    """The base of every query shape: its fields are the parameters, each with its default."""

    model_config = ConfigDict(extra="ignore")
    comma_separated: ClassVar[tuple[str, ...]] = ()  # list fields whose values may also be "a,b"


class InvalidInput(ValueError):
    """{parameter or dotted field: message} for what a shape refused."""

    def __init__(self, errors: dict[str, str]):
        super().__init__(errors)
        self.errors = errors


def read_query(shape: type[BaseModel], params: QueryDict) -> BaseModel:
    """`params` as `shape` (see the module's docstring), or InvalidInput."""
    raw: dict[str, Any] = {}
    split = getattr(shape, "comma_separated", ())
    for name, field in shape.model_fields.items():
        values = [value for value in params.getlist(name) if value.strip()]
        if name in split:
            values = [item.strip() for value in values for item in value.split(",") if item.strip()]
        if values:
            raw[name] = values if _is_list(field.annotation) else values[-1]
    return _validated(shape, raw)


def read_body(shape: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    """`data` (a JSON object) as `shape`, or InvalidInput."""
    return _validated(shape, data)


def _validated(shape: type[BaseModel], raw: dict[str, Any]) -> BaseModel:
    try:
        value = shape.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInput(problems(exc)) from None
    too_large = {name: f"is out of range: {v}" for name, v in _ints(value) if abs(v) > INT_LIMIT}
    if too_large:
        raise InvalidInput(too_large)
    return value


def _ints(value: BaseModel, prefix: str = ""):
    """(dotted name, int) for each whole number in `value`, nested shapes and lists included."""
    for name in type(value).model_fields:
        item = getattr(value, name)
        items = item if isinstance(item, list) else [item]
        for one in items:
            if isinstance(one, int) and not isinstance(one, bool):
                yield prefix + name, one
            elif isinstance(one, BaseModel):
                yield from _ints(one, f"{prefix}{name}.")


def _is_list(annotation: Any) -> bool:
    """A `list[...]` field, optional or not."""
    if typing.get_origin(annotation) is list:
        return True
    return any(typing.get_origin(arg) is list for arg in typing.get_args(annotation))


def problems(exc: ValidationError) -> dict[str, str]:
    """{dotted field: message in plain words} for each of `exc`'s errors (the first per field). A list's
    item is named in the message, not the key, so the keys are the fields the document lists:
    {"overrides": "item 0 must be a string, got 1"}."""
    out: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        loc = [part for part in err["loc"] if not _is_type_step(part)]
        items = [str(part) for part in loc if isinstance(part, int)]
        key = ".".join(str(part) for part in loc if not isinstance(part, int)) or "(body)"
        out.setdefault(key, f"item {'.'.join(items)} {_message(err)}" if items else _message(err))
    return out


def _is_type_step(part) -> bool:
    """pydantic names the union member or validator it tried (`int`, `function-after[...]`) in a location."""
    return isinstance(part, str) and ("[" in part or part in ("int", "str", "float", "bool", "list", "dict"))


def _message(err: dict[str, Any]) -> str:
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    shown = f"{given!r:.60}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, got {shown}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number, got {shown}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false, got {shown}"
    if kind in ("string_type",):
        return f"must be a string, got {shown}"
    if kind == "string_unicode":
        return "must be valid Unicode text (it holds a lone surrogate)"
    if kind in ("list_type",):
        return f"must be a list, got {shown}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be an object, got {shown}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}, got {shown}"
    if kind == "greater_than":
        return f"must be more than {ctx['gt']}, got {shown}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}, got {shown}"
    if kind == "less_than":
        return f"must be less than {ctx['lt']}, got {shown}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx['expected']}, got {shown}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}, got {shown}"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} items"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item{'s' if ctx['min_length'] != 1 else ''}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:  # a validator's own message
        return str(ctx["error"])
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "is not a field here"
    message = err["msg"]
    return message[:1].lower() + message[1:]

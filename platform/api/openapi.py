"""The OpenAPI 3.1 document of the JSON API, generated from the code: the routes of api/urls.py
(their regexes become path templates and path parameters) and each view's declared operations
(api/contract.py), with pydantic's JSON schemas under components/schemas."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.urls import URLResolver, get_resolver
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from api.contract import Error, Errors, Op

API_PREFIX = "/api/"
REF_TEMPLATE = "#/components/schemas/{model}"
SECURITY_SCHEME = "token"
BODY_METHODS = ("POST", "PUT", "PATCH")
_GROUP_START = re.compile(r"\(\?P<(?P<name>\w+)>")
_REPEAT = re.compile(r"\[0-9\]\{1,(?P<digits>[0-9]+)\}")
# Sub-collections that are resources of their own in the docs (`runs/{pk}/samples` is tagged
# "samples", not "runs"); every other path is tagged by its first segment (see resource_tag).
NESTED_RESOURCES = ("samples", "checkpoints")
# Where a docstring that describes several methods starts one method's part: the method's name at
# the start, after a sentence or after a " / " ("GET: the run. PATCH {...}: ...").
_METHOD_SECTION = re.compile(r"(?:^|(?<=\. )|(?<=/ ))(GET|HEAD|POST|PUT|PATCH|DELETE)\b")
SUMMARY_MAX_CHARS = 120


class RouteError(ValueError):
    """A route regex the generator cannot turn into a path template."""


def path_template(regex: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """`^runs/(?P<pk>[0-9]{1,18})/?$` -> ("runs/{pk}", {"pk": its JSON schema}): named groups become
    parameters (digits: a bounded integer, `a|b|c`: an enum), `\\.` a dot, the optional trailing
    slash and anchors go."""
    text = regex.removeprefix("^").removesuffix("$").removesuffix("/?")
    template, params, i = [], {}, 0
    while i < len(text):
        match = _GROUP_START.match(text, i)
        if match:
            end = _group_end(text, match.end())
            params[match["name"]] = param_schema(text[match.end() : end])
            template.append("{" + match["name"] + "}")
            i = end + 1
        elif text[i] == "\\" and i + 1 < len(text):
            template.append(text[i + 1])
            i += 2
        elif text[i] in "()[]{}?*+|^$":
            raise RouteError(f"route {regex!r}: cannot template {text[i]!r} outside a named group")
        else:
            template.append(text[i])
            i += 1
    return "".join(template), params


def _group_end(text: str, start: int) -> int:
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "\\":
            continue
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise RouteError(f"unbalanced group in {text!r}")


def param_schema(pattern: str) -> dict[str, Any]:
    """A path parameter's schema from its regex: `[0-9]{1,N}` an integer below 10**N, `a|b` an enum."""
    repeat = _REPEAT.fullmatch(pattern)
    if repeat:
        return {"type": "integer", "minimum": 0, "maximum": 10 ** int(repeat["digits"]) - 1}
    if re.fullmatch(r"\w+(\|\w+)*", pattern):
        return {"type": "string", "enum": pattern.split("|")}
    return {"type": "string", "pattern": f"^{pattern}$"}


def api_routes(patterns=None) -> Iterator[tuple[str, Callable]]:
    """(regex, view) of every route under /api/ but the catch-all JSON 404."""
    if patterns is None:
        patterns = _mounted_api_patterns()
    for pattern in patterns:
        regex = pattern.pattern.regex.pattern
        if regex in ("", "^"):
            continue
        yield regex, pattern.callback


def _mounted_api_patterns() -> list:
    """api/urls.py's patterns as the site mounts them (found through Django's resolver, so this
    module does not import api.urls, which imports the schema views that import this)."""
    for entry in get_resolver().url_patterns:
        if isinstance(entry, URLResolver) and str(entry.pattern) == API_PREFIX.lstrip("/"):
            return entry.url_patterns
    raise RouteError(f"no URL include mounted at {API_PREFIX}")


def undeclared_routes(patterns=None) -> list[str]:
    """The routes whose view serves the API (api_endpoint) but declares no operations."""
    return [
        regex
        for regex, view in api_routes(patterns)
        if hasattr(view, "api_methods") and not getattr(view, "api_ops", None)
    ]


def build(patterns=None, title: str = "GRPO platform API", version: str = "1") -> dict[str, Any]:
    """The whole OpenAPI 3.1 document."""
    paths: dict[str, dict[str, Any]] = {}
    models: set[type[BaseModel]] = {Error, Errors}
    routes = [(regex, view, getattr(view, "api_ops", None) or {}) for regex, view in api_routes(patterns)]
    templates = {regex: path_template(regex) for regex, _, ops in routes if ops}
    resources = {template.split("/", 1)[0] for template, _ in templates.values()}
    tags: list[str] = []
    for regex, view, ops in routes:
        if not ops:
            continue
        template, path_params = templates[regex]
        item = paths.setdefault(API_PREFIX + template, {})
        summary, description = _doc(view)
        tag = resource_tag(template, resources)
        for method, op in sorted(ops.items()):
            own = summary if len(ops) == 1 else method_summary(description, method)
            item[method.lower()] = operation = _operation(view, method, op, path_params, own, description, models, tag)
            tags += [t for t in operation["tags"] if t not in tags]
    _, defs = models_json_schema(
        [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)], ref_template=REF_TEMPLATE
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": "Authenticate with `Authorization: Token <key>` (your API tokens page).",
        },
        "servers": [{"url": "/"}],
        "tags": [{"name": tag} for tag in tags],  # in the order of api/urls.py
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`Token <key>`: a key from the API tokens page",
                }
            },
        },
        "security": [{SECURITY_SCHEME: []}],
    }


def _doc(view: Callable) -> tuple[str, str]:
    """(summary, description): the docstring's first sentence (see short_summary), and all of it."""
    doc = inspect.getdoc(view) or ""
    return short_summary(" ".join(doc.split())), doc


def short_summary(text: str) -> str:
    """`text`'s first sentence (see _first_sentence), cut at a word to SUMMARY_MAX_CHARS with " …"."""
    part = _first_sentence(text)
    if len(part) > SUMMARY_MAX_CHARS:
        part = part[:SUMMARY_MAX_CHARS].rsplit(" ", 1)[0] + " …"
    return part


def method_summary(doc: str, method: str) -> str:
    """One method's summary, for a view that serves several and declares no `Op.summary`: the first
    sentence of the docstring's part about `method` (`GET: the run. PATCH {...}: replaces ...` ->
    "GET: the run."), cut to SUMMARY_MAX_CHARS; "" when the docstring names no such part. Each
    method gets its own line in the docs instead of all repeating the docstring's first line."""
    text = " ".join(doc.split())
    starts = [(m.start(), m.group(1)) for m in _METHOD_SECTION.finditer(text)]
    for k, (start, name) in enumerate(starts):
        if name != method:
            continue
        end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
        return short_summary(text[start:end].strip().removesuffix("/").strip())
    return ""


def _first_sentence(text: str) -> str:
    """Up to the first ". " outside brackets (a body's `{...}` or a note's `(...)`)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "({[":
            depth += 1
        elif char in ")}]":
            depth = max(depth - 1, 0)
        elif char == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text


def resource_tag(template: str, resources: set[str]) -> str:
    """The resource a path template belongs to, its tag in the docs: the last literal segment (a
    file suffix dropped) that is a top-level resource (`resources`: the paths' first segments) or one
    of NESTED_RESOURCES, else the first segment. `experiments/{pk}/runs` -> "runs",
    `runs/{pk}/samples.jsonl` -> "samples", `runs/{pk}/checkpoints/{step}/hf.zip` -> "checkpoints",
    `runs/{pk}/metrics` -> "runs"."""
    literals = [part.split(".", 1)[0] for part in template.split("/") if part and not part.startswith("{")]
    known = [part for part in literals if part in resources or part in NESTED_RESOURCES]
    return known[-1] if known else (literals[0] if literals else "api")


def _operation(
    view, method: str, op: Op, path_params: dict, summary: str, description: str, models: set, tag: str
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": f"{view.__name__}_{method.lower()}",
        "summary": op.summary or summary or f"{method} {view.__name__}",
        "description": description,
        "tags": list(op.tags) or [tag],
        "parameters": [{"name": n, "in": "path", "required": True, "schema": s} for n, s in path_params.items()],
    }
    if op.query is not None:
        out["parameters"] += _query_parameters(op.query)
    if op.body is not None:
        models.add(op.body)
        out["requestBody"] = {"required": False, "content": {"application/json": {"schema": _ref(op.body)}}}
    if op.form is not None:
        # inline, not a $ref: pydantic already writes a `bytes` field as a file (format: binary)
        out["requestBody"] = {
            "required": True,
            "content": {"multipart/form-data": {"schema": op.form.model_json_schema(ref_template=REF_TEMPLATE)}},
        }
    responses = dict(op.responses)
    responses.setdefault(401, Error)
    responses.setdefault(414, Error)  # any URL over api.long_urls.API_MAX_URL_CHARS
    if path_params:
        responses.setdefault(404, Error)
    if op.query is not None or op.body is not None or op.form is not None:
        responses.setdefault(400, Errors)
    if method in BODY_METHODS:
        responses.setdefault(400, Errors)
        responses.setdefault(413, Error)
    out["responses"] = {str(status): _response(status, shape, models) for status, shape in sorted(responses.items())}
    return out


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=model.__name__)}


def _response(status: int, shape, models: set) -> dict[str, Any]:
    description = _STATUS_TEXT.get(status, f"HTTP {status}")
    if shape is None:
        return {"description": description}
    if isinstance(shape, str):
        return {"description": description, "content": {shape: {"schema": {"type": "string", "format": "binary"}}}}
    if shape is Errors or shape is Error:  # a view may answer either: {"errors"} names the fields
        schema = {"anyOf": [_ref(Errors), _ref(Error)]}
    else:
        models.add(shape)
        schema = _ref(shape)
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF_TEMPLATE)
    required = set(schema.get("required", ()))
    params = []
    for name, prop in schema.get("properties", {}).items():
        prop = _without_null(dict(prop))
        param = {"name": name, "in": "query", "required": name in required, "schema": prop}
        if "description" in prop:
            param["description"] = prop.pop("description")
        if prop.get("type") == "array":
            param.update(style="form", explode=True)
        params.append(param)
    return params


def _without_null(prop: dict[str, Any]) -> dict[str, Any]:
    """`X | None` (an optional parameter) is `X` in a query: absent, not null. A default other than
    null stays: what an absent parameter means."""
    options = prop.pop("anyOf", None)
    if prop.get("default") is None:
        prop.pop("default", None)
    prop.pop("title", None)
    if options:
        kept = [o for o in options if o.get("type") != "null"]
        if len(kept) == 1:
            prop.update(kept[0])
        else:
            prop["anyOf"] = kept
    return prop


_STATUS_TEXT = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Invalid input",
    401: "Not authenticated",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict with the state",
    413: "Request body too large",
    414: "URL too long",
    429: "Over a limit",
}

"""The API contract: how an endpoint declares what it takes and answers, so that `GET /api/schema`
(api/openapi.py) is generated from the code and Schemathesis can fuzz every endpoint
(tests/platform/api/test_api_contract.py).

How to declare an endpoint (every route under /api/ must; a test fails otherwise):

    from api import experiment_shapes as shapes
    from api.contract import Errors, Op, operations

    @operations(
        GET=Op(query=shapes.ExperimentPage, responses={200: shapes.ExperimentList}),
        POST=Op(body=shapes.ExperimentInput, responses={201: shapes.ExperimentCreated, 400: Errors}),
    )
    @api_endpoint("GET", "POST")
    def experiments(request): ...

- `operations` goes ABOVE `api_endpoint` and has one `Op` per method `api_endpoint` serves.
- `query`: a pydantic model whose fields are the query parameters (a `list[str]` field is a
  repeated parameter, `?tag=a&tag=b`). `body`: a pydantic model of the JSON body; `form`: a
  pydantic model of a multipart/form-data body (a `bytes` field is a file: the generator writes it
  as `format: binary`). Path parameters come from the URL regex (api/urls.py), not from `Op`.
- `responses`: {status: pydantic model}; `None` as the model means "no JSON body" and a string means
  that media type (e.g. `{200: "application/zip"}`). Every response also gets `401: Error`, `414:
  Error` (an over-long URL, api/long_urls.py) and `404: Error` (unknown id, or any path with ids);
  list the others the view can answer. Errors are always the shared `Error` ({"error"}) or
  `Errors` ({"errors": {field: message}, "error"?}).
- Summary and description come from the view's docstring (its first sentence, then all of it), so keep the
  docstring the reference for the shapes. A resource's shapes live in api/<resource>_shapes.py next
  to its api/<resource>_views.py (the shared pieces in api/shapes.py); pydantic's JSON schema for
  each model lands under components/schemas by the model's class name (keep names unique).
- `api_endpoint(*methods)` without `operations` keeps working at run time; only the schema (and the
  coverage test) miss the endpoint until it is declared.

A response model is a `Shape` (below), and the view answers with an instance of it (api.endpoint
sends it): a key the view adds that the shape lacks, or a required field it leaves out, fails at
once instead of drifting from the document. tests/platform/api/test_api_shapes.py calls every operation
and checks each JSON answer against the model its `Op` names.

Inputs go through their declarations too (api/inputs.py): `query` is read before the view runs and
the view reads `request.query` (a query shape derives from `api.inputs.Query`, its fields carrying
their defaults); `body` is read when the view asks (`api.endpoint.payload(request)`, the shape, or
`checked_body(request)`, the object as sent once the shape accepted it, for the services the web
forms share). A value the shape refuses is a 400 naming it, so what the document says an endpoint
takes is what it checks; the views then check what only they can know.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict


class Shape(BaseModel):
    """An answer's shape: the views build their JSON answers as these (api.endpoint sends them), so
    a key the shape does not declare is an error (a 500 the tests meet), as is a required field left
    out. A field with a default may be left out of the answer (`exclude_unset`): the schema lists it
    as optional."""

    model_config = ConfigDict(extra="forbid")


class Error(Shape):
    """Every refusal: a message for people."""

    model_config = ConfigDict(title="Error")
    error: str


class Errors(Shape):
    """Invalid input: {field or parameter: message}, sometimes with an overall message."""

    model_config = ConfigDict(title="Errors")
    errors: dict[str, str]
    error: str | None = None


ResponseShape = type[BaseModel] | str | None


@dataclass(frozen=True)
class Op:
    """One method of one endpoint: its inputs and its possible answers."""

    responses: dict[int, ResponseShape]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    form: type[BaseModel] | None = None
    summary: str = ""  # defaults to the docstring's first line
    tags: tuple[str, ...] = field(default_factory=tuple)


def operations(**ops: Op) -> Callable:
    """Attach `ops` ({"GET": Op(...), ...}) to an `api_endpoint` view as `view.api_ops`."""

    def decorate(view: Callable) -> Callable:
        served = set(getattr(view, "api_methods", ()))
        declared = {method.upper() for method in ops}
        if served and declared != served:
            raise TypeError(
                f"{view.__name__}: operations {sorted(declared)} differ from the methods it serves {sorted(served)}"
            )
        view.api_ops = {method.upper(): op for method, op in ops.items()}
        return view

    return decorate

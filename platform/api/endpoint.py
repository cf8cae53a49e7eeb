"""The API's plumbing: one decorator that authenticates, checks the method, parses the body and
turns every failure into a JSON answer, so views only do their one thing.

A view answers with the shape its contract declares (an api.contract.Shape instance: `send`
writes it), or with an HttpResponse of another kind (a file, a stream, 204); a plain dict is a bug
(a 500), so no answer bypasses its shape.

Errors are `{"error": "message"}` (or `{"errors": {field: message}}` for invalid input) with a 4xx
status: 400 bad input, 401 not authenticated, 403 CSRF, 404 unknown or someone else's object, 405
wrong method, 409 an action the run's status does not allow. An unexpected exception is logged and
answered with a JSON 500, never an HTML page.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation, ValidationError
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponseBase, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel

from api.auth import AuthError, authenticate
from api.contract import Error, Errors, Op
from api.inputs import InvalidInput, read_body, read_query
from api.shapes import LIST_LIMIT_MAX, Page
from experiments.refusals import Refused
from experiments.shown_paths import shown, shown_errors

log = logging.getLogger(__name__)


class ApiError(Exception):
    """Raised anywhere under an endpoint: answered as JSON with `status`."""

    def __init__(self, status: int, message: str = "", errors: dict[str, str] | None = None):
        super().__init__(message or str(errors))
        self.status = status
        self.message = message
        self.errors = errors

    def response(self) -> JsonResponse:
        if self.errors is None:
            return send(Error(error=shown(self.message or "error")), self.status)
        if self.message:
            return send(Errors(errors=shown_errors(self.errors), error=shown(self.message)), self.status)
        return send(Errors(errors=shown_errors(self.errors)), self.status)


def refused(exc: Refused, field_prefix: str = "") -> ApiError:
    """A refusal (experiments.refusals) as the API's answer: {"errors": {field: message}} when one
    field is at fault (`field_prefix` + "." + the field, for a nested object), else {"error": message}."""
    if not exc.field:
        return ApiError(exc.status, exc.message)
    return ApiError(exc.status, errors={f"{field_prefix}.{exc.field}" if field_prefix else exc.field: exc.message})


def error(status: int, message: str) -> JsonResponse:
    """The API's error answer; server paths in `message` shown relative to their root (shown_paths)."""
    return send(Error(error=shown(message)), status)


def send(answer: BaseModel, status: int = 200, location: str | None = None) -> JsonResponse:
    """`answer` (a shape, api.contract) as the JSON response: the fields the view set, so a field
    with a default that it left out stays out (`exclude_unset`: "warning" only when there is one).
    Dumped in Python mode and encoded by Django's JSON encoder, so dates read as they always did
    (milliseconds, "Z"). `location`: the Location header of a 201."""
    response = JsonResponse(answer.model_dump(exclude_unset=True), status=status)
    if location is not None:
        response["Location"] = location
    return response


def api_endpoint(*methods: str) -> Callable:
    """Decorate a view `f(request, **url_kwargs) -> Shape | HttpResponse` serving `methods`.

    Authentication comes first (401 before anything else, so an anonymous caller learns nothing
    about which ids exist), then the method (405 with an Allow header). A shape (a pydantic model,
    api.contract.Shape) is sent as JSON with status 200 (`send`; other statuses: return
    `send(shape, status)`); anything else but an HttpResponse is a TypeError, answered 500.
    """
    allowed = {m.upper() for m in methods}
    if "GET" in allowed:
        allowed.add("HEAD")

    def decorate(view: Callable) -> Callable:
        @csrf_exempt  # token requests need none; session requests are checked in authenticate()
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs):
            try:
                return _respond(view, allowed, getattr(wrapper, "api_ops", {}), request, *args, **kwargs)
            except Exception:  # noqa: BLE001 - an API answers JSON even for its own bugs
                log.exception("API error on %s %s", request.method, request.path)
                return error(500, "internal error (logged on the server)")

        wrapper.api_methods = sorted(allowed - {"HEAD"})
        return wrapper

    return decorate


def _respond(
    view: Callable, allowed: set[str], ops: dict[str, Op], request: HttpRequest, *args, **kwargs
) -> HttpResponseBase:
    """The view's answer, or the JSON answer to what it raised (a bug raises on, to `api_endpoint`)."""
    try:
        authenticate(request)
        if request.method not in allowed:
            response = error(405, f"method {request.method} not allowed here; use {', '.join(sorted(allowed))}")
            response["Allow"] = ", ".join(sorted(allowed))
            return response
        _read_inputs(ops.get("GET" if request.method == "HEAD" else request.method), request)
        return _answer(view, view(request, *args, **kwargs))
    except AuthError as exc:
        response = error(exc.status, exc.message)
        if exc.status == 401:
            response["WWW-Authenticate"] = 'Token realm="api"'
        return response
    except ApiError as exc:
        return exc.response()
    except InvalidInput as exc:
        return ApiError(400, errors=exc.errors).response()
    except Http404 as exc:
        return error(404, str(exc) or "not found")
    except PermissionDenied as exc:
        return error(403, str(exc) or "permission denied")
    except RequestDataTooBig:
        return error(413, "request body too large")
    except (SuspiciousOperation, MultiPartParserError) as exc:
        return error(400, f"bad request: {exc}")
    except ValidationError as exc:  # a model's own check (Experiment.clean) refused the input
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"(input)": exc.messages}
        return ApiError(400, errors={k: " ".join(v) for k, v in errors.items()}).response()
    except DataError as exc:  # a value the database cannot hold (e.g. an integer out of range)
        return error(400, f"a value is out of the database's range: {str(exc).splitlines()[0]}")


def _read_inputs(op: Op | None, request: HttpRequest) -> None:
    """The declared query parameters as `request.query` (api/inputs.py; None when the operation
    declares none), or ApiError 400 {"errors": {parameter: message}, "error": "parameter: message"}
    (a query's refusal was always an "error" line). The body waits for the view to ask (`payload`)."""
    request.api_op = op
    request.query = None
    if op is not None and op.query is not None:
        try:
            request.query = read_query(op.query, request.GET)
        except InvalidInput as exc:  # {"errors"}, and one line naming them for a caller that reads "error"
            summary = "; ".join(f"{name}: {message}" for name, message in exc.errors.items())
            raise ApiError(400, summary, exc.errors) from None


def payload(request: HttpRequest) -> BaseModel:
    """The JSON body as the shape the operation declares (api/inputs.py), read once; InvalidInput
    (a 400 naming each refused field) otherwise. A view asks after it has found its object, so
    someone else's object is a 404 whatever the body holds."""
    if not hasattr(request, "api_payload"):
        op = getattr(request, "api_op", None)
        if op is None or op.body is None:
            raise TypeError(f"{request.method} {request.path} declares no body (api.contract.Op.body)")
        request.api_body = json_body(request)
        request.api_payload = read_body(op.body, request.api_body)
    return request.api_payload


def checked_body(request: HttpRequest) -> dict[str, Any]:
    """The JSON body as sent, once its declared shape has accepted it (`payload`): for the services
    the web forms share, which read a plain object and check what only they can know."""
    payload(request)
    return request.api_body


def _answer(view: Callable, result: Any) -> HttpResponseBase:
    if isinstance(result, BaseModel):
        return send(result)
    if isinstance(result, HttpResponseBase):
        return result
    raise TypeError(f"{view.__name__} answered a {type(result).__name__}: answer its declared shape (api.contract)")


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request body as a JSON object (a form-encoded body as its flat string fields; no body
    as {}), or ApiError 400."""
    if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        return dict(request.POST.items())
    if not request.body.strip():
        return {}
    try:
        data = json.loads(request.body, parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # json's parser recurses once per level: thousands of [ or { exhaust it
        raise ApiError(400, "request body is nested too deeply (a config is a few levels deep)") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(data).__name__}")
    return data


def _no_constants(name: str):
    raise ValueError(f"{name} is not valid JSON (no NaN or Infinity)")


def page(query: Page, queryset) -> tuple[list, int]:
    """The page of `queryset` a query (api.shapes.Page: ?limit=&offset=, limit capped at
    LIST_LIMIT_MAX) asks for, and the whole count."""
    limit = min(query.limit, LIST_LIMIT_MAX)
    return list(queryset[query.offset : query.offset + limit]), queryset.count()


@csrf_exempt  # it changes nothing; without this a POST to a wrong path got CSRF's HTML 403
def not_found(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """Any /api/ path that names no endpoint (any method)."""
    return error(404, f"no API endpoint at {request.path}")

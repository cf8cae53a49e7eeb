"""The API's description: GET /api/schema (the OpenAPI 3.1 document api/openapi.py generates) and
/api/docs/ (Swagger UI from this site's static files, no CDN). Both are public: the schema holds
no data, and every operation it describes still needs a token."""

from __future__ import annotations

import functools

from django.http import HttpRequest, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from api import openapi


@functools.lru_cache(maxsize=1)
def _document() -> dict:
    return openapi.build()  # the routes and declarations are fixed once the code is loaded


@require_safe
def schema(request: HttpRequest) -> JsonResponse:
    """The OpenAPI document as JSON."""
    return JsonResponse(_document(), json_dumps_params={"indent": 1})


@require_safe
def docs(request: HttpRequest):
    """Swagger UI reading /api/schema; "Authorize" takes `Token <key>`."""
    return render(request, "api/docs.html")

"""Pieces several resources' shapes share. Each resource's shapes are in api/<resource>_shapes.py,
next to its api/<resource>_views.py; the answers' base `Shape` and the errors are api/contract.py's.

Answers (what a view sends) are `Shape`s: a key they do not declare is an error. Inputs (query
parameters and bodies) are plain pydantic models: the schema documents them."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, TypeAdapter, WithJsonSchema

from api.inputs import Query, WholeNumber
from experiments import metric_series


def whole(regex: re.Pattern) -> str:
    """A Python `fullmatch` regex as a JSON-schema pattern (which matches anywhere unless anchored)."""
    return f"^(?:{regex.pattern})$"


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: those become null."""
    return value if value is None or math.isfinite(value) else None


LIST_LIMIT, LIST_LIMIT_MAX = 100, 1000  # rows per page of a list: by default, at most


class Page(Query):
    limit: WholeNumber = Field(LIST_LIMIT, ge=1, description=f"page size (at most {LIST_LIMIT_MAX})")
    offset: WholeNumber = Field(0, ge=0)


MetricValue = float | Literal[metric_series.NONFINITE_JSON]
"""A metric value in the metrics, chart and compare answers: a number, or "NaN", "Infinity",
"-Infinity" for a non-finite one (a diverged step; JSON has no NaN)."""

MetricPoint = Annotated[
    tuple[int, MetricValue],
    WithJsonSchema({"type": "array", "items": TypeAdapter(MetricValue).json_schema(), "minItems": 2, "maxItems": 2}),
]
"""[step, value]: a tuple keeps the step an int (in a list of MetricValue it would turn 3 into 3.0); the
schema is an array of two numbers (prefixItems, the tuple's own schema, is beyond the fuzzer's validator)."""


def _iso_datetime(text: str) -> str:
    datetime.fromisoformat(text)  # a ValueError names what is wrong
    return text


IsoDateTime = Annotated[str, AfterValidator(_iso_datetime), WithJsonSchema({"type": "string", "format": "date-time"})]
"""A date-time its module already wrote as ISO text (sweeps.summary, experiments.run_compare): checked,
and sent as written (a `datetime` field is sent as Django's encoder writes it: milliseconds, "Z")."""

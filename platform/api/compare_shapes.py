"""The compare endpoint's shapes (api/compare_views.py). See api/contract.py for how endpoints
declare them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from api.contract import Shape
from api.inputs import Query, WholeNumber
from api.shapes import IsoDateTime, MetricValue
from experiments import metric_series, run_compare

RUN_IDS_PATTERN = rf"^ *[0-9]{{1,18}} *(, *[0-9]{{1,18}} *){{0,{run_compare.MAX_RUNS - 1}}}$"


def _run_ids(text: str | list[str]) -> list[int]:
    """The runs parameter, "1,2,3" (given once, or repeated), as ids: run_compare's reading and messages."""
    return run_compare.parse_run_ids(",".join(text) if isinstance(text, list) else text)


RunIds = Annotated[list[int], BeforeValidator(_run_ids), WithJsonSchema({"type": "string", "pattern": RUN_IDS_PATTERN})]


class CompareQuery(Query):
    runs: RunIds = Field(description=f"1 to {run_compare.MAX_RUNS} run ids, comma-separated, each once")
    max_points: WholeNumber = Field(
        run_compare.DEFAULT_MAX_POINTS, ge=1, description=f"at most {metric_series.DEFAULT_MAX_POINTS}"
    )


class CompareSeries(Shape):
    steps: list[int]
    values: list[MetricValue]
    elapsed_s: list[float | None]


class CompareRun(Shape):
    id: int
    experiment_id: int
    experiment: str
    status: str
    step: int
    max_steps: int | None
    created_at: IsoDateTime
    config: dict[str, Any]
    last_step: int
    series: dict[str, CompareSeries]


class Compare(Shape):
    max_points: int
    metrics: list[str]
    runs: list[CompareRun]

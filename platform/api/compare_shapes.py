"""The compare endpoint's shapes (api/compare_views.py). See api/contract.py for how endpoints
declare them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from api.contract import Shape
from api.shapes import IsoDateTime, MetricValue


class CompareQuery(BaseModel):
    runs: str = Field(pattern=r"^[0-9]{1,18}(,[0-9]{1,18}){0,19}$", description="1 to 20 run ids, comma-separated")
    max_points: int | None = Field(None, ge=1)


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

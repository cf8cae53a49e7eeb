"""The run endpoints' shapes (api/run_views.py): a run, the runs table, a run's metrics, chart and
events, and the answer to a control action. See api/contract.py for how endpoints declare them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field

from api.contract import Shape
from api.inputs import Query, WholeNumber
from api.shapes import MetricPoint, MetricValue, Page, whole
from experiments import metric_series, run_filters, run_labels
from experiments.models import RunStatus

RunStatusName = Literal[tuple(RunStatus.values)]
TagName = Annotated[str, Field(pattern=whole(run_labels.TAG_NAME))]
MetricName = Annotated[str, Field(pattern=whole(run_filters.METRIC_NAME))]


class ExperimentRef(Shape):
    id: int
    name: str


class RunDetail(Shape):
    id: int
    name: str = Field(description="the run's name; \"\" = none (pages show #id)")
    status: str
    step: int
    max_steps: int | None
    progress: float | None
    restarts: int
    attempt: int
    max_restarts: int | None
    worker: str
    worker_pid: int | None
    heartbeat_at: datetime | None
    created_at: datetime
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    running_s: float | None
    latest_reward: float | None
    error: str
    params_digest: str
    config_version: int | None
    experiment: ExperimentRef
    tags: list[str]
    notes: str
    forked_from: int | None
    forked_from_step: int | None
    fork_optimizer: Literal["fresh", "continued"] | None


class RunList(Shape):
    runs: list[RunDetail]
    count: int


class RunTableQuery(Page):
    """As experiments.run_filters reads them (the runs page's address too); its checks come after these."""

    comma_separated: ClassVar[tuple[str, ...]] = ("status", "tag", "metrics")
    status: list[RunStatusName] | None = Field(None, description="run statuses (repeated, or comma-separated)")
    experiment: str | None = Field(None, pattern=whole(run_filters.ID), description="an experiment's id")
    owner: str | None = Field(None, pattern=whole(run_filters.USERNAME), description="a username")
    tag: list[TagName] | None = Field(
        None, max_length=run_filters.MAX_TAGS, description="tag names: runs with all of them (repeated, or a,b)"
    )
    config: list[str] | None = Field(None, description="PATH:VALUE, e.g. optimizer.learning_rate:1e-5")
    metrics: list[MetricName] | None = Field(
        None, max_length=run_filters.MAX_METRIC_COLUMNS, description="metric columns (repeated, or a,b)"
    )
    sort: str | None = Field(None, description="a field or metric:NAME, '-' first for descending")


class RunTableEntry(RunDetail):
    owner: str
    metrics: dict[str, float | None]


class RunTable(Shape):
    runs: list[RunTableEntry]
    count: int
    metrics: list[str]
    sort: str


class LabelsInput(BaseModel):
    name: str | None = Field(
        None, max_length=run_labels.MAX_NAME_CHARS, description="the run's name, one line (\"\" or null: none)"
    )
    tags: list[TagName] | None = Field(
        None, max_length=run_labels.MAX_TAGS_PER_RUN, description="the run's tags (replaces them)"
    )
    notes: str | None = Field(None, max_length=run_labels.MAX_NOTES_CHARS)


EVENTS_LIMIT, EVENTS_LIMIT_MAX = 200, 1000  # events per answer: by default, at most


class MetricsQuery(Query):
    name: str | None = Field(None, description="one metric (else every metric)")
    after_step: WholeNumber = Field(-1, description="only points after this step")


class Metrics(Shape):
    """With `name`: {"name", "points", "last_step"}; without: {"series", "last_step"}."""

    name: str | None = None
    points: list[MetricPoint] | None = None
    series: dict[str, list[MetricPoint]] | None = None
    last_step: int


class ChartQuery(Query):
    max_points: WholeNumber = Field(metric_series.DEFAULT_MAX_POINTS, ge=1, description="at most the default")


class ChartSeries(Shape):
    steps: list[int]
    values: list[MetricValue]


class Chart(Shape):
    series: dict[str, ChartSeries]
    last_step: int


class EventsQuery(Query):
    after_id: WholeNumber = Field(0, description="only events after this id")
    limit: WholeNumber = Field(EVENTS_LIMIT, ge=1, description=f"at most {EVENTS_LIMIT_MAX}")


class Event(Shape):
    id: int
    created_at: datetime
    attempt: int
    level: str
    kind: str
    message: str


class Events(Shape):
    events: list[Event]
    last_id: int


class ActionDone(Shape):
    id: int
    status: str

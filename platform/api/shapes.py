"""The API's shapes as pydantic models, for the generated OpenAPI schema (api/contract.py says how
endpoints use them). They describe what api/payloads.py builds and what the views read; they are
not used to parse requests at run time (the views' own checks answer 400 with the field's name).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from api.evaluation_shapes import OnEndInput
from experiments import metric_series, run_filters, run_labels
from experiments.models import RunStatus
from pydantic import BaseModel, Field, RootModel
from runner import forks
from trainers.config import ExperimentConfig


def _whole(regex) -> str:
    """A Python `fullmatch` regex as a JSON-schema pattern (which matches anywhere unless anchored)."""
    return f"^(?:{regex.pattern})$"


RunStatusName = Literal[tuple(RunStatus.values)]
TagName = Annotated[str, Field(pattern=_whole(run_labels.TAG_NAME))]
MetricName = Annotated[str, Field(pattern=_whole(run_filters.METRIC_NAME))]
MetricValue = float | Literal[metric_series.NONFINITE_JSON]
"""A metric value in the metrics, chart and compare answers: a number, or "NaN", "Infinity",
"-Infinity" for a non-finite one (a diverged step; JSON has no NaN)."""

class Page(BaseModel):
    limit: int | None = Field(None, ge=1, description="page size (default 100, at most 1000)")
    offset: int | None = Field(None, ge=0)


class ExperimentPage(Page):
    name: str | None = Field(None, max_length=200, description="only the experiments of exactly this name")


# --- experiments ------------------------------------------------------------------------------


class ExperimentSummary(BaseModel):
    id: int
    name: str
    description: str
    owner: str
    version: int | None
    run_count: int
    created_at: datetime
    updated_at: datetime


class ExperimentList(BaseModel):
    experiments: list[ExperimentSummary]
    count: int


class ExperimentInput(BaseModel):
    """`config` (an object, trainers.config.ExperimentConfig) or `config_yaml` (its YAML text), not both."""

    name: str = Field(description="required on POST and PUT")
    description: str | None = None
    config: ExperimentConfig | None = Field(None, description="the experiment config (trainers.config)")
    config_yaml: str | None = Field(None, description="the experiment config as YAML text")
    overrides: list[str] | None = Field(None, description='"dotted.path=value" strings (like the CLI\'s --set; '
                                        "values read as YAML) applied to config / config_yaml before it is validated")


class ExperimentPatch(BaseModel):
    name: str | None = None
    description: str | None = None
    config: ExperimentConfig | None = None
    config_yaml: str | None = None
    overrides: list[str] | None = None


class ExperimentCreated(BaseModel):
    id: int
    version: int


class ExperimentRef(BaseModel):
    id: int
    name: str


class RunDetail(BaseModel):
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


class VersionEntry(BaseModel):
    number: int
    created_at: datetime
    note: str


class ExperimentDetail(ExperimentSummary):
    config: dict[str, Any]
    versions: list[VersionEntry]
    runs: list[RunDetail]


class RunList(BaseModel):
    runs: list[RunDetail]
    count: int


class LaunchInput(BaseModel):
    max_restarts: int | None = Field(None, ge=0, le=100)
    queue: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    evaluate_on_end: OnEndInput | None = Field(None, description="evaluate the run's best checkpoint on this "
                                                                 "dataset when it succeeds (api/evaluation_views.py)")


class Launched(BaseModel):
    id: int
    status: str
    queue: str
    warning: str | None = None


# --- runs -------------------------------------------------------------------------------------


class RunTableQuery(Page):
    status: list[RunStatusName] | None = Field(None, description="run statuses (repeat the parameter)")
    experiment: str | None = Field(None, pattern=_whole(run_filters.ID), description="an experiment's id")
    owner: str | None = Field(None, pattern=_whole(run_filters.USERNAME), description="a username")
    tag: list[TagName] | None = Field(None, max_length=run_filters.MAX_TAGS,
                                      description="tag names: runs with all of them")
    config: list[str] | None = Field(None, description="PATH:VALUE, e.g. optimizer.learning_rate:1e-5")
    metrics: list[MetricName] | None = Field(None, max_length=run_filters.MAX_METRIC_COLUMNS,
                                             description="metric columns")
    sort: str | None = Field(None, description="a field or metric:NAME, '-' first for descending")


class RunTableEntry(RunDetail):
    owner: str
    metrics: dict[str, float | None]


class RunTable(BaseModel):
    runs: list[RunTableEntry]
    count: int
    metrics: list[str]
    sort: str


class CompareQuery(BaseModel):
    runs: str = Field(pattern=r"^[0-9]{1,18}(,[0-9]{1,18}){0,19}$", description="1 to 20 run ids, comma-separated")
    max_points: int | None = Field(None, ge=1)


class CompareSeries(BaseModel):
    steps: list[int]
    values: list[MetricValue]
    elapsed_s: list[float | None]


class CompareRun(BaseModel):
    id: int
    experiment_id: int
    experiment: str
    status: str
    step: int
    max_steps: int | None
    created_at: datetime
    config: dict[str, Any]
    last_step: int
    series: dict[str, CompareSeries]


class Compare(BaseModel):
    max_points: int
    metrics: list[str]
    runs: list[CompareRun]


class LabelsInput(BaseModel):
    name: str | None = Field(None, max_length=run_labels.MAX_NAME_CHARS,
                             description="the run's name, one line (\"\" or null: none)")
    tags: list[TagName] | None = Field(None, max_length=run_labels.MAX_TAGS_PER_RUN,
                                       description="the run's tags (replaces them)")
    notes: str | None = Field(None, max_length=run_labels.MAX_NOTES_CHARS)


class MetricsQuery(BaseModel):
    name: str | None = Field(None, description="one metric (else every metric)")
    after_step: int | None = Field(None, description="only points after this step (default -1)")


class Metrics(BaseModel):
    """With `name`: {"name", "points", "last_step"}; without: {"series", "last_step"}."""

    name: str | None = None
    points: list[list[MetricValue]] | None = None
    series: dict[str, list[list[MetricValue]]] | None = None
    last_step: int


class ChartQuery(BaseModel):
    max_points: int | None = Field(None, ge=1, description="at most 2000 (the default)")


class ChartSeries(BaseModel):
    steps: list[int]
    values: list[MetricValue]


class Chart(BaseModel):
    series: dict[str, ChartSeries]
    last_step: int


class Segment(BaseModel):
    model_config = {"extra": "allow"}
    text: str


class EpisodeTurn(BaseModel):
    role: str = Field(description='"assistant" for a turn the model wrote, else the environment\'s reply role '
                      '("tool", "user")')
    label: str = Field(description='how the browser names the turn: "tool call" (an assistant turn holding '
                       '<tool_call>), "tool response" (role tool), else its role')
    text: str
    tokens: int | None = Field(description="the turn's tokens in the sequence")


class Episode(BaseModel):
    """A multi-turn sample's episode (experiments.sample_episodes)."""

    env: str | None
    turns: list[EpisodeTurn]
    reward_parts: dict[str, float | str | None] = Field(
        description='raw reward-function scores and the environment\'s parts; a non-finite one as "NaN", '
        '"Infinity" or "-Infinity"')
    end_reason: str | None = Field(description="done, max_turns, max_total_tokens or env_error")
    error: str | None = Field(description="the environment's error (end_reason env_error)")
    tool_calls: int | None
    tool_errors: int | None


class Sample(BaseModel):
    index: int
    prompt: str
    prompt_messages: list[Any] | None
    prompt_segments: list[Segment]
    completion: str
    completion_segments: list[Segment]
    answer: str
    reward: float | None
    advantage: float | None
    truncated: bool | None = Field(None, description="the completion ran into rollout.max_new_tokens")
    in_loss: bool | None = Field(None, description="false: kept out of the loss (overlong filter, or a "
                                 "dynamic-sampling step that consumed its most prompts)")
    overlong_penalty: float | None = Field(None, description="the soft overlong reward added (0 to -penalty)")
    episode: Episode | None = Field(None, description="a multi-turn sample's turns, reward parts and end reason; "
                                    "absent for a single-turn sample")


class Samples(BaseModel):
    steps: list[int]
    step: int | None
    samples: list[Sample]


class SampleFiltersQuery(BaseModel):
    kind: Literal["train", "eval"] | None = Field(None, description="default train")
    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    group: int | None = Field(None, description="one prompt's completions within `step` (needs step)")
    reward_min: float | None = None
    reward_max: float | None = None
    advantage_min: float | None = None
    advantage_max: float | None = None
    q: str | None = Field(None, description="text in the prompt or completion (case-insensitive)")
    prompt_hash: str | None = Field(None, description="32 hex digits: one prompt across steps")
    end_reason: Literal["done", "max_turns", "max_total_tokens", "env_error"] | None = Field(
        None, description="multi-turn episodes that ended so")
    tool: Literal["yes", "no"] | None = Field(None, description="multi-turn episodes with (yes) or without (no) a "
                                             "tool call")


class SamplesQuery(SampleFiltersQuery):
    """`step` alone (or nothing): one step's samples (Samples); any other parameter: a page (SamplePage)."""

    limit: int | None = Field(None, ge=1, description="page size")
    after: int | None = Field(None, ge=1, description="the page starts after this sample id")
    before: int | None = Field(None, ge=1, description="the page ends before this sample id")


class BrowsedSample(Sample):
    id: int
    kind: Literal["train", "eval"]
    step: int
    group: int
    generation: int | None
    prompt_hash: str


class SamplePage(BaseModel):
    samples: list[BrowsedSample]
    next_after: int | None
    prev_before: int | None
    scanned_to_step: int | None = Field(None, description="where a text, reward or advantage search stopped reading "
                                   "(api/sample_views.py)")
    limit: int


class SamplesAnswer(RootModel[Samples | SamplePage]):
    """One step's samples, or a browsed page (see SamplesQuery)."""


class CheckpointEntry(BaseModel):
    step: int
    path: str
    size_bytes: int | None
    metrics: Any
    created_at: datetime


class Checkpoints(BaseModel):
    checkpoints: list[CheckpointEntry]


class EventsQuery(BaseModel):
    after_id: int | None = Field(None, description="only events after this id (default 0)")
    limit: int | None = Field(None, ge=1, description="default 200, at most 1000")


class Event(BaseModel):
    id: int
    created_at: datetime
    attempt: int
    level: str
    kind: str
    message: str


class Events(BaseModel):
    events: list[Event]
    last_id: int


class ActionDone(BaseModel):
    id: int
    status: str


class ExportInput(BaseModel):
    step: int | None = Field(None, ge=0, description="default: the newest checkpoint")
    dtype: Literal["float32", "bfloat16"] | None = None


class Exported(BaseModel):
    path: str
    step: int
    dtype: str


class ForkInput(BaseModel):
    step: int = Field(ge=0, lt=forks.STEP_LIMIT, description="the parent's checkpoint to start from")
    optimizer: Literal["fresh", "continued"] | None = None
    max_steps: int | None = Field(None, ge=1, lt=forks.STEP_LIMIT)
    queue: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")


class Forked(BaseModel):
    id: int
    status: str
    queue: str
    forked_from: int
    forked_from_step: int
    fork_optimizer: Literal["fresh", "continued"]


class ModelEntry(BaseModel):
    name: str
    path: str
    architecture: str
    size: str
    parameters: int
    has_chat_template: bool


class Models(BaseModel):
    models: list[ModelEntry]

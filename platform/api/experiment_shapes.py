"""The experiment endpoints' shapes (api/experiment_views.py): experiments, their versions, and
launching a run of one. See api/contract.py for how endpoints declare them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from api.contract import Shape
from api.evaluation_shapes import OnEndInput
from api.run_shapes import RunDetail
from api.shapes import Page
from trainers.config import ExperimentConfig


class ExperimentPage(Page):
    name: str | None = Field(None, max_length=200, description="only the experiments of exactly this name")


class ExperimentSummary(Shape):
    id: int
    name: str
    description: str
    owner: str
    version: int | None
    run_count: int
    created_at: datetime
    updated_at: datetime


class ExperimentList(Shape):
    experiments: list[ExperimentSummary]
    count: int


class ExperimentInput(BaseModel):
    """`config` (an object, trainers.config.ExperimentConfig) or `config_yaml` (its YAML text), not both."""

    name: str = Field(description="required on POST and PUT")
    description: str | None = None
    config: ExperimentConfig | None = Field(None, description="the experiment config (trainers.config)")
    config_yaml: str | None = Field(None, description="the experiment config as YAML text")
    overrides: list[str] | None = Field(
        None,
        description='"dotted.path=value" strings (like the CLI\'s --set; '
        "values read as YAML) applied to config / config_yaml before it is validated",
    )


class ExperimentPatch(BaseModel):
    name: str | None = None
    description: str | None = None
    config: ExperimentConfig | None = None
    config_yaml: str | None = None
    overrides: list[str] | None = None


class ExperimentCreated(Shape):
    id: int
    version: int


class VersionEntry(Shape):
    number: int
    created_at: datetime
    note: str


class ExperimentDetail(ExperimentSummary):
    config: dict[str, Any]
    versions: list[VersionEntry]
    runs: list[RunDetail]


class LaunchInput(BaseModel):
    max_restarts: int | None = Field(None, ge=0, le=100)
    queue: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    evaluate_on_end: OnEndInput | None = Field(
        None,
        description="evaluate the run's best checkpoint on this dataset when it succeeds (api/evaluation_views.py)",
    )


class Launched(Shape):
    id: int
    status: str
    queue: str
    warning: str | None = Field(None, description="no live worker reads the queue (absent when one does)")

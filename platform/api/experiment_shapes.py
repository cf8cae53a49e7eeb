"""The experiment endpoints' shapes (api/experiment_views.py): experiments, their versions, and
launching a run of one. See api/contract.py for how endpoints declare them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, SkipValidation, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from api.contract import Shape
from api.evaluation_shapes import OnEndInput
from api.inputs import WholeNumber
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


CONFIG_REQUIRED = "required: the experiment config as an object (config) or YAML text (config_yaml)"
OVERRIDES_NEED_A_CONFIG = "apply to a config: give config or config_yaml with them"

# The config as the document names it, checked by the view once `overrides` apply (they may repair it).
ConfigInput = SkipValidation[ExperimentConfig]


class ExperimentInput(BaseModel):
    """`config` (an object, trainers.config.ExperimentConfig) or `config_yaml` (its YAML text), not both."""

    name: str = Field(description="required on POST and PUT")
    description: str | None = None
    config: ConfigInput | None = Field(None, description="the experiment config (trainers.config)")
    config_yaml: str | None = Field(None, description="the experiment config as YAML text")
    overrides: list[str] | None = Field(
        None,
        description='"dotted.path=value" strings (like the CLI\'s --set; '
        "values read as YAML) applied to config / config_yaml before it is validated",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _config_or_yaml(cls, data: Any, handler):
        """A config is required too: named with the fields' own problems, so one answer lists them all
        (under `overrides` when those came without a config to apply to)."""
        if not isinstance(data, dict) or "config" in data or "config_yaml" in data:
            return handler(data)
        if data.get("overrides"):
            missing = {"type": PydanticCustomError("config_required", OVERRIDES_NEED_A_CONFIG), "loc": ("overrides",)}
        else:
            missing = {"type": PydanticCustomError("config_required", CONFIG_REQUIRED), "loc": ("config",)}
        errors = []
        try:
            handler(data)
        except ValidationError as exc:
            errors = [{key: e[key] for key in ("type", "loc", "input", "ctx") if key in e} for e in exc.errors()]
        raise ValidationError.from_exception_data(cls.__name__, [*errors, {**missing, "input": data}]) from None


class ExperimentPatch(BaseModel):
    name: str | None = None
    description: str | None = None
    config: ConfigInput | None = None
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
    max_restarts: WholeNumber | None = Field(None, ge=0, le=100)
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

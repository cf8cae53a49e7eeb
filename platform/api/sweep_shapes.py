"""The sweep endpoints' shapes (api/sweep_views.py): what they take (sweeps.services checks it) and
answer (sweeps.summary builds it; see api/contract.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, StrictBool

from api.contract import Shape
from api.inputs import WholeNumber
from api.shapes import IsoDateTime, Page
from sweeps.models import Direction, Pruner, Sampler, SweepStatus

SamplerName = Literal[tuple(Sampler.values)]
PrunerName = Literal[tuple(Pruner.values)]
DirectionName = Literal[tuple(Direction.values)]
SweepStatusName = Literal[tuple(SweepStatus.values)]


class SpaceField(BaseModel):
    """One searched config field: float / int ranges (`low`, `high`, `log`?, `step`?) or
    `categorical` `choices`. A grid needs choices or an int range."""

    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: StrictBool | None = None
    step: float | None = None
    choices: list[str | float | bool | None] | None = None


class SweepInput(BaseModel):
    name: str = Field(description="1-64 letters, digits or . _ : / - ; also the tag of the trial runs")
    space: dict[str, SpaceField] = Field(
        description='{"dotted.config.field": {...}}, e.g. {"optimizer.learning_rate": '
        '{"type": "float", "low": 1e-5, "high": 1e-3, "log": true}}'
    )
    metric: str = Field(description="a metric the trainer reports, e.g. reward/mean")
    max_trials: WholeNumber = Field(ge=1, le=1000)
    sampler: SamplerName | None = Field(None, description="default tpe")
    pruner: PrunerName | None = Field(None, description="default none")
    direction: DirectionName | None = Field(None, description="default maximize")
    max_concurrent_trials: WholeNumber | None = Field(None, ge=1, le=50, description="default 2")
    seed: WholeNumber | None = Field(None, ge=0, le=2**31 - 1, description="default 0")
    pruner_startup_trials: WholeNumber | None = Field(
        None, ge=0, le=1000, description="median: trials that must complete before any is pruned (2)"
    )
    pruner_warmup_steps: WholeNumber | None = Field(
        None, ge=0, le=1_000_000, description="median: steps before pruning; halving/hyperband: the first rung (1)"
    )
    max_steps: WholeNumber | None = Field(
        None, ge=1, le=10_000_000, description="train.max_steps of every trial (default: the experiment's config's)"
    )


class TrialEntry(Shape):
    number: int
    params: dict[str, Any]
    status: str = Field(
        description="waiting (no run yet), or its run's status; failed without a run: an invalid config"
    )
    value: float | None = Field(description="the best value of the sweep's metric so far")
    value_step: int | None
    run_id: int | None
    run_label: str | None
    error: str


class SweepSummary(Shape):
    id: int
    name: str
    experiment_id: int
    experiment: str
    owner: str
    sampler: SamplerName
    pruner: PrunerName
    metric: str
    direction: DirectionName
    max_trials: int
    max_concurrent_trials: int
    seed: int
    status: SweepStatusName
    note: str
    created_at: IsoDateTime
    finished_at: IsoDateTime | None
    trial_count: int
    best: TrialEntry | None


class SweepDetail(SweepSummary):
    space: dict[str, Any]
    pruner_startup_trials: int
    pruner_warmup_steps: int
    trials: list[TrialEntry]


class SweepList(Shape):
    sweeps: list[SweepSummary]
    count: int


class SweepListQuery(Page):
    status: SweepStatusName | None = None


class SweepCancelled(Shape):
    id: int
    status: SweepStatusName

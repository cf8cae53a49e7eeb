"""The checkpoint endpoints' shapes (api/checkpoint_views.py): a run's checkpoints, exporting one
and forking a run from one. See api/contract.py for how endpoints declare them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from api.contract import Shape
from api.inputs import WholeNumber
from runner import exports, forks


class CheckpointEntry(Shape):
    step: int
    path: str
    size_bytes: int | None
    metrics: Any
    created_at: datetime


class Checkpoints(Shape):
    checkpoints: list[CheckpointEntry]


class ExportInput(BaseModel):
    step: WholeNumber | None = Field(None, ge=0, lt=2**31, description="default: the newest checkpoint")
    dtype: Literal[exports.DTYPES] | None = Field(None, description="default float32")


class Exported(Shape):
    path: str
    step: int
    dtype: str


class ForkInput(BaseModel):
    step: WholeNumber = Field(ge=0, lt=forks.STEP_LIMIT, description="the parent's checkpoint to start from")
    optimizer: Literal["fresh", "continued"] | None = None
    max_steps: WholeNumber | None = Field(None, ge=1, lt=forks.STEP_LIMIT)
    queue: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,64}$")


class Forked(Shape):
    id: int
    status: str
    queue: str
    forked_from: int
    forked_from_step: int
    fork_optimizer: Literal["fresh", "continued"]

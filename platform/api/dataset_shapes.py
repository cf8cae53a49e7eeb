"""The dataset endpoints' shapes (api/dataset_views.py): what they take and answer (see
api/contract.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from api.contract import Shape
from experiments import dataset_files

DatasetName = Field(pattern=f"^(?:{dataset_files.NAME_PATTERN.pattern})$", description=dataset_files.NAME_RULE)


class DatasetUpload(BaseModel):
    """multipart/form-data: the dataset's name, its JSONL file and an optional description."""

    name: str = DatasetName
    file: bytes = Field(description="JSONL: one {\"prompt\", \"answer\"} object per line")
    description: str | None = None


class DatasetSummary(Shape):
    id: int
    name: str
    owner: str
    reference: str = Field(description="how your configs name it: 'name' (yours) or 'owner/name'")
    rows: int
    size_bytes: int
    sha256: str
    description: str
    created_at: datetime
    shared_with: list[str] | None = Field(description="usernames it is shared with (null unless it is yours)")


class DatasetList(Shape):
    datasets: list[DatasetSummary]
    count: int


class DatasetDetail(DatasetSummary):
    preview: list[dict[str, Any]] = Field(description="the first rows (strings cut at 2,000 characters)")


class DatasetCreated(Shape):
    id: int
    name: str
    reference: str
    rows: int
    size_bytes: int
    sha256: str
    preview: list[dict[str, Any]]


class ShareInput(BaseModel):
    users: list[str] = Field(min_length=1, description="usernames")


class Shared(Shape):
    shared_with: list[str]

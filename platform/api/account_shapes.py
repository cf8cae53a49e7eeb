"""The account endpoint's shape (api/account_views.py), for the generated OpenAPI schema (see
api/contract.py). What the view answers is runner.account.account_summary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class StorageUse(BaseModel):
    datasets_bytes: int = Field(description="your uploaded datasets")
    checkpoints_bytes: int = Field(description="your runs' directories: checkpoints, logs, run files")
    exports_bytes: int = Field(description="your runs' Hugging Face exports")
    used_bytes: int = Field(description="the three together")
    quota_bytes: int
    over_quota: bool = Field(description="at or over the quota: uploads, exports and launches are refused")


class Limit(BaseModel):
    value: int
    source: Literal["yours", "default"] = Field(description="set for you by an admin, or the server's default")


class Limits(BaseModel):
    max_active_runs: Limit
    max_queued_runs: Limit
    max_sequences_per_step: Limit
    max_tokens_per_step: Limit
    storage_quota_bytes: Limit


class RunCounts(BaseModel):
    active: int = Field(description="runs a worker holds now (running, pausing, cancelling)")
    queued: int


class Account(BaseModel):
    username: str
    storage: StorageUse
    limits: Limits
    runs: RunCounts

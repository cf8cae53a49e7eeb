"""The account endpoint's shape (api/account_views.py), for the generated OpenAPI schema (see
api/contract.py). What the view answers is runner.account.account_summary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class AccountStorage(BaseModel):
    datasets_bytes: int = Field(description="your uploaded datasets")
    checkpoints_bytes: int = Field(description="your runs' directories: checkpoints, logs, run files")
    exports_bytes: int = Field(description="your runs' Hugging Face exports")
    used_bytes: int = Field(description="the three together")
    quota_bytes: int
    over_quota: bool = Field(description="at or over the quota: uploads, exports and launches are refused")


class AccountLimit(BaseModel):
    value: int
    source: Literal["yours", "default"] = Field(description="set for you by an admin, or the server's default")


class AccountLimits(BaseModel):
    max_active_runs: AccountLimit
    max_queued_runs: AccountLimit
    max_sequences_per_step: AccountLimit
    max_tokens_per_step: AccountLimit
    storage_quota_bytes: AccountLimit
    max_active_sweeps: AccountLimit
    max_hosts_per_run: AccountLimit
    max_devices_per_run: AccountLimit
    max_evaluation_jobs: AccountLimit
    max_evaluation_tokens: AccountLimit


class AccountRuns(BaseModel):
    active: int = Field(description="runs a worker holds now (running, pausing, cancelling)")
    queued: int


class AccountEvaluations(BaseModel):
    jobs: int = Field(description="your evaluation jobs queued or running now")
    tokens: int = Field(description="their completion tokens together (prompts x k x max_new_tokens each)")


class Account(BaseModel):
    username: str
    storage: AccountStorage
    limits: AccountLimits
    runs: AccountRuns
    evaluations: AccountEvaluations

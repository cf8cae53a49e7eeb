"""The account endpoint's shapes (api/account_views.py; see api/contract.py). What the view answers is
runner.account.account_summary and evaluations.services.usage_for, checked against these."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.contract import Shape


class AccountStorage(Shape):
    datasets_bytes: int = Field(description="your uploaded datasets")
    checkpoints_bytes: int = Field(description="your runs' directories: checkpoints, logs, run files")
    exports_bytes: int = Field(description="your runs' Hugging Face exports")
    used_bytes: int = Field(description="the three together")
    quota_bytes: int
    over_quota: bool = Field(description="at or over the quota: uploads, exports and launches are refused")


class AccountLimit(Shape):
    value: int
    source: Literal["yours", "default"] = Field(description="set for you by an admin, or the server's default")


class AccountLimits(Shape):
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


class AccountRuns(Shape):
    active: int = Field(description="runs a worker holds now (running, pausing, cancelling)")
    queued: int


class AccountEvaluations(Shape):
    jobs: int = Field(description="your evaluation jobs queued or running now")
    tokens: int = Field(description="their completion tokens together (prompts x k x max_new_tokens each)")


class Account(Shape):
    username: str
    storage: AccountStorage
    limits: AccountLimits
    runs: AccountRuns
    evaluations: AccountEvaluations

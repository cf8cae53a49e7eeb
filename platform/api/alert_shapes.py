"""The alert endpoints' shapes (api/alert_views.py): what they take and answer (see api/contract.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from api.contract import Shape

Event = Literal["failed", "succeeded", "pruned", "stalled", "metric"]


class AlertRuleInput(BaseModel):
    events: list[Event] = Field(min_length=1, description="what to notify about")
    channel: Literal["email", "webhook"]
    target: str = Field(
        description="an e-mail address, or a webhook URL (http/https; no local or private "
        "addresses unless the admin allows them); shown masked afterwards"
    )
    name: str | None = None
    experiment: int | None = Field(None, description="one of your experiments; null = all of them")
    metric_name: str | None = Field(None, description="with the metric event, e.g. reward/mean")
    comparison: Literal[">", ">=", "<", "<="] | None = None
    threshold: float | None = None
    min_interval_s: float | None = Field(
        None, description="rate limit: at most one notification per this many seconds (default 60)"
    )
    enabled: bool | None = None


class AlertRulePatch(BaseModel):
    enabled: bool


class AlertRuleOut(Shape):
    id: int
    name: str
    experiment: int | None
    events: list[str]
    metric_name: str
    comparison: str
    threshold: float | None
    channel: str
    target: str = Field(description="masked for a webhook: scheme://host/… and its last characters")
    enabled: bool
    min_interval_s: float
    created_at: datetime


class AlertRuleList(Shape):
    rules: list[AlertRuleOut]
    count: int


class DeliveryQuery(BaseModel):
    rule: int | None = Field(None, description="only this rule's deliveries")
    status: Literal["pending", "sent", "failed", "rate_limited"] | None = None
    limit: int | None = Field(None, description="default 50, at most 500")


class DeliveryOut(Shape):
    id: int
    rule: int
    rule_name: str
    run: int | None
    event: str
    status: str
    message: str
    error: str
    attempts: int
    created_at: datetime
    sent_at: datetime | None


class DeliveryList(Shape):
    deliveries: list[DeliveryOut]
    count: int

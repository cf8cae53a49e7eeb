"""The alert endpoints' shapes (api/alert_views.py): what they take and answer (see api/contract.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, StrictBool

from alerts.models import DeliveryStatus
from alerts.rules import MAX_FOR_STEPS
from api.contract import Shape
from api.inputs import Query, WholeNumber

Event = Literal["failed", "succeeded", "pruned", "stalled", "metric"]


class AlertRuleInput(BaseModel):
    events: list[Event] = Field(min_length=1, description="what to notify about")
    channel: Literal["email", "webhook"]
    target: str = Field(
        description="an e-mail address, or a webhook URL (http/https; no local or private "
        "addresses unless the admin allows them); shown masked afterwards"
    )
    name: str | None = None
    experiment: WholeNumber | None = Field(None, description="one of your experiments; null = all of them")
    metric_name: str | None = Field(None, description="with the metric event, e.g. reward/mean")
    comparison: Literal[">", ">=", "<", "<=", "~"] | None = Field(
        None, description="~ is stuck: the newest for_steps points vary by at most threshold (max - min)"
    )
    threshold: float | None = Field(None, description="with the metric event; for ~, 0 or more")
    for_steps: WholeNumber | None = Field(
        None,
        description=f"the metric condition counts when it holds at each of the run's newest this many points "
        f"(1 to {MAX_FOR_STEPS}; default 1; ~ needs 2 or more)",
    )
    min_interval_s: float | None = Field(
        None, description="rate limit: at most one notification per this many seconds (default 60)"
    )
    enabled: StrictBool | None = None


class AlertRulePatch(BaseModel):
    enabled: StrictBool = Field(description="true or false (JSON's, not text)")


class AlertRuleOut(Shape):
    id: int
    name: str
    experiment: int | None
    events: list[str]
    metric_name: str
    comparison: str
    threshold: float | None
    for_steps: int = Field(description="the condition holds at each of the newest this many points")
    channel: str
    target: str = Field(description="masked for a webhook: scheme://host/… and its last characters")
    enabled: bool
    min_interval_s: float
    created_at: datetime


class AlertRuleList(Shape):
    rules: list[AlertRuleOut]
    count: int


DELIVERIES_MAX = 500


class DeliveryQuery(Query):
    rule: WholeNumber | None = Field(None, ge=1, description="only this rule's deliveries")
    status: Literal[tuple(DeliveryStatus.values)] | None = None
    limit: WholeNumber = Field(50, ge=1, description=f"at most {DELIVERIES_MAX}")


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

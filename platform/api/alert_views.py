"""Alerts over the API (the rules and their log; delivery itself is alerts.delivery's):

    GET  POST    alerts                   your rules / create one (201, or 400 {"errors": {field: message}})
    GET  PATCH  DELETE  alerts/<id>       one of your rules / {"enabled": bool} / delete it (204; its log goes too)
    GET          alerts/deliveries        ?rule=&status=&limit=  the delivery log, newest first

A webhook target is answered masked. Someone else's rule answers 404."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404

from alerts.forms import AlertRuleForm
from alerts.models import AlertDelivery, AlertRule
from api import alert_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, checked_body, payload, send


def rule_shape(rule: AlertRule) -> shapes.AlertRuleOut:
    return shapes.AlertRuleOut(
        id=rule.pk,
        name=rule.name,
        experiment=rule.experiment_id,
        events=list(rule.events),
        metric_name=rule.metric_name,
        comparison=rule.comparison,
        threshold=rule.threshold,
        for_steps=rule.for_steps,
        channel=rule.channel,
        target=rule.masked_target,
        enabled=rule.enabled,
        min_interval_s=rule.min_interval_s,
        created_at=rule.created_at,
    )


def delivery_shape(d: AlertDelivery) -> shapes.DeliveryOut:
    return shapes.DeliveryOut(
        id=d.pk,
        rule=d.rule_id,
        rule_name=d.rule.label,
        run=d.run_id,
        event=d.event,
        status=d.status,
        message=d.message,
        error=d.error,
        attempts=d.attempts,
        created_at=d.created_at,
        sent_at=d.sent_at,
    )


@operations(
    GET=Op(responses={200: shapes.AlertRuleList}, summary="List your alert rules"),
    POST=Op(
        body=shapes.AlertRuleInput, responses={201: shapes.AlertRuleOut, 400: Errors}, summary="Create an alert rule"
    ),
)
@api_endpoint("GET", "POST")
def alert_rules(request):
    """GET: your alert rules. POST {"events", "channel", "target", "experiment"?, "metric_name"?,
    "comparison"?, "threshold"?, "for_steps"?, "min_interval_s"?, "enabled"?, "name"?}: 201 the rule
    (a webhook target masked), or 400 {"errors": {field: message}} (a webhook URL in a local or
    private network is refused unless the admin allows it in PLATFORM_ALERT_WEBHOOK_ALLOW; the
    comparison "~", stuck, needs for_steps >= 2 and a threshold >= 0)."""
    if request.method == "GET":
        rules = [rule_shape(r) for r in AlertRule.objects.filter(owner=request.user)]
        return shapes.AlertRuleList(rules=rules, count=len(rules))
    data = {"enabled": True, **checked_body(request)}
    form = AlertRuleForm(request.user, data)
    if not form.is_valid():
        raise ApiError(400, errors=form.error_dict())
    rule = form.save()
    return send(rule_shape(rule), 201, location=f"/api/alerts/{rule.pk}")


@operations(
    GET=Op(responses={200: shapes.AlertRuleOut}, summary="One of your alert rules"),
    PATCH=Op(
        body=shapes.AlertRulePatch,
        responses={200: shapes.AlertRuleOut, 400: Errors},
        summary="Turn an alert rule on or off",
    ),
    DELETE=Op(responses={204: None}, summary="Delete an alert rule and its delivery log"),
)
@api_endpoint("GET", "PATCH", "DELETE")
def alert_rule_detail(request, pk: int):
    """GET: one of your rules. PATCH {"enabled": true | false}: turn it on or off (a disabled rule
    records nothing, and its pending deliveries wait). DELETE: 204; the rule and its log are gone."""
    rule = get_object_or_404(AlertRule, pk=pk, owner=request.user)
    if request.method == "DELETE":
        rule.delete()
        return HttpResponse(status=204)
    if request.method == "PATCH":
        rule.enabled = payload(request).enabled
        rule.save(update_fields=["enabled"])
    return rule_shape(rule)


@operations(GET=Op(query=shapes.DeliveryQuery, responses={200: shapes.DeliveryList, 400: Error}))
@api_endpoint("GET")
def alert_deliveries(request):
    """GET ?rule=&status=&limit=: your rules' deliveries, newest first (status pending, sent, failed
    or rate_limited; a failed or pending one carries its last error)."""
    query: shapes.DeliveryQuery = request.query
    rows = AlertDelivery.objects.filter(rule__owner=request.user).select_related("rule")
    if query.rule is not None:
        rows = rows.filter(rule_id=query.rule)
    if query.status is not None:
        rows = rows.filter(status=query.status)
    deliveries = [delivery_shape(d) for d in rows[: min(query.limit, shapes.DELIVERIES_MAX)]]
    return shapes.DeliveryList(deliveries=deliveries, count=len(deliveries))

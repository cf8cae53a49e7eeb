"""The Alerts page: your rules (a webhook's URL masked), the form that adds one (the collapse
detectors, alerts.rules.COLLAPSE_DETECTORS, fill it in from links ?preset=<slug>), enabling,
disabling and deleting, and the delivery log (the newest deliveries of your rules, with their errors)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from alerts import rules
from alerts.forms import AlertRuleForm
from alerts.models import AlertDelivery, AlertEvent, AlertRule, DeliveryStatus

LOG_ROWS = 100


@login_required
@require_http_methods(["GET", "POST"])
def alert_list(request):
    """GET: the page (?experiment=<id> preselects that experiment in the form, ?preset=<slug> fills it
    in with that collapse detector; an unknown one is ignored with a message). POST: add a rule."""
    if request.method == "POST":
        form = AlertRuleForm(request.user, request.POST)
        if form.is_valid():
            rule = form.save()
            messages.success(request, f"Added {rule.label}: {rule.describe()} -> {rule.masked_target}.")
            return redirect("alert-list")
    else:
        initial = {"enabled": True, "min_interval_s": 60}
        if request.GET.get("experiment", "").isascii() and request.GET.get("experiment", "").isdigit():
            initial["experiment"] = request.GET["experiment"]
        slug = request.GET.get("preset", "")
        if slug:
            chosen = rules.preset(slug)
            if chosen is None:
                known = ", ".join(p.slug for p in rules.COLLAPSE_DETECTORS)
                messages.warning(request, f"Unknown preset {slug[:40]!r}: choose one of {known}.")
            else:
                initial.update(
                    name=chosen.title,
                    events=[AlertEvent.METRIC],
                    metric_name=chosen.metric,
                    comparison=chosen.comparison,
                    threshold=chosen.threshold,
                    for_steps=chosen.for_steps,
                )
        form = AlertRuleForm(request.user, initial=initial)
    status = request.GET.get("status", "")
    log = AlertDelivery.objects.filter(rule__owner=request.user).select_related("rule", "run")
    if status in DeliveryStatus.values:
        log = log.filter(status=status)
    context = {
        "rules": AlertRule.objects.filter(owner=request.user).select_related("experiment"),
        "form": form,
        "deliveries": log[:LOG_ROWS],
        "statuses": DeliveryStatus.values,
        "status": status,
        "presets": _preset_links(request),
    }
    return render(request, "web/alert_list.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def alert_toggle(request, pk: int):
    rule = get_object_or_404(AlertRule, pk=pk, owner=request.user)  # someone else's: 404
    rule.enabled = not rule.enabled
    rule.save(update_fields=["enabled"])
    messages.success(request, f"{rule.label} is {'enabled' if rule.enabled else 'disabled'}.")
    return redirect("alert-list")


@login_required
@require_POST
def alert_delete(request, pk: int):
    rule = get_object_or_404(AlertRule, pk=pk, owner=request.user)
    rule.delete()
    messages.success(request, f"Deleted {rule.label} and its delivery log.")
    return redirect("alert-list")


def _preset_links(request) -> list[dict]:
    """The collapse detectors as links that fill the form in (keeping ?experiment=)."""
    links = []
    for preset in rules.COLLAPSE_DETECTORS:
        query = QueryDict(mutable=True)
        if request.GET.get("experiment"):
            query["experiment"] = request.GET["experiment"]
        query["preset"] = preset.slug
        links.append({"preset": preset, "href": f"?{query.urlencode()}", "condition": preset.condition.describe()})
    return links

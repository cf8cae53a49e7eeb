"""The run page's name, tags and notes form: a POST that experiments.run_labels checks and stores (the
same rules as PATCH /api/runs/<id>), then back to the run page saying what happened."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from experiments import run_labels
from experiments.access import get_for_user
from experiments.models import Run


@login_required
@require_POST
def run_labels_save(request, pk: int):
    """name, tags (separated by commas or spaces) and notes: replace the run's; 404 for a run the
    user may not see, 403 for one they may see but not steer. A form without a name field (an
    older page) leaves the name as it is."""
    run = get_for_user(Run.objects.all(), request.user, pk, change=True)
    notes = request.POST.get("notes", "").replace("\r\n", "\n")  # browsers send a textarea's lines with CRLF
    data = {"tags": run_labels.split_tags(request.POST.get("tags", "")), "notes": notes}
    if "name" in request.POST:
        data["name"] = request.POST["name"]
    try:
        labels = run_labels.check_labels(data)
    except run_labels.LabelError as exc:
        problems = "; ".join(f"{field}: {message}" for field, message in exc.errors.items())
        messages.error(request, f"Name, tags and notes not saved: {problems}")
        return redirect("run-detail", pk=run.pk)
    run_labels.save_labels(run, labels)
    messages.success(request, "Saved the run's name, tags and notes.")
    return redirect("run-detail", pk=run.pk)

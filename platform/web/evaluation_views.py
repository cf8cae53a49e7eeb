"""The evaluation pages: /evaluations/ (your jobs), /evaluations/new/ (evaluate a checkpoint or a
model folder on a dataset), /evaluations/<id>/ (progress, polled, then the results and the
per-prompt completions, filterable and paged like the rollout browser) and /evaluations/leaderboard/
(per dataset, best first). What happens is evaluations.services, as for the API."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from evaluations import leaderboard as boards
from evaluations import services
from evaluations.models import EvaluationJob
from experiments.access import get_for_user, may_change
from experiments.dataset_models import Dataset
from experiments.shown_paths import shown
from experiments.whole_numbers import NotAWholeNumber, whole_number

SAMPLES_PAGE = 50


def dataset_choices(user) -> list[tuple[str, str]]:
    """The form's datasets: the run's eval set, the built-in tasks, the uploaded datasets `user` may use."""
    from trainers.data.tasks import TASKS

    choices = [("run_eval", "the run's eval set")]
    choices += [(f"task:{name}", f"task {name}") for name in TASKS.names()]
    choices += [
        (f"dataset:{d.pk}", f"dataset {d.reference}")
        for d in Dataset.objects.visible_to(user).select_related("owner").order_by("owner__username", "name")
    ]
    return choices


class EvaluationForm(forms.Form):
    run = forms.IntegerField(required=False, min_value=0, help_text="The checkpoint's run (with step).")
    step = forms.IntegerField(required=False, min_value=0)
    model = forms.ChoiceField(required=False, help_text="Or a model folder instead of a checkpoint.")
    dataset = forms.ChoiceField()
    prompts = forms.IntegerField(
        min_value=0,
        max_value=services.MAX_PROMPTS,
        initial=services.DEFAULT_PROMPTS,
        help_text="Prompts scored (0 = the whole dataset).",
    )
    k = forms.IntegerField(
        min_value=1,
        max_value=services.MAX_K,
        initial=services.DEFAULT_K,
        help_text="Samples per prompt for pass@k (1 = greedy accuracy only).",
    )
    max_new_tokens = forms.IntegerField(
        required=False, min_value=1, max_value=services.MAX_NEW_TOKENS, help_text="Empty = the run's budget."
    )
    on_end = forms.BooleanField(
        required=False,
        label="when the run ends",
        help_text="Instead of this step: evaluate the run's best checkpoint (highest "
        "eval/accuracy, else reward/mean) once the run succeeds; now, if it has already succeeded.",
    )

    def __init__(self, user, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from experiments.models_dir import available_models

        self.fields["dataset"].choices = dataset_choices(user)
        self.fields["model"].choices = [("", "— a checkpoint (run and step above) —")] + [
            (m.path, m.label) for m in available_models()
        ]


@login_required
@require_GET
def evaluation_list(request):
    jobs = EvaluationJob.objects.visible_to(request.user).select_related("run")[:200]
    return render(request, "web/evaluation_list.html", {"jobs": jobs})


@login_required
@require_http_methods(["GET", "POST"])
def evaluation_new(request):
    """GET: the form (?run=&step= prefill a checkpoint). POST: create the job, then its page."""
    if request.method == "GET":
        form = EvaluationForm(
            request.user,
            initial={
                "run": request.GET.get("run"),
                "step": request.GET.get("step"),
                "on_end": request.GET.get("on_end") == "1",
            },
        )
        return render(request, "web/evaluation_form.html", {"form": form})
    form = EvaluationForm(request.user, request.POST)
    status = 400
    if form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if v not in (None, "")}
        if data.pop("on_end", False):
            return _on_end(request, form, data)
        if data.get("model"):
            data.pop("run", None)
        try:
            job = services.create_job(request.user, data)
        except services.EvaluationRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, shown(exc.message))
            status = exc.status
        else:
            messages.success(request, f"Evaluation {job.pk} queued: {job.policy_label} on {job.dataset_label}.")
            return redirect("evaluation-detail", pk=job.pk)
    return render(request, "web/evaluation_form.html", {"form": form}, status=status)


def _on_end(request, form: EvaluationForm, data: dict):
    """The form's "when the run ends": the run's evaluate-on-end request (its owner's), then the run page."""
    from experiments.models import Run

    if data.get("run") is None:
        form.add_error("run", "name the run whose best checkpoint to evaluate when it ends")
        return render(request, "web/evaluation_form.html", {"form": form}, status=400)
    run = get_for_user(Run.objects.select_related("experiment__owner"), request.user, data["run"], change=True)
    try:
        asked = services.request_on_end(request.user, run, data)
    except services.EvaluationRefused as exc:
        form.add_error(exc.field if exc.field in form.fields else None, shown(exc.message))
        return render(request, "web/evaluation_form.html", {"form": form}, status=exc.status)
    dataset = dict(form.fields["dataset"].choices).get(data["dataset"], data["dataset"])
    if asked.job is not None:  # the run had already succeeded: queued now
        messages.success(
            request,
            f"Run {run.label} has already succeeded: its best checkpoint (step {asked.job.step}) is queued "
            f"for evaluation on {dataset} as evaluation {asked.job.pk}.",
        )
        return redirect("evaluation-detail", pk=asked.job.pk)
    messages.success(request, f"When run {run.label} succeeds, its best checkpoint will be evaluated on {dataset}.")
    return redirect("run-detail", pk=run.pk)


@login_required
@require_GET
def evaluation_detail(request, pk: int):
    job = get_for_user(EvaluationJob.objects.select_related("run", "dataset"), request.user, pk)
    samples = job.samples.order_by("index")
    shown_filter = request.GET.get("correct", "")
    if shown_filter in ("true", "false"):
        samples = samples.filter(correct=shown_filter == "true")
    try:
        after = whole_number(request.GET.get("after"), -1, 2**31 - 1, default=-1)
    except NotAWholeNumber:
        after = -1
    page = list(samples.filter(index__gt=after)[: SAMPLES_PAGE + 1])
    next_after = page[SAMPLES_PAGE - 1].index if len(page) > SAMPLES_PAGE else None
    context = {
        "job": job,
        "error": shown(job.error),
        "samples": page[:SAMPLES_PAGE],
        "next_after": next_after,
        "correct": shown_filter,
        "poll": not job.finished,
        "may_cancel": not job.finished and may_change(request.user, job),
    }
    return render(request, "web/evaluation_detail.html", context)


@login_required
@require_http_methods(["POST"])
def evaluation_cancel(request, pk: int):
    """The page's Cancel button: stop a queued or running job (evaluations.services.cancel_job)."""
    job = get_for_user(EvaluationJob.objects.all(), request.user, pk, change=True)
    if services.cancel_job(job):
        messages.success(request, f"Evaluation {job.pk} cancelled.")
    else:
        job.refresh_from_db(fields=["status"])
        messages.error(request, f"Cannot cancel evaluation {job.pk}: it is {job.status}.")
    return redirect("evaluation-detail", pk=job.pk)


@login_required
@require_GET
def leaderboard(request):
    """?dataset=KEY: that dataset's leaderboard (default: the first one listed)."""
    listed = boards.boards(request.user)
    key = request.GET.get("dataset", "")[:80] or (listed[0].key if listed else "")
    rows = boards.leaderboard(request.user, key) if key else []
    current = next((b for b in listed if b.key == key), None)
    return render(request, "web/leaderboard.html", {"boards": listed, "key": key, "current": current, "rows": rows})

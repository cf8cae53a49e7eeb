"""The dataset pages: /datasets/ lists the user's datasets and those shared with them, with the
upload form (name, JSONL file, description; problems shown one line each as `file:line: message`);
/datasets/<id>/ shows one (its first rows, how configs name it, who it is shared with) and lets its
owner share, unshare and delete it. What happens is experiments.datasets, as for the API."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from experiments import dataset_files, datasets
from experiments.dataset_models import Dataset
from runner import storage

UPLOAD_FORM_OVERHEAD_BYTES = 1024 * 1024  # the multipart framing and the other fields of an upload


class DatasetUploadForm(forms.Form):
    name = forms.CharField(max_length=dataset_files.NAME_MAX_CHARS, help_text=dataset_files.NAME_RULE + ".")
    file = forms.FileField(
        label="JSONL file",
        help_text="One {\"prompt\", \"answer\"} object per line (a prompt may be a list of chat messages).",
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class ShareForm(forms.Form):
    users = forms.CharField(max_length=10_000, help_text="Usernames, separated by commas or spaces.")
    action = forms.ChoiceField(choices=[("share", "share"), ("unshare", "unshare")])

    def usernames(self) -> list[str]:
        return [u for u in self.cleaned_data["users"].replace(",", " ").split() if u]


def _list_page(request, form: DatasetUploadForm, check=None, status: int = 200):
    rows = Dataset.objects.visible_to(request.user).select_related("owner").order_by("owner__username", "name")
    context = {
        "own": [d for d in rows if d.owner_id == request.user.pk],
        "shared": [(d, d.reference_for(request.user)) for d in rows if d.owner_id != request.user.pk],
        "form": form,
        "check_errors": check.error_lines() if check is not None else [],
        "max_bytes": datasets.max_upload_bytes(),
    }
    return render(request, "web/dataset_list.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def dataset_list(request):
    """GET: the list and the upload form. POST: upload (then the new dataset's page)."""
    if request.method == "GET":
        return _list_page(request, DatasetUploadForm())
    limit = datasets.max_upload_bytes()
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit + UPLOAD_FORM_OVERHEAD_BYTES:
        form = DatasetUploadForm()
        form.add_error(None, f"the upload is larger than this server's limit of {limit} bytes")
        return _list_page(request, form, status=413)
    usage = storage.usage_for(request.user)  # once: both checks below read it
    refusal = storage.upload_refusal(
        usage,
        int(request.META.get("CONTENT_LENGTH") or 0),
        slack_bytes=UPLOAD_FORM_OVERHEAD_BYTES,
        adding="this request",
    )
    if refusal:  # before the file is read
        form = DatasetUploadForm()
        form.add_error(None, refusal)
        return _list_page(request, form, status=413)
    form = DatasetUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _list_page(request, form, status=400)
    upload = form.cleaned_data["file"]
    refusal = storage.upload_refusal(usage, upload.size)
    if refusal:
        form.add_error("file", refusal)
        return _list_page(request, form, status=413)
    try:
        dataset, check = datasets.upload(
            request.user,
            form.cleaned_data["name"],
            upload.chunks(),
            upload.name,
            form.cleaned_data["description"],
            room_check=storage.upload_room_check(request.user),
        )
    except datasets.DatasetRefused as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return _list_page(request, form, status=exc.status)
    if dataset is None:
        form.add_error("file", f"{len(check.errors) + check.more_errors} problem(s); nothing was stored")
        return _list_page(request, form, check, status=400)
    messages.success(request, f"Uploaded {dataset.name}: {dataset.rows} rows.")
    return redirect("dataset-detail", pk=dataset.pk)


def _visible(request, pk: int) -> Dataset:
    return get_object_or_404(Dataset.objects.visible_to(request.user).select_related("owner"), pk=pk)


def _owned(request, pk: int) -> Dataset:
    """The user's own dataset `pk` (404 when they may not see it, 403 when it is someone else's)."""
    dataset = _visible(request, pk)
    if dataset.owner_id != request.user.pk:
        raise PermissionDenied("only the dataset's owner may share or delete it")
    return dataset


@login_required
@require_http_methods(["GET"])
def dataset_detail(request, pk: int):
    return _detail_page(request, _visible(request, pk))


def _detail_page(request, dataset: Dataset, share_form: ShareForm | None = None, status: int = 200):
    is_owner = dataset.owner_id == request.user.pk
    context = {
        "dataset": dataset,
        "reference": dataset.reference_for(request.user),
        "is_owner": is_owner,
        "shared_with": datasets.shared_usernames(dataset) if is_owner else [],
        "share_form": share_form or ShareForm(initial={"action": "share"}),
        "used_by": list(datasets.experiments_naming(dataset).filter(owner=request.user)[:20]),
        "preview": [_preview_row(row) for row in dataset.preview],
    }
    return render(request, "web/dataset_detail.html", context, status=status)


def _preview_row(row: dict) -> tuple[str, list, str]:
    """(prompt text, chat messages, answer) of a preview row: one of the first two is empty."""
    prompt = row.get("prompt")
    return ("", prompt, row.get("answer", "")) if isinstance(prompt, list) else (str(prompt), [], row.get("answer", ""))


@login_required
@require_POST
def dataset_share(request, pk: int):
    dataset = _owned(request, pk)
    form = ShareForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, dataset, share_form=form, status=400)
    sharing = form.cleaned_data["action"] == "share"
    try:
        names = datasets.share(dataset, form.usernames(), share_with=sharing)
    except datasets.DatasetRefused as exc:
        form.add_error("users", exc.message)
        return _detail_page(request, dataset, share_form=form, status=exc.status)
    messages.success(request, f"{dataset.name} is shared with: {', '.join(names) or 'nobody'}.")
    return redirect("dataset-detail", pk=dataset.pk)


@login_required
@require_POST
def dataset_delete(request, pk: int):
    dataset = _owned(request, pk)
    try:
        datasets.delete(dataset)
    except datasets.DatasetRefused as exc:
        messages.error(request, f"Cannot delete {dataset.name}: {exc.message}")
        return redirect("dataset-detail", pk=dataset.pk)
    messages.success(request, f"Deleted {dataset.name}.")
    return redirect("dataset-list")

"""Datasets over the API (what happens is experiments.datasets, as for the pages):

    GET  POST    datasets                 yours and those shared with you / upload (multipart: name, file, description?)
    GET  DELETE  datasets/<id>            one, with its first rows / delete yours (409 while an experiment names it)
    POST         datasets/<id>/share      {"users": ["bob"]} -> {"shared_with": [...]}
    POST         datasets/<id>/unshare    {"users": ["bob"]} -> {"shared_with": [...]}

Someone else's dataset that is not shared with you answers 404; one shared with you answers 403 to
a delete, share or unshare."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404

from api import dataset_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, payload, refused, send
from experiments import datasets
from experiments.dataset_models import Dataset
from runner import storage

UPLOAD_FORM_OVERHEAD_BYTES = 1024 * 1024  # the multipart framing and the other fields of an upload


def dataset_summary(dataset: Dataset, user) -> shapes.DatasetSummary:
    """The dataset as `user` sees it in the list (who it is shared with only for its owner)."""
    is_owner = dataset.owner_id == user.pk
    return shapes.DatasetSummary(
        id=dataset.pk,
        name=dataset.name,
        owner=dataset.owner.get_username(),
        reference=dataset.reference_for(user),
        rows=dataset.rows,
        size_bytes=dataset.size_bytes,
        sha256=dataset.sha256,
        description=dataset.description,
        created_at=dataset.created_at,
        shared_with=datasets.shared_usernames(dataset) if is_owner else None,
    )


def _visible(request, pk: int) -> Dataset:
    return get_object_or_404(Dataset.objects.visible_to(request.user).select_related("owner"), pk=pk)


def _owned(request, pk: int) -> Dataset:
    dataset = _visible(request, pk)
    if dataset.owner_id != request.user.pk:
        raise ApiError(403, "only the dataset's owner may delete, share or unshare it")
    return dataset


@operations(
    GET=Op(responses={200: shapes.DatasetList}, summary="List your datasets and those shared with you"),
    POST=Op(
        form=shapes.DatasetUpload,
        responses={201: shapes.DatasetCreated, 400: Errors, 409: Errors, 413: Error},
        summary="Upload a dataset (a JSONL file, checked line by line)",
    ),
)
@api_endpoint("GET", "POST")
def dataset_list(request):
    """GET: your datasets and those shared with you (everyone's with the view permission).
    POST multipart/form-data {name, file, description?}: the file is checked line by line as training
    reads it; 201 {"id", "name", "reference", "rows", "size_bytes", "sha256", "preview"}, or 400
    {"errors": {"file": "x.jsonl:3: bad JSON ...\\n..."}} (the first 20 problems, then "and N more"),
    409 {"errors": {"name"}} for a name you already have, 413 over PLATFORM_DATASET_MAX_BYTES or when
    the file would take you over your storage quota (the message gives your use, the file's size and
    the quota: runner.storage)."""
    if request.method == "GET":
        rows = Dataset.objects.visible_to(request.user).select_related("owner").order_by("owner__username", "name")
        entries = [dataset_summary(d, request.user) for d in rows]
        return shapes.DatasetList(datasets=entries, count=len(entries))
    limit = datasets.max_upload_bytes()
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit + UPLOAD_FORM_OVERHEAD_BYTES:
        raise ApiError(413, f"the upload is larger than this server's limit of {limit} bytes")
    usage = storage.usage_for(request.user)  # once: both checks below read it
    refusal = storage.upload_refusal(
        usage,
        int(request.META.get("CONTENT_LENGTH") or 0),
        slack_bytes=UPLOAD_FORM_OVERHEAD_BYTES,
        adding="this request",
    )
    if refusal:  # before the file is read
        raise ApiError(413, refusal)
    if request.content_type != "multipart/form-data":
        raise ApiError(400, errors={"file": "send multipart/form-data with the fields name and file (a JSONL file)"})
    upload = request.FILES.get("file")
    if upload is None:
        raise ApiError(400, errors={"file": "required: the JSONL file, as a multipart file field"})
    refusal = storage.upload_refusal(usage, upload.size)
    if refusal:
        raise ApiError(413, refusal)
    try:
        dataset, check = datasets.upload(
            request.user,
            request.POST.get("name"),
            upload.chunks(),
            upload.name,
            request.POST.get("description", ""),
            room_check=storage.upload_room_check(request.user),
        )
    except datasets.DatasetRefused as exc:
        raise refused(exc) from None
    if dataset is None:
        raise ApiError(400, errors={"file": check.error_text()})
    created = shapes.DatasetCreated(
        id=dataset.pk,
        name=dataset.name,
        reference=dataset.reference_for(request.user),
        rows=dataset.rows,
        size_bytes=dataset.size_bytes,
        sha256=dataset.sha256,
        preview=dataset.preview,
    )
    return send(created, 201, location=f"/api/datasets/{dataset.pk}")


@operations(
    GET=Op(responses={200: shapes.DatasetDetail}, summary="A dataset with its first rows"),
    DELETE=Op(responses={204: None, 403: Error, 409: Error}, summary="Delete one of your datasets and its file"),
)
@api_endpoint("GET", "DELETE")
def dataset_detail(request, pk: int):
    """GET: one dataset with its first rows. DELETE (yours only): 204, its file goes too; 409 while
    an experiment names it in its config."""
    if request.method == "DELETE":
        dataset = _owned(request, pk)
        try:
            datasets.delete(dataset)
        except datasets.DatasetRefused as exc:
            raise refused(exc) from None
        return HttpResponse(status=204)
    dataset = _visible(request, pk)
    return shapes.DatasetDetail(**dict(dataset_summary(dataset, request.user)), preview=dataset.preview)


@operations(POST=Op(body=shapes.ShareInput, responses={200: shapes.Shared, 400: Errors, 403: Error}))
@api_endpoint("POST")
def dataset_share(request, pk: int, action: str):
    """POST {"users": ["bob", ...]} to share (or unshare) your dataset: they see it and name it
    owner/name in their configs. 200 {"shared_with": [...]}; 400 {"errors": {"users"}} for unknown users."""
    dataset = _owned(request, pk)
    try:
        names = datasets.share(dataset, payload(request).users, share_with=action == "share")
    except datasets.DatasetRefused as exc:
        raise refused(exc) from None
    return shapes.Shared(shared_with=names)

"""The JSON API's checkpoint endpoints: download one as a Hugging Face folder (runner.downloads)
and fork a run from one (runner.forks). Thin, like api/views.py.

    GET   runs/<id>/checkpoints/<step>/hf.zip   the checkpoint's Hugging Face folder as a zip
    POST  runs/<id>/fork                        {"step", "optimizer"?, "max_steps"?, "queue"?} -> 201 {"id"}
"""

from __future__ import annotations

from django.http import FileResponse, JsonResponse

from experiments.access import get_for_user
from experiments.models import Run
from runner import downloads, forks

from api import shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, json_body, refused


def _run(request, pk: int, change: bool = False) -> Run:
    return get_for_user(Run.objects.select_related("experiment__owner"), request.user, pk, change=change)


@operations(
    GET=Op(responses={200: "application/zip", 409: Error}),
)
@api_endpoint("GET")
def checkpoint_download(request, pk: int, step: int):
    """GET /api/runs/<id>/checkpoints/<step>/hf.zip: a zip (`run-<id>-step-<N>/` holding config.json,
    model.safetensors and the tokenizer files) that transformers loads once unpacked. A checkpoint
    not exported before is exported for this download only (seconds for a 135M model) and the
    temporary folder removed: nothing stays on the server. Anyone who may see the run may
    download it. 404 for a step without a checkpoint (the message lists the steps), 409 for a run
    that cannot be exported (a toy preset with the character tokenizer) or one being exported now."""
    run = _run(request, pk)
    try:
        archive = downloads.hf_zip(run, int(step))
    except downloads.DownloadRefused as exc:
        raise ApiError(exc.status, exc.message) from None
    return FileResponse(archive, as_attachment=True, filename=f"run-{run.pk}-step-{int(step)}.zip",
                        content_type="application/zip")


@operations(
    POST=Op(body=shapes.ForkInput, responses={201: shapes.Forked, 400: Errors, 403: Error, 409: Error, 429: Errors}),
)
@api_endpoint("POST")
def run_fork(request, pk: int):
    """POST /api/runs/<id>/fork {"step": N, "optimizer"?: "fresh" (default) | "continued",
    "max_steps"?: M (default: the parent's train.max_steps), "queue"?: name (default: the parent's)}:
    201 {"id", "status", "queue", "forked_from", "forked_from_step", "fork_optimizer"}, a queued run
    of the same experiment starting from checkpoint N (runner.forks says what each optimizer means).
    400 {"errors": {field}} for bad input or a step without a checkpoint (the message lists the
    steps); someone else's run 404, one the caller may only see 403; 409 when the parent's config
    is no longer valid here; 429 over the owner's queued-run limit."""
    parent = _run(request, pk, change=True)
    try:
        child = forks.fork_run(parent, forks.parse_fork_input(json_body(request)))
    except forks.ForkRefused as exc:
        raise refused(exc) from None
    body = {"id": child.pk, "status": child.status, "queue": child.queue, "forked_from": parent.pk,
            "forked_from_step": child.forked_from_step, "fork_optimizer": child.fork_optimizer}
    response = JsonResponse(body, status=201)
    response["Location"] = f"/api/runs/{child.pk}"
    return response

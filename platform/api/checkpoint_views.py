"""The JSON API's checkpoint endpoints: a run's checkpoints, export one as a Hugging Face folder
(runner.exports) or download it as one (runner.downloads), and fork a run from one (runner.forks).
Thin, like api/run_views.py; the shapes are api/checkpoint_shapes.py.

    GET   runs/<id>/checkpoints                 the run's checkpoints by step
    GET   runs/<id>/checkpoints/<step>/hf.zip   the checkpoint's Hugging Face folder as a zip
    POST  runs/<id>/export                      {"step"?, "dtype"?} -> a Hugging Face folder on the server
    POST  runs/<id>/fork                        {"step", "optimizer"?, "max_steps"?, "queue"?} -> 201 {"id"}
"""

from __future__ import annotations

from django.http import FileResponse

from api import checkpoint_shapes as shapes
from api.contract import Error, Errors, Op, operations
from api.endpoint import ApiError, api_endpoint, checked_body, payload, refused, send
from experiments.access import get_for_user
from experiments.models import Checkpoint, Run
from experiments.shown_paths import shown
from runner import downloads, exports, forks


def _run(request, pk: int, change: bool = False) -> Run:
    return get_for_user(Run.objects.select_related("experiment__owner"), request.user, pk, change=change)


def checkpoint_entry(checkpoint: Checkpoint) -> shapes.CheckpointEntry:
    return shapes.CheckpointEntry(
        step=checkpoint.step,
        path=checkpoint.path,
        size_bytes=checkpoint.size_bytes,
        metrics=checkpoint.metrics,
        created_at=checkpoint.created_at,
    )


@operations(
    GET=Op(responses={200: shapes.Checkpoints}),
)
@api_endpoint("GET")
def run_checkpoints(request, pk: int):
    """The run's checkpoints by step: {"checkpoints": [{"step", "path", "size_bytes", "metrics", "created_at"}]}."""
    run = _run(request, pk)
    return shapes.Checkpoints(checkpoints=[checkpoint_entry(c) for c in run.checkpoints.order_by("step")])


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
    return FileResponse(
        archive, as_attachment=True, filename=f"run-{run.pk}-step-{int(step)}.zip", content_type="application/zip"
    )


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
        child = forks.fork_run(parent, forks.parse_fork_input(checked_body(request)))
    except forks.ForkRefused as exc:
        raise refused(exc) from None
    forked = shapes.Forked(
        id=child.pk,
        status=child.status,
        queue=child.queue,
        forked_from=parent.pk,
        forked_from_step=child.forked_from_step,
        fork_optimizer=child.fork_optimizer,
    )
    return send(forked, 201, location=f"/api/runs/{child.pk}")


@operations(
    POST=Op(body=shapes.ExportInput, responses={201: shapes.Exported, 400: Errors, 403: Error, 409: Error, 429: Error}),
)
@api_endpoint("POST")
def run_export(request, pk: int):
    """POST /api/runs/<id>/export {"step"?: N (default: the newest checkpoint), "dtype"?: "float32" |
    "bfloat16"}: writes that checkpoint as a Hugging Face folder under PLATFORM_DATA_DIR/exports/ and
    answers 201 {"path" (shown as `<data>/exports/run-<id>-step-<N>`), "step", "dtype"} once it is
    written (synchronous: about 10 s for a 135M model; see runner.exports). 400 for a toy-preset run,
    a run without checkpoints or a bad step/dtype; 404 for a step without a checkpoint; 409 when that
    checkpoint is already exported (the message says where); 429 while the run's owner is at or over
    their storage quota (runner.storage)."""
    run = _run(request, pk, change=True)
    asked: shapes.ExportInput = payload(request)
    try:
        done = exports.export_checkpoint(run, step=asked.step, dtype=asked.dtype or "float32")
    except exports.ExportRefused as exc:
        raise ApiError(exc.status, exc.message) from None
    return send(shapes.Exported(path=shown(done.path), step=done.step, dtype=done.dtype), 201)

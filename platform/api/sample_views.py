"""The JSON API's rollout sample endpoints, the rollout browser's (query logic in
experiments.sample_query; shapes in api/sample_shapes.py):

    GET runs/<id>/samples?kind=&step=&step_min=&step_max=&group=&reward_min=&reward_max=
                         &advantage_min=&advantage_max=&q=&prompt_hash=&end_reason=&tool=
                         &limit=&after=|before=
        -> {"samples": [...], "next_after": id | null, "prev_before": id | null,
            "scanned_to_step": step | null, "limit": n}
        (end_reason: done | max_turns | max_total_tokens | env_error, tool: yes | no: a multi-turn
        run's episodes; a text, reward, advantage or episode search reads at most
        sample_query.SEARCH_SCAN_ROWS rows a request:
        when it stopped before `limit` matches, `scanned_to_step` is where, and `next_after` continues
        from there)
        (with none of these parameters but `step`: one step's train samples, see `run_samples`)
    GET runs/<id>/samples.jsonl?<the same filters>
        -> every matching sample, one JSON object a line, streamed

A group: `step` + `group` (the G completions of one prompt); one prompt across steps: `prompt_hash`.
Bad parameters answer 400 naming the parameter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse

from api import sample_shapes as shapes
from api.contract import Op, operations
from api.endpoint import ApiError, api_endpoint
from api.shapes import finite
from experiments import reward_details, sample_episodes, sample_query, sample_text
from experiments.access import get_for_user
from experiments.models import RolloutSample, Run, SampleKind
from experiments.shown_paths import shown

SAMPLE_STEPS_LISTED = 50  # recent steps with samples that /samples names


def _run(request, pk: int) -> Run:
    return get_for_user(Run.objects.select_related("experiment"), request.user, pk)


def sample_fields(sample: RolloutSample) -> dict[str, Any]:
    """A rollout sample's fields of shapes.Sample (as keywords: `episode` only for a multi-turn one).
    `prompt_segments` / `completion_segments` are the text cut into plain text, special tokens and
    role names for display (experiments.sample_text), `prompt_messages` the chat messages behind the
    prompt when it had any. `truncated` (the completion ran into max_new_tokens), `in_loss` (False:
    out of the loss, by the overlong filter or a capped dynamic-sampling step) and `overlong_penalty`
    (the soft overlong reward) are null where the trainer wrote no such key. A multi-turn sample
    adds `episode` (experiments.sample_episodes.episode: env, turns with role, text and tokens,
    reward_parts, end_reason, error (server paths shown relative to their root), tool_calls,
    tool_errors); a single-turn one has no such key, as before. A sample the code_tests reward
    scored adds `code_tests`, each unit test it ran ({test, passed, reason},
    experiments.reward_details.code_tests), and one a judge model scored adds `judge` ({mode, score,
    verdict, reason}, experiments.reward_details.judge); one without has no such key."""
    extra = sample.extra if isinstance(sample.extra, dict) else {}
    messages = extra.get("prompt_messages")
    penalty = extra.get("overlong_penalty")
    shown_episode = sample_episodes.episode(extra)
    code_tests = reward_details.code_tests(extra)
    judge = reward_details.judge(extra)
    if shown_episode is not None and shown_episode["error"] is not None:
        shown_episode["error"] = shown(shown_episode["error"])  # an environment's traceback: no server paths
    return {
        "index": sample.index,
        "prompt": sample.prompt,
        "prompt_messages": messages if isinstance(messages, list) else None,
        "prompt_segments": sample_text.prompt_segments(sample.prompt, extra),
        "completion": sample.completion,
        "completion_segments": sample_text.segments(sample.completion),
        "answer": sample.answer,
        "reward": finite(sample.reward),
        "advantage": finite(sample.advantage),
        "truncated": extra.get("truncated") if isinstance(extra.get("truncated"), bool) else None,
        "in_loss": extra.get("in_loss") if isinstance(extra.get("in_loss"), bool) else None,
        "overlong_penalty": (
            finite(penalty) if isinstance(penalty, (int, float)) and not isinstance(penalty, bool) else None
        ),
        **({"episode": shown_episode} if shown_episode is not None else {}),
        **({"code_tests": code_tests} if code_tests is not None else {}),
        **({"judge": judge} if judge is not None else {}),
    }


def browsed_sample(sample: RolloutSample) -> shapes.BrowsedSample:
    """A sample as the browser shows it: the run page's fields plus where it sits in the run."""
    extra = sample.extra if isinstance(sample.extra, dict) else {}
    generation = extra.get("generation")
    return shapes.BrowsedSample(
        id=sample.pk,
        kind=sample.kind,
        step=sample.step,
        group=sample.group,
        generation=generation if isinstance(generation, int) else None,
        prompt_hash=sample.prompt_hash,
        **sample_fields(sample),
    )


def export_json(sample: RolloutSample) -> dict[str, Any]:
    """A sample as one line of the JSONL export: the stored fields, no display segments."""
    return {
        "id": sample.pk,
        "kind": sample.kind,
        "step": sample.step,
        "index": sample.index,
        "group": sample.group,
        "prompt_hash": sample.prompt_hash,
        "prompt": sample.prompt,
        "completion": sample.completion,
        "answer": sample.answer,
        "reward": finite(sample.reward),
        "advantage": finite(sample.advantage),
        "extra": _shown_error(sample.extra),
    }


def _shown_error(extra: Any) -> Any:
    """A stored `extra` with its episode's `error` (an environment's message, maybe a traceback) and
    its code tests' failure reasons (a sandbox error) showing no server directories, like every
    error that leaves the server."""
    if not isinstance(extra, dict):
        return extra
    if isinstance(extra.get("error"), str):
        extra = {**extra, "error": shown(extra["error"])}
    details = extra.get("reward_details")
    if isinstance(details, dict) and isinstance(details.get("code_tests"), list):
        tests = [
            {**t, "reason": shown(t["reason"])} if isinstance(t, dict) and isinstance(t.get("reason"), str) else t
            for t in details["code_tests"]
        ]
        extra = {**extra, "reward_details": {**details, "code_tests": tests}}
    return extra


def _parsed(parse, params):
    try:
        return parse(params)
    except sample_query.BadParameter as exc:
        raise ApiError(400, errors={exc.name: exc.message}) from None


def browse(request, run: Run) -> shapes.SamplePage:
    """One page of the run's samples (run_samples' answer when a browse parameter is given)."""
    filters = _parsed(sample_query.parse_filters, request.GET)
    page_request = _parsed(sample_query.parse_page, request.GET)
    page = _parsed(lambda _: sample_query.page(run, filters, page_request), None)
    return shapes.SamplePage(
        samples=[browsed_sample(s) for s in page.samples],
        next_after=page.next_after,
        prev_before=page.prev_before,
        scanned_to_step=page.scanned_to_step,
        limit=page_request.limit,
    )


@operations(
    GET=Op(query=shapes.SamplesQuery, responses={200: shapes.SamplesAnswer}),
)
@api_endpoint("GET")
def run_samples(request, pk: int):
    """?step=S (default: the newest step with samples): {"steps": [recent steps with samples,
    newest first], "step": S, "samples": [...]}. With a browse parameter: a page (`browse`)."""
    run = _run(request, pk)
    if sample_query.is_browse(request.GET):
        return browse(request, run)
    trained = RolloutSample.objects.filter(run=run, kind=SampleKind.TRAIN)
    steps = list(trained.order_by("-step").values_list("step", flat=True).distinct()[:SAMPLE_STEPS_LISTED])
    step = request.query.step if request.query.step is not None else (steps[0] if steps else None)
    samples = trained.filter(step=step).order_by("index") if step is not None else []
    return shapes.Samples(steps=steps, step=step, samples=[shapes.Sample(**sample_fields(s)) for s in samples])


def _lines(samples: Iterator[RolloutSample]) -> Iterator[bytes]:
    for sample in samples:
        yield (json.dumps(export_json(sample), ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


@operations(
    GET=Op(query=shapes.SampleFiltersQuery, responses={200: "application/x-ndjson"}),
)
@api_endpoint("GET")
def samples_export(request, pk: int):
    """?<the browse filters>: every matching sample as JSON lines (id, kind, step, index, group,
    prompt_hash, prompt, completion, answer, reward, advantage, extra), streamed."""
    run = _run(request, pk)
    filters = _parsed(sample_query.parse_filters, request.GET)
    response = StreamingHttpResponse(
        _lines(sample_query.iterate(run, filters)), content_type="application/x-ndjson; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-{filters.kind}-samples.jsonl"'
    return response

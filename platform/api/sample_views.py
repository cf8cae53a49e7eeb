"""The rollout browser's API (query logic in experiments.sample_query):

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
        (with none of these parameters but `step`, the older answer of api.views.run_samples)
    GET runs/<id>/samples.jsonl?<the same filters>
        -> every matching sample, one JSON object a line, streamed

A group: `step` + `group` (the G completions of one prompt); one prompt across steps: `prompt_hash`.
Bad parameters answer 400 naming the parameter."""

from __future__ import annotations

import json
from typing import Any, Iterator

from django.http import StreamingHttpResponse

from experiments import sample_query
from experiments.access import get_for_user
from experiments.models import RolloutSample, Run
from experiments.shown_paths import shown

from api import payloads, shapes
from api.contract import Op, operations
from api.endpoint import ApiError, api_endpoint


def _run(request, pk: int) -> Run:
    return get_for_user(Run.objects.select_related("experiment"), request.user, pk)


def browse_json(sample: RolloutSample) -> dict[str, Any]:
    """A sample as the browser shows it: the run page's fields plus where it sits in the run."""
    extra = sample.extra if isinstance(sample.extra, dict) else {}
    generation = extra.get("generation")
    return {
        "id": sample.pk,
        "kind": sample.kind,
        "step": sample.step,
        "group": sample.group,
        "generation": generation if isinstance(generation, int) else None,
        "prompt_hash": sample.prompt_hash,
        **payloads.sample_json(sample),
    }


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
        "reward": payloads.finite(sample.reward),
        "advantage": payloads.finite(sample.advantage),
        "extra": _shown_error(sample.extra),
    }


def _shown_error(extra: Any) -> Any:
    """A stored `extra` with its episode's `error` (an environment's message, maybe a traceback)
    showing no server directories, like every error that leaves the server."""
    if isinstance(extra, dict) and isinstance(extra.get("error"), str):
        return {**extra, "error": shown(extra["error"])}
    return extra


def _parsed(parse, params):
    try:
        return parse(params)
    except sample_query.BadParameter as exc:
        raise ApiError(400, errors={exc.name: exc.message}) from None


def browse(request, run: Run) -> dict[str, Any]:
    """One page of the run's samples (called by api.views.run_samples when a browse parameter is given)."""
    filters = _parsed(sample_query.parse_filters, request.GET)
    page_request = _parsed(sample_query.parse_page, request.GET)
    page = _parsed(lambda _: sample_query.page(run, filters, page_request), None)
    return {"samples": [browse_json(s) for s in page.samples], "next_after": page.next_after,
            "prev_before": page.prev_before, "scanned_to_step": page.scanned_to_step, "limit": page_request.limit}


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
    response = StreamingHttpResponse(_lines(sample_query.iterate(run, filters)),
                                     content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-{filters.kind}-samples.jsonl"'
    return response

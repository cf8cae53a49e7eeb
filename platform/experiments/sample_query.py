"""Browsing a run's rollout samples: the filters a caller may give (parsed from query parameters,
shared by the API and the web page), the filtered queryset, and keyset pages over it.

Order: (step, index, id), within one kind (train or eval). A page continues after a sample id
(`after`) or ends before one (`before`), never at an OFFSET, so a page deep in a run of 10^6
samples costs what the first one does: the (run, kind, step, index) index is walked from the
cursor. No exact total is counted (slow on filtered queries at that size): a page says whether more
follow. Filters: step range, reward and advantage ranges, text in the prompt or the completion
(case-insensitive), one prompt across steps (`prompt_hash`), one group of a step (`group`), and for
a multi-turn run's episodes (experiments.sample_episodes) how they ended (`end_reason`) and whether
they called a tool (`tool`: yes / no)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Iterator, Mapping

from django.db import connections
from django.db.models import Q, QuerySet

from experiments.models import RolloutSample, Run, SampleKind
from experiments.sample_episodes import END_REASONS

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
EXPORT_CHUNK = 1000  # samples read per query while streaming an export
SEARCH_SCAN_ROWS = 50_000  # rows a value search (text, reward, advantage) reads per request
TRIGRAM_MIN_CHARS = 3  # a trigram index serves text of at least 3 characters
TRIGRAM_INDEX = "sample_completion_trgm"  # made by migration 0010 where pg_trgm can be created
_trigram_indexed: dict[str, bool] = {}  # database name -> whether the trigram indexes exist
MAX_QUERY_CHARS = 200
INT_LIMIT = 2**31 - 1  # steps, indexes and groups are 32-bit integer columns
ID_LIMIT = 2**63 - 1
PROMPT_HASH = re.compile(r"[0-9a-f]{32}")
INT_FILTERS = ("step", "step_min", "step_max", "group")
FLOAT_FILTERS = ("reward_min", "reward_max", "advantage_min", "advantage_max")
# The parameters that ask for a browsed page (GET /api/runs/<id>/samples with none of them, `step`
# alone included, keeps its older shape: one step's samples).
TOOL_CHOICES = ("yes", "no")  # `tool`: the episode made at least one tool call, or none
BROWSE_PARAMS = (
    "kind",
    "step_min",
    "step_max",
    "group",
    *FLOAT_FILTERS,
    "q",
    "prompt_hash",
    "end_reason",
    "tool",
    "limit",
    "after",
    "before",
)


class BadParameter(ValueError):
    """A query parameter that cannot be used; `name` is the parameter."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


@dataclasses.dataclass(frozen=True)
class SampleFilters:
    kind: str = SampleKind.TRAIN
    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    group: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    advantage_min: float | None = None
    advantage_max: float | None = None
    q: str = ""
    prompt_hash: str = ""
    end_reason: str = ""  # a multi-turn episode's end reason (one of END_REASONS), "" = any
    tool: str = ""  # "yes": episodes with a tool call, "no": episodes without, "" = any


@dataclasses.dataclass(frozen=True)
class PageRequest:
    limit: int = DEFAULT_LIMIT
    after: int | None = None  # the page starts after this sample id
    before: int | None = None  # the page ends before this sample id
    newest: bool = False  # with neither cursor: the last page (the newest steps), not the first


@dataclasses.dataclass(frozen=True)
class Page:
    samples: list[RolloutSample]
    next_after: int | None  # `after` for the next page, None on the last one
    prev_before: int | None  # `before` for the previous page, None on the first one
    scanned_to_step: int | None = None  # a text search's window ended at this step (see page)


def _int(params: Mapping[str, str], name: str, minimum: int, maximum: int) -> int | None:
    raw = params.get(name, "").strip()
    if raw == "":
        return None
    if not re.fullmatch(r"-?[0-9]{1,20}", raw):
        raise BadParameter(name, f"must be an integer, got {raw[:40]!r}")
    value = int(raw)
    if not minimum <= value <= maximum:
        raise BadParameter(name, f"must be between {minimum} and {maximum}, got {value}")
    return value


def _float(params: Mapping[str, str], name: str) -> float | None:
    raw = params.get(name, "").strip()
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadParameter(name, f"must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise BadParameter(name, f"must be a finite number, got {raw[:40]!r}")
    return value


def prompt_hash(prompt_text: str) -> str:
    """RolloutSample.prompt_hash: the same prompt at any step has the same one."""
    return hashlib.sha256(prompt_text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def is_browse(params: Mapping[str, str]) -> bool:
    return any(name in params for name in BROWSE_PARAMS)


def parse_filters(params: Mapping[str, str]) -> SampleFilters:
    """The filters in query parameters `params` (absent or empty: no filter), or BadParameter."""
    kind = params.get("kind", "").strip() or SampleKind.TRAIN
    if kind not in SampleKind.values:
        raise BadParameter("kind", f"must be one of {', '.join(SampleKind.values)}, got {kind[:40]!r}")
    ints = {name: _int(params, name, -INT_LIMIT, INT_LIMIT) for name in INT_FILTERS}
    floats = {name: _float(params, name) for name in FLOAT_FILTERS}
    q = params.get("q", "")
    if len(q) > MAX_QUERY_CHARS:
        raise BadParameter("q", f"at most {MAX_QUERY_CHARS} characters, got {len(q)}")
    if "\x00" in q:
        raise BadParameter("q", "must not contain NUL characters")
    prompt_hash = params.get("prompt_hash", "").strip()
    if prompt_hash and not PROMPT_HASH.fullmatch(prompt_hash):
        raise BadParameter("prompt_hash", "must be 32 lowercase hex digits")
    if ints["group"] is not None and ints["step"] is None:
        raise BadParameter("group", "needs step (a group is one prompt's completions within one step)")
    end_reason = params.get("end_reason", "").strip()
    if end_reason and end_reason not in END_REASONS:
        raise BadParameter("end_reason", f"must be one of {', '.join(END_REASONS)}, got {end_reason[:40]!r}")
    tool = params.get("tool", "").strip()
    if tool and tool not in TOOL_CHOICES:
        raise BadParameter("tool", f"must be yes (the episode called a tool) or no, got {tool[:40]!r}")
    return SampleFilters(
        kind=kind, q=q.strip(), prompt_hash=prompt_hash, end_reason=end_reason, tool=tool, **ints, **floats
    )


def parse_page(params: Mapping[str, str]) -> PageRequest:
    limit = _int(params, "limit", 1, 10**9)
    after = _int(params, "after", 1, ID_LIMIT)
    before = _int(params, "before", 1, ID_LIMIT)
    if after is not None and before is not None:
        raise BadParameter("before", "give after or before, not both")
    return PageRequest(limit=min(limit or DEFAULT_LIMIT, MAX_LIMIT), after=after, before=before)


# The filters on a sample's values (no index that keeps the browse order serves them), as unset.
NO_VALUE_FILTERS = {
    "q": "",
    "reward_min": None,
    "reward_max": None,
    "advantage_min": None,
    "advantage_max": None,
    "end_reason": "",
    "tool": "",
}


def text_indexed(f: SampleFilters, using: str = "default") -> bool:
    """Whether `f` is a text search alone (no reward or advantage bound) that PostgreSQL's trigram
    indexes serve (migration 0010: a database where pg_trgm could be created), so it needs no
    bounded scan: the planner finds the matching rows through the index, or walks the browse order
    when the text is common. Checked once per database and process."""
    if not f.q or len(f.q) < TRIGRAM_MIN_CHARS or any(getattr(f, n) is not None for n in FLOAT_FILTERS):
        return False
    if f.end_reason or f.tool:
        return False
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    name = str(connection.settings_dict["NAME"])
    if name not in _trigram_indexed:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [TRIGRAM_INDEX])
            _trigram_indexed[name] = cursor.fetchone() is not None
    return _trigram_indexed[name]


def filters_values(f: SampleFilters) -> bool:
    """Whether `f` filters on text, reward, advantage or an episode's end and tool use."""
    return any(getattr(f, name) != unset for name, unset in NO_VALUE_FILTERS.items())


def filtered(run: Run, f: SampleFilters) -> QuerySet:
    """The run's samples that pass `f` (unordered)."""
    return _by_values(_by_place(run, f), f)


def _by_place(run: Run, f: SampleFilters) -> QuerySet:
    """The run's samples that pass `f`'s kind, step, group and prompt filters (index-served)."""
    qs = RolloutSample.objects.filter(run=run, kind=f.kind)
    if f.step is not None:
        qs = qs.filter(step=f.step)
    if f.step_min is not None:
        qs = qs.filter(step__gte=f.step_min)
    if f.step_max is not None:
        qs = qs.filter(step__lte=f.step_max)
    if f.group is not None:
        qs = qs.filter(group=f.group)
    if f.prompt_hash:
        qs = qs.filter(prompt_hash=f.prompt_hash)
    return qs


def _by_values(qs: QuerySet, f: SampleFilters) -> QuerySet:
    """`qs` narrowed by `f`'s text, reward, advantage and episode filters (the episode keys are read
    from the `extra` JSON: a key lookup both SQLite and PostgreSQL answer; a single-turn sample has
    none of them and passes neither)."""
    if f.reward_min is not None:
        qs = qs.filter(reward__gte=f.reward_min)
    if f.reward_max is not None:
        qs = qs.filter(reward__lte=f.reward_max)
    if f.advantage_min is not None:
        qs = qs.filter(advantage__gte=f.advantage_min)
    if f.advantage_max is not None:
        qs = qs.filter(advantage__lte=f.advantage_max)
    if f.q:
        qs = qs.filter(Q(prompt__icontains=f.q) | Q(completion__icontains=f.q))
    if f.end_reason:
        qs = qs.filter(extra__end_reason=f.end_reason)
    if f.tool == "yes":
        qs = qs.filter(extra__tool_calls__gt=0)
    elif f.tool == "no":
        qs = qs.filter(extra__tool_calls=0)
    return qs


def _cursor(run: Run, sample_id: int, name: str) -> tuple[int, int, int]:
    """(step, index, id) of the run's sample `sample_id`, or BadParameter naming `name`."""
    row = RolloutSample.objects.filter(run=run, pk=sample_id).values_list("step", "index", "id").first()
    if row is None:
        raise BadParameter(name, f"no sample {sample_id} in this run")
    return row


def _after(qs: QuerySet, step: int, index: int, sample_id: int) -> QuerySet:
    """Rows after (step, index, id) in browse order; `step__gte` lets the index start at the cursor."""
    return qs.filter(
        Q(step__gt=step) | Q(step=step, index__gt=index) | Q(step=step, index=index, id__gt=sample_id), step__gte=step
    )


def _before(qs: QuerySet, step: int, index: int, sample_id: int) -> QuerySet:
    return qs.filter(
        Q(step__lt=step) | Q(step=step, index__lt=index) | Q(step=step, index=index, id__lt=sample_id), step__lte=step
    )


FORWARD = ("step", "index", "id")
BACKWARD = ("-step", "-index", "-id")


def _scan_window_end(qs: QuerySet, order: tuple[str, ...]) -> tuple[int, int, int] | None:
    """The (step, index, id) of the SEARCH_SCAN_ROWS-th row of `qs` in `order`, or None when it
    holds fewer: a text search reads at most that many rows per request."""
    rows = list(qs.order_by(*order).values_list("step", "index", "id")[SEARCH_SCAN_ROWS - 1 : SEARCH_SCAN_ROWS])
    return rows[0] if rows else None


def _window_end(
    place: QuerySet, base: QuerySet, cursor: tuple[int, int, int] | None, forward: bool
) -> tuple[int, int, int] | None:
    """The end of a value search's window: the SEARCH_SCAN_ROWS-th row of `base` (the selection
    after the cursor; `place`: the same before the cursor). Counted from the start of the cursor's
    step, skipping that step's rows up to the cursor: PostgreSQL estimates a plain step bound well
    and the keyset's OR badly (it sorted the 250,000 rows after a cursor instead of walking the
    index: 100 ms instead of 20 at 10^6 samples)."""
    order = FORWARD if forward else BACKWARD
    if cursor is None:
        return _scan_window_end(base, order)
    step, index, sample_id = cursor
    if forward:
        around = place.filter(step__gte=step)
        passed = _before(place.filter(step=step), step, index, sample_id + 1).count()
    else:
        around = place.filter(step__lte=step)
        passed = _after(place.filter(step=step), step, index, sample_id - 1).count()
    at = passed + SEARCH_SCAN_ROWS - 1
    rows = list(around.order_by(*order).values_list("step", "index", "id")[at : at + 1])
    return rows[0] if rows else None


def page(run: Run, f: SampleFilters, request: PageRequest) -> Page:
    """One page of the run's samples passing `f`, in (step, index, id) order, forward from `after`
    (or the start) or backward from `before` (or, with `request.newest`, from the end).

    A value search (text `q`, reward or advantage range; not narrowed to one prompt or one step)
    has no index that keeps the browse order (a rare reward would otherwise read the whole run: 350
    ms on PostgreSQL at 10^6 samples), so it reads at most SEARCH_SCAN_ROWS rows of the kind, step
    and prompt filters' selection per request: when that window ends before `limit` matches are
    found, the page holds the matches in it and its cursor continues after the window
    (`scanned_to_step` says how far it read)."""
    from_end = request.newest and request.after is None and request.before is None
    forward = request.before is None and not from_end
    place = base = _by_place(run, f)
    cursor = None
    if request.before is not None:
        cursor = _cursor(run, request.before, "before")
        base = _before(place, *cursor)
    elif request.after is not None:
        cursor = _cursor(run, request.after, "after")
        base = _after(place, *cursor)
    order = FORWARD if forward else BACKWARD
    qs = _by_values(base, f)
    window_end = None
    if filters_values(f) and not text_indexed(f):
        if not f.prompt_hash and f.step is None:
            window_end = _window_end(place, base, cursor, forward)
            if window_end is not None:  # up to and including the window's last row
                end_step, end_index, end_id = window_end
                qs = (
                    _before(qs, end_step, end_index, end_id + 1)
                    if forward
                    else _after(qs, end_step, end_index, end_id - 1)
                )
    rows = list(qs.order_by(*order)[: request.limit + 1])
    more = len(rows) > request.limit
    rows = rows[: request.limit]
    further = rows[-1].pk if more else (window_end[2] if window_end is not None else None)
    scanned_to_step = None if more or window_end is None else window_end[0]
    if forward:
        return Page(
            rows,
            next_after=further,
            prev_before=rows[0].pk if rows and request.after is not None else None,
            scanned_to_step=scanned_to_step,
        )
    rows.reverse()
    return Page(
        rows,
        next_after=rows[-1].pk if rows and not from_end else None,
        prev_before=further,
        scanned_to_step=scanned_to_step,
    )


def iterate(run: Run, f: SampleFilters, chunk: int = EXPORT_CHUNK) -> Iterator[RolloutSample]:
    """Every sample passing `f`, in browse order, read `chunk` at a time by keyset (for exports)."""
    qs = filtered(run, f).order_by("step", "index", "id")
    cursor = None
    while True:
        rows = list((qs if cursor is None else _after(qs, *cursor))[:chunk])
        yield from rows
        if len(rows) < chunk:
            return
        cursor = (rows[-1].step, rows[-1].index, rows[-1].pk)

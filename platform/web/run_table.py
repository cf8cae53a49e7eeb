"""What the runs page (/runs/) shows around its table: sortable headers as links, the filter
inputs' choices, and each row's metric cells. The query itself is experiments.run_filters, shared
with GET /api/runs, which the page's script polls with the same parameters (web/run_list.js)."""

from __future__ import annotations

from urllib.parse import urlencode

from experiments.models import Experiment, Run, RunStatus, Tag
from experiments.run_compare import MAX_RUNS
from experiments.run_filters import METRIC_SORT_PREFIX, RunQuery, latest_values
from trainers.config.metric_names import METRIC_NAMES

CHOICES_SHOWN = 500  # experiments / owners / tags offered in the filter inputs
SORT_MARKS = {True: "\u25bc", False: "\u25b2"}  # descending, ascending


def query_string(query: RunQuery, **changes) -> str:
    """'?status=running&sort=step' for `query` with `changes`; '?' alone for the defaults."""
    return "?" + urlencode(query.params(**changes))


def header(query: RunQuery, key: str, label: str) -> dict:
    """A sortable column's header: its label, the link that sorts by it (or flips the direction),
    and ▲/▼ when the table is sorted by it."""
    return {
        "key": key,
        "label": label,
        "href": query_string(query, sort=query.toggled_sort(key)),
        "mark": SORT_MARKS[query.descending] if query.sort_key == key else "",
    }


def table_context(query: RunQuery) -> dict:
    """The table's headers (the columns before the metric ones, the metric ones, then Created),
    the pagination links' base and the compare button's limit."""
    lead = {"id": "Run", "experiment": "Experiment", "owner": "Owner", "status": "Status", "step": "Progress"}
    return {
        "headers": [header(query, key, label) for key, label in lead.items()],
        "metric_headers": [header(query, METRIC_SORT_PREFIX + name, name) for name in query.metrics],
        "created_header": header(query, "created", "Created"),
        "page_base": query_string(query) + ("&" if query.params() else ""),
        "compare_max_runs": MAX_RUNS,
        "previous_label": "previous",  # the pages follow the chosen sort, not always newest first
        "next_label": "next",
    }


def attach_metric_cells(runs: list, query: RunQuery) -> None:
    """Give each run (annotated by run_filters.apply) `metric_cells`: its latest value of each metric
    column, in column order, for the template."""
    for run in runs:
        values = latest_values(run, query)
        run.metric_cells = [(name, values[name]) for name in query.metrics]


def filter_choices(user, query: RunQuery) -> dict:
    """The options of the filter form: statuses, the experiments and owners the user may see, the
    tags of the runs they may see, and the metric names to pick columns from (the trainer's, then any other
    chosen one as free text)."""
    visible = Experiment.objects.visible_to(user)
    return {
        "statuses": RunStatus.values,
        "experiments": list(visible.order_by("name", "pk").values_list("pk", "name")[:CHOICES_SHOWN]),
        "owners": list(
            visible.order_by("owner__username").values_list("owner__username", flat=True).distinct()[:CHOICES_SHOWN]
        ),
        "tag_names": list(
            Tag.objects.filter(runs__in=Run.objects.visible_to(user))
            .order_by("name")
            .values_list("name", flat=True)
            .distinct()[:CHOICES_SHOWN]
        ),
        "known_metrics": [(name, name in query.metrics) for name in METRIC_NAMES],
        "other_metrics": ",".join(m for m in query.metrics if m not in METRIC_NAMES),
        "config_texts": [f.text for f in query.config],
    }

"""The runs table's query: which runs, in which order, with which metric columns. One parser for
the web page (/runs/) and the API (GET /api/runs), so both read the same parameters the same way.

Parameters (all optional; unknown ones are ignored, so `page`, `limit` and `offset` pass through):

    status=running,queued          any of these statuses
    experiment=12                  one experiment's runs (its id)
    owner=alice                    runs of experiments owned by this username
    tag=baseline,sweep-3           runs carrying every one of these tags (repeatable)
    config=grpo.beta:0.04          runs whose config has this value at this dotted path (repeatable,
                                   every one must hold); the value is read as JSON when it is JSON
                                   (0.04, true, null, "text"), else as text (exact_match)
    metrics=reward/mean,kl         columns: each run's value of these metrics at its latest step
    sort=-created                  id, created, status, step, experiment, owner or metric:NAME,
                                   '-' first for descending; ties go by id in the same direction

`parse` turns the parameters into a `RunQuery` (pure: FilterError naming the parameter for a bad
one); `apply` turns a RunQuery into filters, annotations and an order on a Run queryset. The latest
value of each metric is a correlated subquery per metric column (MetricPoint ordered by -step,
served by the (run, name, step) unique index): one query for the whole page, however many runs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import F, OuterRef, Subquery
from django.db.models.fields.json import KeyTransform

from experiments.models import MetricPoint, RunStatus, text_problem
from experiments.run_labels import TAG_NAME

DEFAULT_SORT = "-created"
SORT_FIELDS = {  # sort key -> the Run field it orders by
    "id": "pk",
    "created": "created_at",
    "status": "status",
    "step": "step",
    "experiment": "experiment__name",
    "owner": "experiment__owner__username",
}
METRIC_SORT_PREFIX = "metric:"
MAX_METRIC_COLUMNS = 10
MAX_TAGS = 10
MAX_CONFIG_FILTERS = 10
MAX_CONFIG_DEPTH = 8
ID = re.compile(r"[0-9]{1,18}")  # ids fit a 64-bit integer
MAX_CONFIG_NUMBER = 2**53  # beyond this a number does not survive the databases' JSON intact
METRIC_NAME = re.compile(r"[^\s,\x00-\x1f\x7f]{1,64}")  # MetricPoint.name holds 64; ',' separates names
USERNAME = re.compile(r"[\w.@+-]{1,150}")
CONFIG_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")  # one segment of a dotted config path


class FilterError(ValueError):
    """A query parameter that cannot be used; `parameter` names it, `message` says what would do."""

    def __init__(self, parameter: str, message: str):
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message


@dataclass(frozen=True)
class ConfigFilter:
    path: tuple[str, ...]  # ("grpo", "beta")
    value: Any  # compared as JSON: 0.04 == 0.040, "0.04" is text

    @property
    def text(self) -> str:
        """The parameter value that gives this filter back (`grpo.beta:0.04`)."""
        value = self.value if isinstance(self.value, str) and not _reads_as_json(self.value) else json.dumps(self.value)
        return f"{'.'.join(self.path)}:{value}"


@dataclass(frozen=True)
class RunQuery:
    statuses: tuple[str, ...] = ()
    experiment_id: int | None = None
    owner: str = ""
    tags: tuple[str, ...] = ()
    config: tuple[ConfigFilter, ...] = ()
    metrics: tuple[str, ...] = ()
    sort: str = DEFAULT_SORT

    @property
    def sort_key(self) -> str:
        """The sort without its direction: `created`, `metric:kl`."""
        return self.sort.lstrip("-")

    @property
    def descending(self) -> bool:
        return self.sort.startswith("-")

    @property
    def sort_metric(self) -> str | None:
        key = self.sort_key
        return key[len(METRIC_SORT_PREFIX) :] if key.startswith(METRIC_SORT_PREFIX) else None

    @property
    def metric_columns(self) -> tuple[str, ...]:
        """The metrics to annotate: the chosen columns, plus the sort's metric when it is none of them."""
        extra = self.sort_metric
        return self.metrics + ((extra,) if extra and extra not in self.metrics else ())

    def params(self, **changes: Any) -> list[tuple[str, str]]:
        """This query as (name, value) query parameters, with `changes` (field=value) applied first;
        defaults are left out, so links stay short."""
        query = RunQuery(**{**self.__dict__, **changes})
        pairs: list[tuple[str, str]] = []
        if query.statuses:
            pairs.append(("status", ",".join(query.statuses)))
        if query.experiment_id is not None:
            pairs.append(("experiment", str(query.experiment_id)))
        if query.owner:
            pairs.append(("owner", query.owner))
        if query.tags:
            pairs.append(("tag", ",".join(query.tags)))
        pairs.extend(("config", f.text) for f in query.config)
        if query.metrics:
            pairs.append(("metrics", ",".join(query.metrics)))
        if query.sort != DEFAULT_SORT:
            pairs.append(("sort", query.sort))
        return pairs

    def toggled_sort(self, key: str) -> str:
        """The sort a click on column `key`'s header asks for: the other direction when the table is
        sorted by it already, else descending for created and metrics, ascending for the rest."""
        if self.sort_key == key:
            return key if self.descending else f"-{key}"
        return f"-{key}" if key == "created" or key.startswith(METRIC_SORT_PREFIX) else key


def _reads_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _values(params: Mapping[str, Iterable[str] | str], name: str) -> list[str]:
    """Every comma-separated item of parameter `name` (given once or repeated), stripped, non-empty."""
    raw = params.get(name, ())
    raw = [raw] if isinstance(raw, str) else list(raw)
    return [item.strip() for value in raw for item in value.split(",") if item.strip()]


def _last(params: Mapping[str, Iterable[str] | str], name: str) -> str:
    raw = params.get(name, ())
    raw = [raw] if isinstance(raw, str) else list(raw)
    return raw[-1].strip() if raw else ""


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def parse_config_filter(text: str) -> ConfigFilter:
    """`grpo.beta:0.04` -> ConfigFilter(("grpo", "beta"), 0.04); FilterError("config") otherwise."""
    path_text, colon, value_text = text.partition(":")
    if not colon:
        raise FilterError("config", f"{text!r} is not PATH:VALUE, e.g. grpo.beta:0.04")
    path = tuple(path_text.strip().split("."))
    if len(path) > MAX_CONFIG_DEPTH or not all(CONFIG_KEY.fullmatch(key) for key in path):
        raise FilterError(
            "config",
            f"{path_text!r} is not a dotted config path such as grpo.beta "
            f"(letters, digits, '_' or '-' between dots, at most {MAX_CONFIG_DEPTH} deep)",
        )
    value_text = value_text.strip()
    try:
        value = json.loads(value_text, parse_constant=_no_constants)
    except ValueError:
        value = value_text
    if isinstance(value, (dict, list)):
        raise FilterError(
            "config", f"{text!r}: compare one value (a number, true/false, null or text), not an object or a list"
        )
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not (math.isfinite(value) and abs(value) <= MAX_CONFIG_NUMBER)
    ):
        raise FilterError("config", f"{text!r}: a number between -2**53 and 2**53")
    if isinstance(value, str) and (text_problem(value) or "\x00" in value):
        raise FilterError(
            "config", f"{text[:80]!r}: the value holds characters no config holds (NUL or a lone surrogate)"
        )
    return ConfigFilter(path, value)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def parse(params: Mapping[str, Iterable[str] | str]) -> RunQuery:
    """The RunQuery that query parameters (`dict(request.GET.lists())`, or name -> str) ask for, or
    FilterError naming the first parameter that cannot be used."""
    statuses = _unique(_values(params, "status"))
    unknown = [s for s in statuses if s not in RunStatus.values]
    if unknown:
        raise FilterError("status", f"unknown status {', '.join(unknown)}; statuses are {', '.join(RunStatus.values)}")

    experiment_text = _last(params, "experiment")
    if experiment_text and not ID.fullmatch(experiment_text):
        raise FilterError("experiment", f"must be an experiment's id (a number), got {experiment_text!r}")
    experiment_id = int(experiment_text) if experiment_text else None

    owner = _last(params, "owner")
    if owner and not USERNAME.fullmatch(owner):
        raise FilterError("owner", f"{owner!r} is not a username (letters, digits and @.+-_)")

    tags = _unique(_values(params, "tag"))
    bad = [t for t in tags if not TAG_NAME.fullmatch(t)]
    if bad:
        raise FilterError("tag", f"{bad[0]!r} is not a tag name (1-64 letters, digits or ._-:/)")
    if len(tags) > MAX_TAGS:
        raise FilterError("tag", f"at most {MAX_TAGS} tags, got {len(tags)}")

    config_texts = params.get("config", ())
    config_texts = [config_texts] if isinstance(config_texts, str) else list(config_texts)
    config = tuple(dict.fromkeys(parse_config_filter(t) for t in config_texts if t.strip()))
    if len(config) > MAX_CONFIG_FILTERS:
        raise FilterError("config", f"at most {MAX_CONFIG_FILTERS} config filters, got {len(config)}")

    metrics = _unique(_values(params, "metrics"))
    bad = [m for m in metrics if not METRIC_NAME.fullmatch(m)]
    if bad:
        raise FilterError("metrics", f"{bad[0][:80]!r} is not a metric name (1-64 characters, no spaces)")
    if len(metrics) > MAX_METRIC_COLUMNS:
        raise FilterError("metrics", f"at most {MAX_METRIC_COLUMNS} metric columns, got {len(metrics)}")

    sort = _last(params, "sort") or DEFAULT_SORT
    key = sort[1:] if sort.startswith("-") else sort
    if key.startswith(METRIC_SORT_PREFIX):
        if not METRIC_NAME.fullmatch(key[len(METRIC_SORT_PREFIX) :]):
            raise FilterError("sort", f"{sort[:80]!r}: metric:NAME needs a metric name (1-64 characters, no spaces)")
    elif key not in SORT_FIELDS:
        raise FilterError(
            "sort",
            f"unknown sort {sort[:80]!r}; sort by {', '.join(SORT_FIELDS)} or metric:NAME, "
            "with '-' first for descending",
        )
    return RunQuery(
        statuses=statuses,
        experiment_id=experiment_id,
        owner=owner,
        tags=tags,
        config=config,
        metrics=metrics,
        sort=sort,
    )


def metric_alias(index: int) -> str:
    """The annotation holding the latest value of the query's `index`-th metric column."""
    return f"latest_metric_{index}"


def latest_metric(name: str) -> Subquery:
    """The run's value of metric `name` at its latest step (None without any), for annotate()."""
    points = MetricPoint.objects.filter(run=OuterRef("pk"), name=name).order_by("-step")
    return Subquery(points.values("value")[:1])


def _config_value(path: tuple[str, ...]) -> KeyTransform:
    """The run config's value at `path`, built from KeyTransforms (not a `config__a__b` lookup
    string, so a key named like a lookup, `contains`, stays a key)."""
    expression: Any = "config"
    for key in path:
        expression = KeyTransform(key, expression)
    return expression


def apply(queryset, query: RunQuery):
    """`queryset` (of Runs) filtered, annotated with each metric column (`metric_alias(i)`, in
    `query.metric_columns` order) and ordered as `query` says."""
    if query.statuses:
        queryset = queryset.filter(status__in=query.statuses)
    if query.experiment_id is not None:
        queryset = queryset.filter(experiment_id=query.experiment_id)
    if query.owner:
        queryset = queryset.filter(experiment__owner__username=query.owner)
    for tag in query.tags:  # one join per tag: a run must carry all of them
        queryset = queryset.filter(tags__name=tag)
    for number, config_filter in enumerate(query.config):
        alias = f"config_filter_{number}"
        queryset = queryset.alias(**{alias: _config_value(config_filter.path)}).filter(**{alias: config_filter.value})
    columns = query.metric_columns
    queryset = queryset.annotate(**{metric_alias(i): latest_metric(name) for i, name in enumerate(columns)})
    if query.sort_metric is not None:
        field = F(metric_alias(columns.index(query.sort_metric)))
    else:
        field = F(SORT_FIELDS[query.sort_key])
    if query.descending:
        return queryset.order_by(field.desc(nulls_last=True), "-pk")
    return queryset.order_by(field.asc(nulls_last=True), "pk")


def latest_values(run, query: RunQuery) -> dict[str, float | None]:
    """{metric: latest value} of a run from a queryset that `apply(…, query)` annotated."""
    return {
        name: getattr(run, metric_alias(i), None)
        for i, name in enumerate(query.metric_columns)
        if name in query.metrics
    }

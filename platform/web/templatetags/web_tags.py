"""Small template filters of the web UI (units in the names: seconds, fractions), and `when`, the
one way a page writes a date and time."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils.dateparse import parse_datetime

register = template.Library()

WHEN_FORMAT = "%Y-%m-%d %H:%M:%S UTC"
"""Every date and time on the pages, in UTC: "2026-12-02 07:29:41 UTC" (run_table_format.js's
formatWhen writes the same for the cells the scripts fill)."""


@register.filter
def when(value: dt.datetime | str | None, empty: str = "-") -> str:
    """A datetime (or an ISO 8601 string, as the API's shapes carry) as WHEN_FORMAT, in UTC; None or
    "" -> `empty` ("-" unless given, e.g. |when:"never"); text that is no date, as it is."""
    if value is None or value == "":
        return empty
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            return value
        value = parsed
    if not isinstance(value, dt.datetime):
        return str(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).strftime(WHEN_FORMAT)


@register.filter
def duration_s(seconds: float | None) -> str:
    """3725.2 -> "1h 02m 05s"; None -> "-"."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@register.filter
def percent(fraction: float | None) -> str:
    """0.4567 -> "45.7" (for a CSS width), clamped to [0, 100]."""
    if not fraction:
        return "0"
    return f"{max(0.0, min(1.0, float(fraction))) * 100:.1f}"


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    """mapping[key], or "" when absent (templates cannot index with a variable)."""
    try:
        return mapping[key]
    except (KeyError, IndexError, TypeError):
        return ""


@register.filter
def number(value: Any, digits: int = 4) -> str:
    """A float with `digits` significant digits; other values as they are; None -> "-"."""
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)

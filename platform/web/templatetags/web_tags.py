"""Small template filters of the web UI (units in the names: seconds, fractions)."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


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

"""The one reader of whole numbers from requests: a JSON integer, or a form's or URL's text of ASCII
digits. `str.isdigit` alone is not enough: it accepts "²", "٣" and "①", which `int` then refuses
(or reads as another number), so every view that takes a number from a request comes through here
and answers 400 naming its field instead of failing with a 500."""

from __future__ import annotations

from typing import Any

MAX_DIGITS = 18  # fits a 64-bit database integer


class NotAWholeNumber(ValueError):
    """The value is not a whole number in range; the message says what is expected."""


def whole_number(value: Any, low: int = 0, high: int = 10**MAX_DIGITS - 1, *, default: int | None = None) -> int | None:
    """`value` as an int in [low, high]: an int (not a bool), or text of ASCII digits (a leading '-'
    where `low` is negative; surrounding spaces ignored). None and blank text give `default`.
    NotAWholeNumber for anything else, or a number out of range."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    expected = f"a whole number from {low} to {high}"
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text.startswith("-") and low < 0 else text
        if not (digits.isascii() and digits.isdigit() and len(digits) <= MAX_DIGITS):
            raise NotAWholeNumber(f"{expected}, got {value[:40]!r}")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotAWholeNumber(f"{expected}, got {value!r:.40}")
    if not low <= value <= high:
        raise NotAWholeNumber(f"{expected}, got {value}")
    return value

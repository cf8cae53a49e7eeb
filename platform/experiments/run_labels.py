"""A run's name, tags and notes: checking what a user sends, and storing it.

A name is a short free text (at most MAX_NAME_CHARS, one line, stripped; "" clears it: pages then
show #id, `Run.label`).

Tags are shared words (experiments.models.Tag, one row per name): 1-64 letters, digits or ._-:/,
at most MAX_TAGS_PER_RUN on a run, case kept as given. Notes are free text up to MAX_NOTES_CHARS.
`check_labels` is pure (LabelError {field: message}); `save_labels` writes what it returned.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction

from experiments.models import Run, Tag, text_problem

TAG_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
MAX_TAGS_PER_RUN = 20
MAX_NOTES_CHARS = 10_000
MAX_NAME_CHARS = 120  # Run.name's max_length


class LabelError(ValueError):
    """{field: message} for every problem (fields `name`, `tags`, `notes`)."""

    def __init__(self, errors: dict[str, str]):
        super().__init__(errors)
        self.errors = errors


def split_tags(text: str) -> list[str]:
    """A form field's tags: separated by commas and/or whitespace."""
    return [t for t in re.split(r"[\s,]+", text) if t]


def check_tags(tags: Any) -> list[str]:
    """A list of tag names, duplicates dropped (first kept), or LabelError({"tags": ...})."""
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise LabelError({"tags": "a list of tag names (strings)"})
    bad = [t for t in tags if not TAG_NAME.fullmatch(t)]
    if bad:
        raise LabelError({"tags": f"{bad[0][:80]!r} is not a tag name: 1-64 letters, digits or . _ - : /"})
    names = list(dict.fromkeys(tags))
    if len(names) > MAX_TAGS_PER_RUN:
        raise LabelError({"tags": f"at most {MAX_TAGS_PER_RUN} tags on a run, got {len(names)}"})
    return names


def check_notes(notes: Any) -> str:
    """Notes text ('' for null), or LabelError({"notes": ...})."""
    if notes is None:
        return ""
    if not isinstance(notes, str):
        raise LabelError({"notes": "text (a string)"})
    if len(notes) > MAX_NOTES_CHARS:
        raise LabelError({"notes": f"at most {MAX_NOTES_CHARS} characters, got {len(notes)}"})
    problem = text_problem(notes)
    if problem:
        raise LabelError({"notes": problem})
    return notes


def check_name(name: Any) -> str:
    """A run name, stripped ('' for null: no name), or LabelError({"name": ...})."""
    if name is None:
        return ""
    if not isinstance(name, str):
        raise LabelError({"name": "text (a string)"})
    name = name.strip()
    if len(name) > MAX_NAME_CHARS:
        raise LabelError({"name": f"at most {MAX_NAME_CHARS} characters, got {len(name)}"})
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise LabelError({"name": "one line of text, without control characters"})
    problem = text_problem(name)
    if problem:
        raise LabelError({"name": problem})
    return name


def check_labels(data: dict[str, Any]) -> dict[str, Any]:
    """The `name`, `tags` and/or `notes` of a PATCH body, checked: {"name"?: text, "tags"?: [names],
    "notes"?: text}. Other keys are refused by name (a typo must not pass silently), as is a body
    with none of them."""
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    for key in data:
        if key not in ("name", "tags", "notes"):
            errors[key] = "unknown field; a run's labels are name, tags and notes"
    for key, check in (("name", check_name), ("tags", check_tags), ("notes", check_notes)):
        if key in data:
            try:
                out[key] = check(data[key])
            except LabelError as exc:
                errors.update(exc.errors)
    if not errors and not out:
        errors["tags"] = "give tags (a list of names), notes (text) and/or a name (text)"
    if errors:
        raise LabelError(errors)
    return out


def save_labels(run: Run, labels: dict[str, Any]) -> None:
    """Store checked labels: `name` replaces the run's name, `tags` its tags (creating missing Tag
    rows), `notes` its notes."""
    with transaction.atomic():
        if "name" in labels:
            run.name = labels["name"]
            run.save(update_fields=["name"])
        if "tags" in labels:
            names = labels["tags"]
            Tag.objects.bulk_create([Tag(name=n) for n in names], ignore_conflicts=True)
            run.tags.set(Tag.objects.filter(name__in=names))
        if "notes" in labels:
            run.notes = labels["notes"]
            run.save(update_fields=["notes"])


def tag_names(run: Run) -> list[str]:
    """The run's tag names, sorted (from prefetch_related("tags") when the queryset has it)."""
    return sorted(t.name for t in run.tags.all())

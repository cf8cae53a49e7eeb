"""Server paths as users see them: `shown(text)` rewrites every absolute path under one of the
server's known roots into a short name for that root plus the rest of the path, so run errors,
run events (the run page's log), API error messages and export messages never show where the
platform lives on the server's disk:

    a dataset root (PLATFORM_DATASET_DIRS)    <datasets>/users/3/x.jsonl   (data.train_path is relative to it)
    a model root (PLATFORM_MODELS_DIRS)       <models>/smollm2-135m-instruct   (model.path)
    the data dir (PLATFORM_DATA_DIR)          <data>/runs/run-12/log.txt, <data>/exports/run-12-step-4
    the code (REPO_ROOT)                      <code>/trainers/loop/trainer.py   (tracebacks)
    the Python environment (sys.prefix)       <python>/lib/python3.11/site-packages/jax/...

The most specific root wins (a dataset root inside the data dir is `<datasets>`). Each root is
matched as configured and as its real path (symlinks resolved), only as a whole path: `/srv/data`
is not rewritten inside `/srv/database` or `/x/srv/data`. Paths outside every root are left as they
are. Apply it where text leaves the server (the api/*_views.py, api.endpoint, the web views), not where it
is stored: the stored text stays whole for admins and logs, and old rows are covered too.
"""

from __future__ import annotations

import functools
import os
import re
import sys

from django.conf import settings


def shown(text: str) -> str:
    """`text` with the server's absolute paths rewritten relative to their root (see above)."""
    if not text or "/" not in text:
        return text
    pattern, labels = _matcher(_roots())
    return pattern.sub(lambda m: labels[m.group(0)], text)


def shown_errors(errors: dict) -> dict:
    """{field: message} with `shown` applied to each message (ConfigError.as_dict(), API errors)."""
    return {field: shown(m) if isinstance(m, str) else m for field, m in errors.items()}


def _roots() -> tuple[tuple[str, str], ...]:
    """(label, root) pairs from the settings, as configured."""
    return (
        *(("<datasets>", str(d)) for d in settings.PLATFORM_DATASET_DIRS),
        *(("<models>", str(d)) for d in settings.PLATFORM_MODELS_DIRS),
        ("<data>", str(settings.DATA_DIR)),
        ("<code>", str(settings.REPO_ROOT)),
        ("<python>", sys.prefix),
    )


@functools.lru_cache(maxsize=8)
def _matcher(roots: tuple[tuple[str, str], ...]) -> tuple[re.Pattern, dict[str, str]]:
    """One regex matching any root (longest first, so the most specific wins) as a whole path, and
    {root: label}."""
    labels: dict[str, str] = {}
    for label, root in roots:
        for form in (root, os.path.realpath(root)):
            form = form.rstrip("/")
            if form and form not in labels:  # the first label given for a path wins
                labels[form] = label
    alternatives = "|".join(re.escape(root) for root in sorted(labels, key=len, reverse=True))
    return re.compile(rf"(?<![\w.~/-])(?:{alternatives})(?![\w.~-])"), labels

"""The Tunix side's environment (bench/compare_tunix.py for W1, bench/compare_tunix_real.py for R1):
bench/.tunix-venv from the pinned bench/requirements-tunix.txt. The venv machinery, running a side
and reading its result are bench/venv_harness.py's (shared with bench/compare_trl.py); this module
names the Tunix environment and re-exports the rest, so the Tunix scripts import one module.

  ensure_venv(args)   creates (or reuses) bench/.tunix-venv (venv_harness.ensure_venv with TUNIX).
"""

from __future__ import annotations

from pathlib import Path

from venv_harness import (  # noqa: F401  (re-exported for the Tunix scripts and bench/memory_estimate.py)
    BENCH,
    REPO,
    VenvSpec,
    clean_env,
    cpu_note,
    fmt,
    gib,
    last_json_with,
    loadavg,
    our_python,
    ratios,
    run_and_parse,
    say,
    wait_with_peak_rss,
)
from venv_harness import ensure_venv as _ensure_venv
from venv_harness import find_base_python as _find_base_python

VENV = BENCH / ".tunix-venv"
REQUIREMENTS = BENCH / "requirements-tunix.txt"
# Interpreter versions the pinned set is known to install and run on.
SUPPORTED_PY = ((3, 11), (3, 12))

TUNIX = VenvSpec(
    name="tunix",
    venv=VENV,
    requirements=REQUIREMENTS,
    supported_python=SUPPORTED_PY,
    python_env="TUNIX_PYTHON",
    check=(
        "import tunix, jax, flax; print('tunix', tunix.__version__, 'jax', jax.__version__, 'flax', flax.__version__)"
    ),
)


def find_base_python(explicit: str | None) -> str:
    """An interpreter to build bench/.tunix-venv with (--python / $TUNIX_PYTHON first)."""
    return _find_base_python(explicit, TUNIX)


def ensure_venv(args) -> Path:
    """Creates or reuses bench/.tunix-venv; returns its python."""
    return _ensure_venv(args, TUNIX)

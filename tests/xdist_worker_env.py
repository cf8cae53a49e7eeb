"""Give each pytest-xdist worker its own platform data folder and broker, before Django reads them.

`scripts/test.sh` runs the platform tests in several worker processes (`pytest -n N`). pytest-django
already gives each worker its own test database (test_grpo_gw0, ...). What the settings read from
the environment would otherwise be shared, and the end-to-end tests would trip over each other: the
filesystem broker and run folders under PLATFORM_DATA_DIR, and the Redis database of
CELERY_BROKER_URL, which a test empties before it starts a worker. This plugin (loaded by
`-p tests.xdist_worker_env` in pytest.ini) runs when a worker starts, before pytest-django loads the
settings, and gives worker gwN:
  PLATFORM_DATA_DIR  <the folder given, default ./var/test-data>/gwN
  CELERY_BROKER_URL  a redis:// URL's database number plus N (db 15 -> 15, 14, 13, ...: counting
                     down, so a run of 4 workers from db 15 stays within Redis's 16 databases)
Outside xdist it does nothing. A test that starts a whole platform of its own (`serve`, in
tests/platform/web/test_browser.py) gives it `second_broker(...)`: the Redis database 8 above its
own (mod 16), so up to 8 workers never share one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker_environment(environ: dict[str, str], worker: str) -> dict[str, str]:
    """The variables to change for xdist worker `worker` ("gw0", "gw1", ...); pure."""
    index = int(worker.removeprefix("gw"))
    base = environ.get("PLATFORM_DATA_DIR") or str(ROOT / "var" / "test-data")
    changed = {"PLATFORM_DATA_DIR": str(Path(base) / worker)}
    broker = environ.get("CELERY_BROKER_URL", "")
    match = re.fullmatch(r"(redis://[^/]*)/(\d+)", broker)
    if match:
        database = int(match.group(2)) - index
        if database < 0 or index >= 8:
            raise RuntimeError(f"xdist worker {worker}: no Redis database left below {broker}; use fewer workers")
        changed["CELERY_BROKER_URL"] = f"{match.group(1)}/{database}"
    elif broker:
        raise RuntimeError(f"xdist worker {worker}: cannot give it its own broker from {broker!r} (redis://host/db)")
    return changed


def second_broker(broker: str) -> str:
    """A redis:// URL's database moved by 8 (mod 16): 15 -> 7, 14 -> 6, ...; pure."""
    match = re.fullmatch(r"(redis://[^/]*)/(\d+)", broker)
    if not match:
        raise ValueError(f"not a redis://host/db URL: {broker!r}")
    return f"{match.group(1)}/{(int(match.group(2)) + 8) % 16}"


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    os.environ.update(worker_environment(dict(os.environ), _worker))

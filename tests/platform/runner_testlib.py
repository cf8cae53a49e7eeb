"""Helpers for the runner's tests that start real platform processes (worker, beat, serve)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from platform_testlib import tiny_config

from experiments.models import Experiment, Run

MANAGE_PY = Path(settings.REPO_ROOT) / "manage.py"


def subprocess_env() -> dict[str, str]:
    """The environment of a worker/beat process that talks to this test's database and broker."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PLATFORM_SQLITE_PATH")}
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        env["PLATFORM_SQLITE_PATH"] = str(db["NAME"])
    else:
        auth = quote(db["USER"] or "", safe="") + (f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else "")
        env["DATABASE_URL"] = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env.update(
        PLATFORM_DATA_DIR=str(settings.DATA_DIR),
        PLATFORM_HEARTBEAT_S="0.5",
        PLATFORM_STALE_AFTER_S="5",
        PLATFORM_REAP_EVERY_S="1",
        PYTHONUNBUFFERED="1",
        # the trainer children reuse each other's compiled XLA programs, and the trainer tests'
        # (tests/conftest.py names one folder for the whole run; test speed only)
        JAX_COMPILATION_CACHE_DIR=os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(settings.DATA_DIR / "jax-cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    return env


def empty_artifacts() -> None:
    """Run pks restart with each test database: drop the run folders an earlier test left."""
    shutil.rmtree(settings.ARTIFACTS_DIR, ignore_errors=True)
    settings.ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)


@pytest.fixture
def fresh_artifacts():
    empty_artifacts()


def make_run_with_dir(user, status: str, attempt: int = 1, **fields) -> Run:
    """A run of a new tiny experiment of `user`, with its run folder's name (run-<pk>) set."""
    exp = Experiment.objects.create(owner=user, name="e", config=tiny_config())
    run = Run.objects.create(experiment=exp, config=exp.config, status=status, attempt=attempt, max_steps=6, **fields)
    run.run_dir = f"run-{run.pk}"
    run.save(update_fields=["run_dir"])
    return run


def purge_broker() -> None:
    """Drop every message an earlier test or session left (including Redis's unacked ones)."""
    if settings.CELERY_BROKER_URL.startswith("filesystem"):
        for path in (settings.BROKER_DIR / "queue").glob("*"):
            path.unlink(missing_ok=True)
    else:
        import redis

        redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()


TEST_PROCS_ENV = "PLATFORM_TEST_PROCS"


def processes_marked(marker: str) -> list[int]:
    """The pids of this user's processes whose environment holds TEST_PROCS_ENV=`marker`: every
    descendant of a test's processes, including those in groups of their own (a gang's driver, the
    local Ray's daemons and actors, their trainer children)."""
    needle = f"{TEST_PROCS_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return pids


class Procs:
    """Platform processes started by a test, each in its own process group; all killed at teardown,
    with every process they started (so none writes to the database while it is flushed)."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.marker = f"{os.getpid()}-{time.monotonic_ns()}"

    def start(self, *args: str, env: dict[str, str | None] | None = None) -> subprocess.Popen:
        """Start `manage.py *args`; `env` changes subprocess_env() (a None value removes the variable)."""
        name = f"{args[0]}-{len(self.procs)}"
        log = open(self.log_dir / f"{name}.log", "wb")
        full_env = {**subprocess_env(), TEST_PROCS_ENV: self.marker}
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE_PY), *args],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=settings.REPO_ROOT,
            start_new_session=True,
        )
        log.close()
        self.procs.append((name, proc))
        return proc

    def worker(self) -> subprocess.Popen:
        return self.start("worker", "--loglevel", "INFO")

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL the process's whole group: worker, pool process and trainer child at once."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def output(self, proc: subprocess.Popen) -> str:
        name = next(n for n, p in self.procs if p is proc)
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def logs(self, lines: int = 25) -> str:
        """The last `lines` lines of each process started here, then of each trainer attempt's log under
        the artifacts folder (a run that failed in a child says why only there)."""
        parts = [
            f"--- {name} (last lines) ---\n" + "\n".join(self.output(p).splitlines()[-lines:]) for name, p in self.procs
        ]
        for path in sorted(Path(settings.ARTIFACTS_DIR).glob("*/logs/attempt-*.log")):
            text = path.read_text(errors="replace")
            parts.append(
                f"--- {path.relative_to(settings.ARTIFACTS_DIR)} (last lines) ---\n"
                + "\n".join(text.splitlines()[-lines:])
            )
        return "\n".join(parts)

    def close(self) -> None:
        for _, proc in self.procs:
            self.kill(proc)
        deadline = time.monotonic() + 30
        while (left := [pid for pid in processes_marked(self.marker) if running(pid)]) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)


@contextlib.contextmanager
def platform_procs(log_dir: Path, log_lines: int = 25) -> Iterator[Procs]:
    """Procs for one test, on an empty broker and artifacts folder (run pks restart with each test
    database): killed before the test database is flushed, their last `log_lines` lines printed
    (pytest shows them only when the test failed), the broker emptied again."""
    purge_broker()
    empty_artifacts()
    procs = Procs(log_dir)
    try:
        yield procs
    finally:
        procs.close()
        print(procs.logs(log_lines))
        purge_broker()


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (an orphan's zombie waits for pid 1 to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def alive(pid: int) -> bool:
    """Whether process `pid` exists (a zombie not yet reaped counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(predicate, timeout_s: float, what: str, procs: Procs | None = None, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    detail = f"\n{procs.logs()}" if procs else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{detail}")

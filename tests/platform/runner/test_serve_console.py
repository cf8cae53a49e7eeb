"""`manage.py serve`'s console is quiet: the address, the demo login, one line per worker and
errors; Celery's banners, "No hostname was supplied" and a `django.request` warning per 4xx go to
PLATFORM_DATA_DIR/logs/serve.log (runner/serve_console.py); --verbose shows them too."""

from __future__ import annotations

import io
import signal
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from runner_testlib import Procs, purge_broker, wait_for
from test_runner_serve import free_port

from runner.serve_console import ConsoleFilter, LogFile, log_path, pump

CELERY_BANNER = ".> transport:"  # a line of the banner every Celery worker prints at start


def test_console_filter_lets_errors_and_whole_tracebacks_through():
    lines = [
        "[2026-11-26 10:00:00,000: WARNING/MainProcess] No hostname was supplied. Reverting to default 'localhost'",
        "2026-11-26 10:00:01,000 WARNING django.request: Not Found: /api/runs/99",
        " -------------- celery@host v5.4.0 (opalescent)",
        "[2026-11-26 10:00:02 +0000] [12] [INFO] Booting worker with pid: 12",
        "2026-11-26 10:00:03,000 ERROR django.request: Internal Server Error: /runs/1/",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    boom()",
        "ValueError: boom",
        "[2026-11-26 10:00:04,000: INFO/MainProcess] Task runner.tasks.execute_run succeeded",
        "[2026-11-26 10:00:05,000: CRITICAL/MainProcess] Unrecoverable error",
        "an errors_total counter and ERRORS are not errors",
    ]
    console = ConsoleFilter()
    shown = [line for line in lines if console.shown(line)]
    assert shown == [lines[4], lines[5], lines[6], lines[7], lines[8], lines[10]]


def test_pump_writes_every_line_to_the_log_and_errors_to_the_console(tmp_path):
    log = LogFile(tmp_path / "serve.log")
    said: list[str] = []
    stream = io.BytesIO(b"celery banner\nWARNING django.request: Bad Request\nERROR something broke\n")
    pump("worker 1", stream, log, said.append, verbose=False).join(timeout=5)
    assert said == ["worker 1: ERROR something broke"]
    verbose_said: list[str] = []
    pump("web server", io.BytesIO(b"one\ntwo\n"), log, verbose_said.append, verbose=True).join(timeout=5)
    assert verbose_said == ["web server: one", "web server: two"]
    log.close()
    assert (tmp_path / "serve.log").read_text().splitlines() == [
        "[worker 1] celery banner",
        "[worker 1] WARNING django.request: Bad Request",
        "[worker 1] ERROR something broke",
        "[web server] one",
        "[web server] two",
    ]


def test_log_path_moves_a_long_log_aside(tmp_path, monkeypatch):
    monkeypatch.setattr("runner.serve_console.MAX_LOG_BYTES", 10)
    path = log_path(tmp_path)
    assert path == tmp_path / "logs" / "serve.log"
    path.write_text("more than ten bytes")
    assert log_path(tmp_path) == path and not path.exists()
    assert (tmp_path / "logs" / "serve.log.1").read_text() == "more than ten bytes"


def _get(port: int, path: str) -> int:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verbose", [False, True])
def test_serve_console_is_quiet_and_the_log_file_has_the_details(tmp_path, verbose):
    purge_broker()
    procs = Procs(tmp_path)
    log = settings.DATA_DIR / "logs" / "serve.log"
    start = log.stat().st_size if log.exists() else 0
    port = free_port()
    try:
        proc = procs.start(
            "serve", "--port", str(port), "--workers", "1", "--no-model-demo", *(["--verbose"] if verbose else [])
        )
        wait_for(lambda: proc.poll() is not None or "Press Ctrl-C" in procs.output(proc), 90, "the banner", procs)
        assert proc.poll() is None, procs.logs(60)
        for _ in range(3):  # 4xx answers: a `WARNING django.request` line each, in the web server
            assert _get(port, "/api/runs/987654") == 401
        wait_for(lambda: log.read_bytes()[start:].count(b"django.request") >= 3, 30, "the request warnings", procs)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, procs.logs(60)
    finally:
        procs.close()
        purge_broker()
    console = procs.output(proc)
    logged = log.read_bytes()[start:].decode(errors="replace")
    assert f"http://localhost:{port}/" in console and "demo / " in console
    assert "worker 1 started (pid " in console and f"logs       {log}" in console
    assert "[worker 1]" in logged and CELERY_BANNER in logged and "[web server (gunicorn)]" in logged
    assert logged.count("django.request") >= 3
    noise = (CELERY_BANNER, "No hostname was supplied", "django.request", "superuser privileges")
    if verbose:
        assert CELERY_BANNER in console and console.count("django.request") >= 3
    else:
        assert [n for n in noise if n in console] == []
        assert len(console.strip().splitlines()) < 25, console

"""What `manage.py serve` shows on its console. Its children (web server, workers, scheduler) write
everything to one log file, PLATFORM_DATA_DIR/logs/serve.log, each line tagged with the child's
name; the console gets only their errors (an ERROR or CRITICAL line, and a whole traceback) unless
`--verbose` asks for every line. Celery's banners and warnings, kombu's "No hostname was supplied"
and Django's `WARNING django.request` line for every 4xx answer stay in the file."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

LOG_NAME = "serve.log"
MAX_LOG_BYTES = 50 * 1024 * 1024  # a longer log is moved to serve.log.1 when serve starts
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL|FATAL)\b")
TRACEBACK_START = "Traceback (most recent call last):"


def log_path(data_dir: Path) -> Path:
    """The log file under the data directory (its folder created; a log over MAX_LOG_BYTES is moved
    aside to serve.log.1, replacing the one before)."""
    path = data_dir / "logs" / LOG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size > MAX_LOG_BYTES:
        path.replace(path.with_name(LOG_NAME + ".1"))
    return path


class ConsoleFilter:
    """Says line by line whether a child's output line is an error for the console: a line with
    ERROR, CRITICAL or FATAL as a word, and a traceback from its first line through its indented
    lines to the exception line that ends it. One filter per child (a traceback spans lines)."""

    def __init__(self) -> None:
        self.in_traceback = False

    def shown(self, line: str) -> bool:
        if self.in_traceback:
            if line[:1] in (" ", "\t"):
                return True
            self.in_traceback = False  # the exception line ends the traceback
            return bool(line.strip())
        if line.lstrip().startswith(TRACEBACK_START):
            self.in_traceback = True
            return True
        return bool(ERROR_LINE.search(line))


class LogFile:
    """The log file, shared by the children's reader threads (one line written at a time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8", errors="replace", buffering=1)
        self._lock = threading.Lock()

    def write(self, name: str, line: str) -> None:
        with self._lock:
            self._file.write(f"[{name}] {line}\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


def pump(name: str, stream: IO[bytes], log: LogFile, say: Callable[[str], None], verbose: bool) -> threading.Thread:
    """Start a daemon thread copying `stream` (a child's stdout and stderr) line by line to `log`,
    and to `say` (the console) what ConsoleFilter lets through, or every line when `verbose`."""
    console = ConsoleFilter()

    def run() -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                try:
                    log.write(name, line)
                except ValueError:  # the log was closed: serve is exiting
                    pass
                if verbose or console.shown(line):
                    say(f"{name}: {line}")

    thread = threading.Thread(target=run, name=f"serve-log-{name}", daemon=True)
    thread.start()
    return thread


def quiet_own_logging(log: LogFile) -> None:
    """serve's own log records (migrations, the demo account, the broker client) go to the log
    file; its console handlers keep only errors."""

    class _ToLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                for line in self.format(record).splitlines():
                    log.write("serve", line)
            except ValueError:
                pass

    handler = _ToLog()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in root.handlers:
        existing.setLevel(logging.ERROR)
    root.addHandler(handler)

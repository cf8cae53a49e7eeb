"""`manage.py serve` on the test database: migrations, the demo account, then web server, worker and
scheduler as children; Ctrl-C stops all of it (exit 0); a child dying stops all of it (exit 1)."""

from __future__ import annotations

import os
import signal
import socket
import urllib.error
import urllib.request

import pytest
from django.conf import settings
from runner_testlib import Procs, alive, purge_broker, wait_for

from experiments.models import Experiment
from runner.models import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http_status(port: int) -> int | None:
    try:
        return urllib.request.build_opener(_NoRedirect).open(f"http://127.0.0.1:{port}/", timeout=2).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture
def procs(transactional_db, tmp_path):
    purge_broker()
    p = Procs(tmp_path)
    yield p
    for _, proc in p.procs:  # Ctrl-C first: serve stops its children (they live in their own groups)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for worker in Worker.objects.all():
        if worker.pid and alive(worker.pid):
            os.kill(worker.pid, signal.SIGKILL)
    p.close()
    print(p.logs(60))  # shown by pytest only when the test failed
    purge_broker()


def start_serve(procs: Procs) -> tuple:
    port = free_port()
    proc = procs.start("serve", "--port", str(port), "--workers", "1", "--no-model-demo")
    wait_for(lambda: proc.poll() is not None or "Press Ctrl-C" in procs.output(proc), 90, "the banner", procs)
    assert proc.poll() is None, procs.logs(60)
    return proc, port


def test_serve_runs_everything_and_ctrl_c_stops_it(procs):
    proc, port = start_serve(procs)
    banner = procs.output(proc)
    password = (settings.DATA_DIR / "demo_password").read_text().strip()
    assert f"http://localhost:{port}/" in banner and f"demo / {password}" in banner
    assert Experiment.objects.filter(owner__username="demo", name="demo: arithmetic").exists()
    # --no-model-demo (what tests and CI pass): no download, no SmolLM2 experiment
    assert "fetching" not in banner
    assert not Experiment.objects.filter(owner__username="demo", name="demo: SmolLM2 arithmetic").exists()
    assert http_status(port) == 302  # the web server answers (log in first)
    (worker,) = Worker.objects.all()  # the banner waits for the worker to register
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, procs.logs(60)
    assert not alive(worker.pid)
    assert http_status(port) is None
    assert not Worker.objects.exists()  # deregistered on shutdown


def test_serve_stops_everything_when_a_child_dies(procs):
    proc, port = start_serve(procs)
    (worker,) = Worker.objects.all()
    os.kill(worker.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == 1, procs.logs(60)
    assert "worker 1 exited unexpectedly" in procs.output(proc)
    wait_for(lambda: http_status(port) is None, 10, "the web server to stop")

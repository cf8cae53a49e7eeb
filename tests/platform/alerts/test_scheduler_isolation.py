"""The scheduler cannot be stalled: a webhook delivery has a total deadline (a receiver
that answers one byte at a time is cut off, not waited on per read), and the scheduler runs every
periodic job but the reaper in a thread of its own, one run per job at a time, so a slow job never
delays the reaper."""

from __future__ import annotations

import socket
import threading
import types

import pytest

from alerts import url_guard, webhook
from runner import beat, recovery

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"


class DripReceiver:
    """Reads the request, then answers one byte every 0.1 s (the whole answer takes 6.6 s), after
    the first `at_once` bytes sent together."""

    def __init__(self, at_once: int = 0):
        self.at_once = at_once
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent = 0
        self.cut_off = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)
            stop = threading.Event()
            conn.sendall(ANSWER[: self.at_once])
            self.sent = self.at_once
            for byte in ANSWER[self.at_once :]:
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    self.cut_off = True
                    return
                self.sent += 1
                stop.wait(0.1)


@pytest.mark.parametrize("at_once", [0, len(b"HTTP/1.1 200 OK\r\n")], ids=["drip", "status-line-at-once"])
def test_a_webhook_that_answers_a_byte_at_a_time_is_cut_off_at_the_deadline(settings, monkeypatch, at_once):
    """Cut off mid-answer, the delivery fails as timed out, also when the status line came whole
    and the cut fell in the headers (its end of file must not pass for their end: a 200)."""
    monkeypatch.setattr(url_guard, "resolve", lambda host, port: ["127.0.0.1"])
    settings.PLATFORM_ALERT_WEBHOOK_ALLOW = ["127.0.0.1"]
    receiver = DripReceiver(at_once)
    with pytest.raises(webhook.DeliveryError) as failed:
        webhook.post(f"http://hooks.test:{receiver.port}/services/secret", "run failed", 1.0)
    assert "timed out" in str(failed.value) and "secret" not in str(failed.value)
    receiver.thread.join(timeout=30)
    assert receiver.cut_off and receiver.sent < len(ANSWER)  # the answer was never waited for in full
    receiver.listener.close()


slow_started: list[int] = []
slow_release = threading.Event()


def slow_job() -> None:
    slow_started.append(1)
    slow_release.wait(60)


def test_a_slow_periodic_job_runs_in_its_own_thread_and_never_delays_the_reaper(settings, monkeypatch):
    settings.PLATFORM_PERIODIC_JOBS = {"slow": (f"{__name__}.slow_job", 1.0)}
    reaped: list[int] = []
    monkeypatch.setattr(recovery, "reap_stale_runs", lambda: reaped.append(1))
    slow_started.clear()
    slow_release.clear()
    scheduler = types.SimpleNamespace()

    def apply(name: str, task: str) -> None:
        beat.InProcessScheduler.apply_entry(scheduler, types.SimpleNamespace(name=name, task=task))

    def ticks():
        apply("slow", beat.JOB_TASK)  # blocks until released, but in a thread of its own
        apply("reap-stale-runs", beat.REAP_TASK)
        apply("slow", beat.JOB_TASK)  # the previous run still going: skipped

    caller = threading.Thread(target=ticks, daemon=True)
    caller.start()
    caller.join(timeout=30)
    try:
        assert not caller.is_alive(), "the scheduler's thread waited for the slow job"
        assert reaped == [1]  # the reaper ran in the scheduler's own thread, at once
        assert slow_started == [1]  # one run of the slow job at a time
    finally:
        slow_release.set()
    beat._running["slow"].join(timeout=30)
    apply("slow", beat.JOB_TASK)  # done: the next tick starts it again
    beat._running["slow"].join(timeout=30)
    assert slow_started == [1, 1]

"""A local webhook receiver for the alert tests: an HTTP server thread on 127.0.0.1 that records each
POST's JSON body (the `webhook_receiver` fixture; 127.0.0.1 is put in PLATFORM_ALERT_WEBHOOK_ALLOW)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    def __init__(self):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.status = 200
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T01/B02/s3cr3t-token-value"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                receiver.headers.append(dict(self.headers))
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        return Handler

    def texts(self) -> list[str]:
        return [body["text"] for body in self.bodies]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook/secret-part-of-the-url"


@pytest.fixture
def webhook_receiver(settings):
    settings.PLATFORM_ALERT_WEBHOOK_ALLOW = ["127.0.0.1"]
    receiver = Receiver()
    yield receiver
    receiver.close()

"""An https webhook connects to the address the URL guard checked while still verifying the
certificate for the URL's host name: a local TLS receiver with a self-signed certificate for
hooks.test (made by the openssl command) gets the POST; the same server named other.test is refused
by the certificate check, with the error recorded."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from alerts import url_guard, webhook


@pytest.fixture
def tls_receiver(tmp_path, settings, monkeypatch):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=hooks.test",
            "-addext",
            "subjectAltName=DNS:hooks.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # both names resolve to the receiver; only hooks.test is on its certificate
    monkeypatch.setattr(url_guard, "resolve", lambda host, port: ["127.0.0.1"])
    default_context = ssl.create_default_context
    monkeypatch.setattr(webhook.ssl, "create_default_context", lambda: default_context(cafile=str(cert)))
    settings.PLATFORM_ALERT_WEBHOOK_ALLOW = ["127.0.0.1"]
    yield server.server_address[1], bodies
    server.shutdown()
    server.server_close()


def test_https_is_pinned_to_the_checked_address_and_verified_for_the_host(tls_receiver):
    port, bodies = tls_receiver
    assert webhook.post(f"https://hooks.test:{port}/services/secret", "run failed", 5) == 204
    assert bodies == [{"text": "run failed"}]
    with pytest.raises(webhook.DeliveryError) as refused:
        webhook.post(f"https://other.test:{port}/services/secret", "run failed", 5)
    assert "could not reach the webhook (https://other.test:" in str(refused.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value) and "secret" not in str(refused.value)
    assert len(bodies) == 1

"""Send one webhook: POST {"text": message} (Slack-compatible JSON) within a total deadline.

`timeout_s` bounds the whole delivery, every address tried, connect + TLS + send + read together,
not each read: a receiver that answers one byte every few seconds is cut off at the deadline (a
watchdog shuts the socket down, which ends a blocked read at once), so a delivery never holds its
caller (the scheduler's alerts job) longer than `timeout_s` plus a moment.

The URL is checked by `url_guard.checked_addresses` right before the request, and the connection
goes to the address that was checked (for https the certificate is still verified against the host
name), so the guard cannot be bypassed by DNS rebinding; redirects are not followed (a 3xx is an
error). Raises `DeliveryError` with a short message for people on any failure.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

from alerts import url_guard

USER_AGENT = "grpo-platform-alerts/1"
RESPONSE_PREVIEW_CHARS = 200


class DeliveryError(Exception):
    """A notification could not be delivered; the message is recorded on the delivery."""


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.raw_sock = self.sock


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.raw_sock = sock  # the watchdog can cut a slow handshake too
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _Deadline:
    """Shuts `connection`'s socket down when `at` (monotonic) comes, ending any blocked connect,
    handshake, send or read; `expired` says whether it did."""

    def __init__(self, connection: http.client.HTTPConnection, at: float):
        self.connection = connection
        self.expired = False
        self.timer = threading.Timer(max(0.0, at - time.monotonic()), self._cut)
        self.timer.daemon = True
        self.timer.start()

    def _cut(self) -> None:
        self.expired = True
        sock = getattr(self.connection, "raw_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self.timer.cancel()


def post(url: str, message: str, timeout_s: float, *, resolver: url_guard.Resolver | None = None) -> int:
    """POST {"text": message} to `url`; returns the HTTP status (2xx), else DeliveryError. The
    whole request (every address tried) must end within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        addresses = url_guard.checked_addresses(url, resolver=resolver)
    except url_guard.UrlRefused as exc:
        raise DeliveryError(f"refused: {exc}") from None
    split = urlsplit(url)
    scheme, host, port = url_guard.parts(url)
    path = (split.path or "/") + (f"?{split.query}" if split.query else "")
    body = json.dumps({"text": message}).encode()
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Content-Length": str(len(body))}
    connection_class = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
    last_error: Exception | None = None
    for address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            last_error = TimeoutError()
            break
        connection = connection_class(host, address, port, remaining)
        watchdog = _Deadline(connection, deadline)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            reply = response.read(RESPONSE_PREVIEW_CHARS).decode("utf-8", "replace")
            if watchdog.expired:
                # the cut's end of file can end the headers early and look like a whole answer
                raise TimeoutError()
        except (OSError, http.client.HTTPException, ValueError) as exc:
            last_error = TimeoutError() if watchdog.expired else exc
            continue
        finally:
            watchdog.cancel()
            connection.close()
        if 200 <= response.status < 300:
            return response.status
        raise DeliveryError(f"the webhook answered HTTP {response.status}: {reply.strip()[:RESPONSE_PREVIEW_CHARS]}")
    raise DeliveryError(f"could not reach the webhook ({url_guard.masked(url)}): {_describe(last_error)}")


def _describe(exc: Exception | None) -> str:
    if isinstance(exc, socket.timeout) or isinstance(exc, TimeoutError):
        return "timed out (no complete answer within the delivery's deadline)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return f"{type(exc).__name__}: {exc}" if exc else "no address"

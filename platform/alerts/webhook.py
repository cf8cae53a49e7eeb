"""Send one webhook: POST {"text": message} (Slack-compatible JSON) with a short timeout.

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


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(url: str, message: str, timeout_s: float, *, resolver: url_guard.Resolver | None = None) -> int:
    """POST {"text": message} to `url`; returns the HTTP status (2xx), else DeliveryError."""
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
        connection = connection_class(host, address, port, timeout_s)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            reply = response.read(RESPONSE_PREVIEW_CHARS).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            last_error = exc
            continue
        finally:
            connection.close()
        if 200 <= response.status < 300:
            return response.status
        raise DeliveryError(f"the webhook answered HTTP {response.status}: {reply.strip()[:RESPONSE_PREVIEW_CHARS]}")
    raise DeliveryError(f"could not reach the webhook ({url_guard.masked(url)}): {_describe(last_error)}")


def _describe(exc: Exception | None) -> str:
    if isinstance(exc, socket.timeout) or isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return f"{type(exc).__name__}: {exc}" if exc else "no address"

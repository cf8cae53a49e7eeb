"""The HTTP side: one `Api` object that sends JSON requests with the token and turns any failure
(an HTTP error status, an unreachable server, a body that is not JSON) into `ApiError` with a
message for people."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, BinaryIO

DEFAULT_SERVER = "http://127.0.0.1:8000"
TIMEOUT_S = 60.0
ERROR_TEXT_CHARS = 300  # of a non-JSON error body, shown in the message
COPY_CHUNK_BYTES = 1 << 20


class ApiError(Exception):
    """A request that did not succeed; `status` is the HTTP status (None when none came back)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def error_message(status: int, body: bytes) -> str:
    """`HTTP 400: name: required; config: ...` from the API's {"error"} / {"errors": {field: message}}."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict):
        text = body.decode("utf-8", "replace").strip().replace("\n", " ")[:ERROR_TEXT_CHARS]
        return f"HTTP {status}: {text or 'no message'}"
    parts = []
    if isinstance(data.get("error"), str):
        parts.append(data["error"])
    errors = data.get("errors")
    if isinstance(errors, dict):
        parts += [f"{field}: {' '.join(m) if isinstance(m, list) else m}" for field, m in errors.items()]
    return f"HTTP {status}: {'; '.join(parts) or 'no message'}"


class Api:
    """The API at `server` (e.g. http://127.0.0.1:8000), authenticated with `token`."""

    def __init__(self, server: str, token: str):
        self.server = server.rstrip("/")
        self.token = token

    @classmethod
    def from_environment(cls, environ=os.environ) -> Api:
        """GRPO_SERVER (default http://127.0.0.1:8000) and GRPO_TOKEN."""
        return cls(environ.get("GRPO_SERVER") or DEFAULT_SERVER, environ.get("GRPO_TOKEN", ""))

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        """`path` under /api/, with `query` (None values left out, lists repeated)."""
        url = f"{self.server}/api/{path.lstrip('/')}"
        pairs = [(k, v) for k, v in (query or {}).items() if v is not None]
        if pairs:
            url += "?" + urllib.parse.urlencode(pairs, doseq=True)
        return url

    def get(self, path: str, query: dict[str, Any] | None = None) -> Any:
        return json.loads(self._open("GET", self.url(path, query)).read())

    def send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """POST/PUT/PATCH `body` as JSON; the answer's JSON."""
        data = json.dumps(body or {}).encode("utf-8")
        return json.loads(self._open(method, self.url(path), data).read())

    def stream(self, path: str, query: dict[str, Any] | None = None):
        """The open response of a GET, to read as it arrives (JSON lines, a file)."""
        return self._open("GET", self.url(path, query))

    def download(self, path: str, out: BinaryIO) -> int:
        """Copy a GET's body into `out`; the number of bytes."""
        with self._open("GET", self.url(path)) as response:
            shutil.copyfileobj(response, out, COPY_CHUNK_BYTES)
        return out.tell()

    def _open(self, method: str, url: str, data: bytes | None = None):
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            message = error_message(exc.code, exc.read())
            if exc.code == 401 and not self.token:
                message += " (set GRPO_TOKEN to a key from the API tokens page)"
            raise ApiError(message, exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(f"cannot reach {self.server} ({reason}); is GRPO_SERVER right?") from None

"""`Refused`: why a request was not done, with the HTTP status that says so and, when one input is
at fault, the field to name. Each app's refusals (a launch over the owner's limits, an upload, an
export, a download, an evaluation) are subclasses, and the API answers every one alike."""

from __future__ import annotations


class Refused(Exception):
    """`status`: 400 bad input, 403 not allowed, 404 not found, 409 conflict, 429 over a limit, ...;
    `message`: what to tell the user; `field`: the request field at fault ("" for none)."""

    def __init__(self, status: int, message: str, field: str = ""):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

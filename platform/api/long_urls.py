"""A JSON 414 for over-long /api/ URLs, like every other API error.

The web server (gunicorn, started by `manage.py serve`) reads request lines up to its maximum,
8190 bytes (`--limit-request-line 8190`; its default is 4094), and answers longer ones itself, before
Django sees them, with its own HTML 414 — no server setting can change that page, and an unlimited
request line would let one request hold any amount of memory. Below that, this middleware answers
/api/ URLs (path and query) longer than API_MAX_URL_CHARS with the API's `{"error"}` 414, well
inside gunicorn's limit, so clients of the API get JSON for any URL up to about 8 KB. Other pages
are served as before up to gunicorn's limit.
"""

from __future__ import annotations

from api.endpoint import error

API_MAX_URL_CHARS = 4096  # path and query; gunicorn's request line maximum is 8190 bytes
API_PREFIX = "/api/"


def too_long_message(chars: int) -> str | None:
    """The 414 message for an API URL of `chars` characters, or None when it is short enough."""
    if chars <= API_MAX_URL_CHARS:
        return None
    return (
        f"the URL is {chars} characters long; the API takes at most {API_MAX_URL_CHARS} "
        "(send long input in a POST body, or fewer query parameters)"
    )


class ApiUrlLengthMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info.startswith(API_PREFIX):
            message = too_long_message(len(request.get_full_path()))
            if message:
                return error(414, message)
        return self.get_response(request)

"""The caller's account over the API (what the page /account/ shows, runner.account):

    GET  account    your storage use by kind, your quota and your limits
"""

from __future__ import annotations

from api import account_shapes as shapes
from api.contract import Op, operations
from api.endpoint import api_endpoint
from runner import account as accounts


@operations(GET=Op(responses={200: shapes.Account}))
@api_endpoint("GET")
def account(request):
    """GET: {"username", "storage": {"datasets_bytes", "checkpoints_bytes", "exports_bytes",
    "used_bytes", "quota_bytes", "over_quota"}, "limits": {"max_active_runs", "max_queued_runs",
    "max_sequences_per_step", "max_tokens_per_step", "storage_quota_bytes"}: each {"value", "source":
    "yours" | "default"}, "runs": {"active", "queued"}}. Over the quota, dataset uploads answer 413
    and exports, launches, resumes, retries and forks 429 (runner.storage)."""
    return accounts.account_summary(request.user)

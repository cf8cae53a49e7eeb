"""The caller's account over the API (what the page /account/ shows, runner.account):

GET  account    your storage use by kind, your quota and your limits
"""

from __future__ import annotations

from api import account_shapes as shapes
from api.contract import Op, operations
from api.endpoint import api_endpoint
from evaluations.services import usage_for as evaluation_usage
from runner import account as accounts


@operations(GET=Op(responses={200: shapes.Account}))
@api_endpoint("GET")
def account(request):
    """GET: {"username", "storage": {"datasets_bytes", "checkpoints_bytes", "exports_bytes",
    "used_bytes", "quota_bytes", "over_quota"}, "limits": {"max_active_runs", "max_queued_runs",
    "max_sequences_per_step", "max_tokens_per_step", "storage_quota_bytes", "max_hosts_per_run",
    "max_devices_per_run", "max_evaluation_jobs", "max_evaluation_tokens"}: each {"value", "source":
    "yours" | "default"}, "runs": {"active", "queued"}, "evaluations": {"jobs", "tokens"} (queued or
    running). Over the quota, dataset uploads answer 413
    and exports, launches, resumes, retries and forks 429 (runner.storage)."""
    return shapes.Account.model_validate(
        {**accounts.account_summary(request.user), "evaluations": evaluation_usage(request.user).as_json()}
    )

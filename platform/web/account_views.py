"""The account page (/account/): the user's storage use by kind against their quota and their
limits, as GET /api/account answers them (runner.account)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from evaluations.services import usage_for as evaluation_usage
from runner import account as accounts
from runner.storage import format_bytes

STORAGE_ROWS = (
    ("datasets_bytes", "Datasets", "your uploads"),
    ("checkpoints_bytes", "Checkpoints", "your runs' directories: checkpoints, logs, run files"),
    ("exports_bytes", "Exports", "your runs' Hugging Face exports"),
)
LIMIT_ROWS = (
    ("max_active_runs", "Active runs", "runs a worker holds at once"),
    ("max_queued_runs", "Queued runs", "runs waiting on the queue at once"),
    ("max_sequences_per_step", "Sequences per step", "prompts per step x G"),
    ("max_tokens_per_step", "Tokens per step", "sequences x (prompt + completion tokens)"),
    ("max_active_sweeps", "Active sweeps", "sweeps running at once"),
    ("storage_quota_bytes", "Storage quota", "datasets, checkpoints and exports together"),
    ("max_hosts_per_run", "Hosts per run", "cluster.hosts"),
    ("max_devices_per_run", "Devices per run", "cluster.hosts x cluster.devices_per_host"),
    ("max_evaluation_jobs", "Evaluation jobs", "queued or running at once"),
    ("max_evaluation_tokens", "Evaluation tokens", "prompts x k x max_new_tokens of those jobs together"),
)


@login_required
@require_GET
def account(request):
    summary = {**accounts.account_summary(request.user), "evaluations": evaluation_usage(request.user).as_json()}
    storage, limits = summary["storage"], summary["limits"]
    context = {
        "summary": summary,
        "storage_rows": [
            (key, label, note, storage[key], format_bytes(storage[key])) for key, label, note in STORAGE_ROWS
        ],
        "used_text": format_bytes(storage["used_bytes"]),
        "quota_text": format_bytes(storage["quota_bytes"]),
        "used_percent": min(100, round(100 * storage["used_bytes"] / storage["quota_bytes"]))
        if storage["quota_bytes"]
        else 100,
        "limit_rows": [
            (
                key,
                label,
                note,
                limits[key]["value"],
                format_bytes(limits[key]["value"]) if key.endswith("_bytes") else f"{limits[key]['value']:,}",
                limits[key]["source"],
            )
            for key, label, note in LIMIT_ROWS
        ],
    }
    return render(request, "web/account.html", context)

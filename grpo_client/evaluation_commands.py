"""The `evaluate`, `evaluations` (list, cancel) and `leaderboard` commands, through /api/evaluations (cli.py adds
them to its parser with `add_parsers`)."""

from __future__ import annotations

import sys
import time

from grpo_client import formatting
from grpo_client.api import Api, ApiError

WAIT_INTERVAL_S = 2.0
FINISHED = ("succeeded", "failed", "cancelled")
JOB_HEADERS = ["ID", "POLICY", "DATASET", "STATUS", "ACCURACY", "PASS@K", "K", "REWARD", "CREATED"]


def _row(job: dict) -> list:
    return [
        str(job["id"]),
        job["policy"],
        job["dataset_label"],
        job["status"],
        job["accuracy"],
        job["pass_at_k"],
        str(job["k"]),
        job["reward_mean"],
        job["created_at"][:19].replace("T", " "),
    ]


def evaluate(api: Api, args) -> int:
    """Queue a job (its id to stdout); with --wait, follow its progress on stderr and print its results."""
    if (args.run is None) == (args.model is None) or (args.run is not None and args.step is None):
        raise ApiError("give RUN with --step N, or --model FOLDER")
    body = {
        "run": args.run,
        "step": args.step,
        "model": args.model,
        "dataset": args.dataset,
        "k": args.k,
        "prompts": args.prompts,
        "max_new_tokens": args.max_new_tokens,
    }
    job = api.send("POST", "evaluations", {k: v for k, v in body.items() if v is not None})
    print(job["id"])
    if not args.wait:
        return 0
    while job["status"] not in FINISHED:
        time.sleep(WAIT_INTERVAL_S)
        job = api.get(f"evaluations/{job['id']}")
        print(
            f"evaluation {job['id']}: {job['status']} {job['progress_done']}/{job['progress_total'] or '?'} prompts",
            file=sys.stderr,
        )
    if job["status"] != "succeeded":
        raise ApiError(f"evaluation {job['id']} {job['status']}: {job['error']}")
    print(formatting.table(JOB_HEADERS, [_row(job)]))
    return 0


def listing(api: Api, args) -> int:
    jobs = api.get("evaluations", {"run": args.run, "status": args.status, "limit": args.limit})["evaluations"]
    print(formatting.table(JOB_HEADERS, [_row(j) for j in jobs]))
    return 0


def cancel(api: Api, args) -> int:
    """Cancel a queued or running job (a running one's evaluation process stops)."""
    job = api.send("POST", f"evaluations/{args.id}/cancel")
    print(f"evaluation {job['id']}: {job['status']}")
    return 0


def leaderboard(api: Api, args) -> int:
    """A dataset's leaderboard, best first; without DATASET the datasets that have one."""
    board = api.get("evaluations/leaderboard", {"dataset": args.dataset})
    if not args.dataset:
        print(
            formatting.table(
                ["DATASET", "LABEL", "JOBS"], [[b["key"], b["label"], str(b["jobs"])] for b in board["boards"]]
            )
        )
        return 0
    # one board per (prompts, k): RANK restarts for each, PROMPTS and K say what a row measured
    print(
        formatting.table(
            ["RANK", "POLICY", "ACCURACY", "PASS@K", "K", "REWARD", "JOB", "PROMPTS"],
            [
                [
                    str(j.get("rank", i)),
                    j["policy"],
                    j["accuracy"],
                    j["pass_at_k"],
                    str(j["k"]),
                    j["reward_mean"],
                    str(j["id"]),
                    str(j["prompts"] or "all"),
                ]
                for i, j in enumerate(board["rows"], 1)
            ],
        )
    )
    return 0


def add_parsers(commands) -> None:
    """`evaluate`, `evaluations list` and `leaderboard` under the top-level subparsers `commands`."""
    command = commands.add_parser("evaluate", help="evaluate a checkpoint (or a model folder) on a dataset")
    command.add_argument("run", type=int, nargs="?", metavar="RUN", help="the checkpoint's run (with --step)")
    command.add_argument("--step", type=int, help="the checkpoint's step")
    command.add_argument("--model", help="a model folder as GET /api/models lists it, instead of RUN")
    command.add_argument(
        "--dataset",
        required=True,
        help="task:NAME (a built-in task's held-out prompts), dataset:ID (an uploaded dataset) "
        "or run_eval (the run's eval set)",
    )
    command.add_argument("--k", type=int, help="samples per prompt for pass@k (default 4; 1 = greedy only)")
    command.add_argument("--prompts", type=int, help="prompts to score (default 64; 0 = all)")
    command.add_argument("--max-new-tokens", type=int, help="completion budget (default the run's)")
    command.add_argument("--wait", action="store_true", help="follow its progress and print its results")
    command.set_defaults(handler=evaluate)

    evaluations = commands.add_parser("evaluations", help="evaluation jobs: list, cancel")
    sub = evaluations.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    command = sub.add_parser("list", help="your evaluation jobs, newest first")
    command.add_argument("--run", type=int, help="only this run's checkpoints")
    command.add_argument("--status", choices=("queued", "running", *FINISHED))
    command.add_argument("--limit", type=int, default=50)
    command.set_defaults(handler=listing)
    command = sub.add_parser("cancel", help="cancel a queued or running job")
    command.add_argument("id", type=int, metavar="ID")
    command.set_defaults(handler=cancel)

    command = commands.add_parser("leaderboard", help="a dataset's leaderboard, best first")
    command.add_argument(
        "dataset", nargs="?", metavar="DATASET", help="e.g. task:arithmetic (default: list the datasets that have one)"
    )
    command.set_defaults(handler=leaderboard)

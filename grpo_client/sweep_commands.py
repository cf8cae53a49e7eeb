"""The `sweep` commands: create | list | show | cancel, through /api/experiments/<id>/sweeps and
/api/sweeps (cli.py adds them to its parser with `add_parsers`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grpo_client import formatting
from grpo_client.api import Api, ApiError

SAMPLERS = ("grid", "random", "tpe")
PRUNERS = ("none", "median", "successive_halving", "hyperband")
STATUSES = ("running", "finished", "cancelled", "failed")


def read_space(text: str) -> dict:
    """The space from JSON text, or from a file given as @FILE."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ApiError(f"cannot read {text[1:]}: {exc.strerror or exc}") from None
    try:
        space = json.loads(text)
    except ValueError as exc:
        raise ApiError(f"--space is not JSON: {exc}") from None
    return space


def params_text(params: dict) -> str:
    return " ".join(f"{name}={formatting.number(value)}" for name, value in sorted(params.items()))


def create(api: Api, args) -> int:
    """Start a sweep of an experiment; its id goes to stdout, its first trials to stderr."""
    body = {
        "name": args.name,
        "space": read_space(args.space),
        "metric": args.metric,
        "direction": args.direction,
        "max_trials": args.trials,
        "max_concurrent_trials": args.concurrent,
        "sampler": args.sampler,
        "pruner": args.pruner,
        "seed": args.seed,
    }
    for field in ("pruner_startup_trials", "pruner_warmup_steps"):
        if getattr(args, field) is not None:
            body[field] = getattr(args, field)
    sweep = api.send("POST", f"experiments/{args.experiment}/sweeps", body)
    print(
        f"sweep {sweep['id']} {sweep['status']}: {sweep['trial_count']} of {sweep['max_trials']} trials started",
        file=sys.stderr,
    )
    print(sweep["id"])
    return 0


def listing(api: Api, args) -> int:
    path = f"experiments/{args.experiment}/sweeps" if args.experiment else "sweeps"
    data = api.get(path, {"status": args.status, "limit": args.limit})
    print(
        formatting.table(
            ["ID", "NAME", "EXPERIMENT", "STATUS", "TRIALS", "METRIC", "BEST"],
            [
                [
                    str(s["id"]),
                    s["name"],
                    s["experiment"],
                    s["status"],
                    f"{s['trial_count']}/{s['max_trials']}",
                    f"{s['metric']} ({s['direction']})",
                    s["best"]["value"] if s["best"] else None,
                ]
                for s in data["sweeps"]
            ],
        )
    )
    return 0


def show(api: Api, args) -> int:
    s = api.get(f"sweeps/{args.sweep}")
    print(
        f"sweep {s['id']} {s['name']} of {s['experiment']}: {s['status']}, {s['sampler']} sampler, "
        f"{s['pruner']} pruner, {s['metric']} ({s['direction']}), {s['trial_count']}/{s['max_trials']} trials"
    )
    if s["note"]:
        print(f"note: {s['note']}")
    print(
        formatting.table(
            ["#", "RUN", "STATUS", "VALUE", "STEP", "PARAMS"],
            [
                [
                    str(t["number"]),
                    t["run_label"] or "-",
                    t["status"],
                    t["value"],
                    t["value_step"],
                    params_text(t["params"]) + (f"  ({t['error']})" if t["error"] else ""),
                ]
                for t in s["trials"]
            ],
        )
    )
    return 0


def cancel(api: Api, args) -> int:
    done = api.send("POST", f"sweeps/{args.sweep}/cancel")
    print(f"sweep {done['id']}: {done['status']}")
    return 0


def add_parsers(commands) -> None:
    """`sweep create|list|show|cancel` under the top-level subparsers `commands`."""
    sweep = commands.add_parser("sweep", help="sweeps: create, list, show, cancel")
    sub = sweep.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

    command = sub.add_parser("create", help="search config fields of an experiment; prints the sweep's id")
    command.add_argument("experiment", type=int, metavar="EXPERIMENT", help="the experiment's id")
    command.add_argument("--name", required=True, help="the sweep's name (also its trial runs' tag)")
    command.add_argument(
        "--space",
        required=True,
        metavar="JSON|@FILE",
        help='the search space, e.g. \'{"optimizer.learning_rate": {"type": "float", "low": 1e-5, '
        '"high": 1e-3, "log": true}}\' (or @space.json)',
    )
    command.add_argument("--metric", required=True, help="the metric to optimise, e.g. reward/mean")
    command.add_argument("--direction", choices=("maximize", "minimize"), default="maximize")
    command.add_argument("--trials", type=int, required=True, help="how many trials in all")
    command.add_argument("--concurrent", type=int, default=2, help="how many train at once (default 2)")
    command.add_argument("--sampler", choices=SAMPLERS, default="tpe")
    command.add_argument("--pruner", choices=PRUNERS, default="none")
    command.add_argument("--seed", type=int, default=0)
    command.add_argument(
        "--pruner-startup-trials",
        dest="pruner_startup_trials",
        type=int,
        help="median: trials that complete before any is pruned (default 2)",
    )
    command.add_argument(
        "--pruner-warmup-steps",
        dest="pruner_warmup_steps",
        type=int,
        help="steps before a trial may be pruned (default 1)",
    )
    command.set_defaults(handler=create)

    command = sub.add_parser("list", help="the sweeps you may see, newest first")
    command.add_argument("--experiment", type=int, help="only this experiment's sweeps (its id)")
    command.add_argument("--status", choices=STATUSES)
    command.add_argument("--limit", type=int, default=100)
    command.set_defaults(handler=listing)

    command = sub.add_parser("show", help="a sweep and its trials")
    command.add_argument("sweep", type=int, metavar="SWEEP", help="the sweep's id")
    command.set_defaults(handler=show)

    command = sub.add_parser("cancel", help="cancel a sweep and its active trials")
    command.add_argument("sweep", type=int, metavar="SWEEP", help="the sweep's id")
    command.set_defaults(handler=cancel)

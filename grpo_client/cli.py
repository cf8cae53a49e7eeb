"""The commands: argparse in, one API call (or a few) per command, text out. `main(argv)` returns
the exit code: 0 done, 1 the API refused or could not be reached (one line on stderr), 2 usage."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from grpo_client import alert_commands, evaluation_commands, formatting, sweep_commands
from grpo_client.api import Api, ApiError

ENDED_STATUSES = ("succeeded", "failed", "cancelled", "pruned")
RUN_STATUSES = ("queued", "running", "pausing", "paused", "cancelling", *ENDED_STATUSES)
ACTIONS = ("pause", "resume", "cancel", "retry")
WATCH_INTERVAL_S = 2.0


def experiments_list(api: Api, args) -> int:
    data = api.get("experiments", {"limit": args.limit})
    print(
        formatting.table(
            ["ID", "NAME", "OWNER", "VERSION", "RUNS", "UPDATED"],
            [
                [str(e["id"]), e["name"], e["owner"], e["version"], e["run_count"], e["updated_at"][:19]]
                for e in data["experiments"]
            ],
        )
    )
    return 0


def runs_list(api: Api, args) -> int:
    data = api.get("runs", {"status": args.status, "experiment": args.experiment, "limit": args.limit})
    print(
        formatting.table(
            ["ID", "EXPERIMENT", "STATUS", "STEP", "REWARD", "CREATED"],
            [
                [
                    str(r["id"]),
                    r["experiment"]["name"],
                    r["status"],
                    f"{r['step']}/{r['max_steps'] or '?'}",
                    r["latest_reward"],
                    r["created_at"][:19],
                ]
                for r in data["runs"]
            ],
        )
    )
    return 0


def launch(api: Api, args) -> int:
    """Create an experiment from the YAML with the --set overrides applied to it by the server before
    it validates the config (so an override can repair it), in one request: a refused config or
    override creates nothing. With --experiment NAME|ID, that experiment's config becomes the YAML
    instead (a new version only if it changed; a NAME no experiment has is created). Then launch a run; the run's id
    goes to stdout, the rest to stderr. A refused launch (too many runs, a queue) keeps the experiment, a valid config
    worth keeping, and the error says so and where to launch it from once that is fixed."""
    path = Path(args.config)
    try:
        config_yaml = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ApiError(f"cannot read {path}: {exc.strerror or exc}") from None
    body = {"config_yaml": config_yaml, "overrides": args.set}
    reused = find_experiment(api, args.experiment) if args.experiment else None
    if reused is not None:  # the YAML becomes its config (a new version only when it changed)
        experiment_id = reused
        updated = api.send("PATCH", f"experiments/{experiment_id}", body)
        print(f"experiment {experiment_id} ({updated['name']}): config version {updated['version']}", file=sys.stderr)
    else:
        created = api.send("POST", "experiments", {"name": args.experiment or args.name or path.stem, **body})
        experiment_id = created["id"]
    try:
        launched = api.send(
            "POST", f"experiments/{experiment_id}/runs", {"queue": args.queue, "max_restarts": args.max_restarts}
        )
    except ApiError as exc:
        raise ApiError(
            f"experiment {experiment_id} was created, but no run was launched ({exc}); launch it "
            f"from {api.server}/experiments/{experiment_id}/ once that is fixed",
            exc.status,
        ) from None
    print(
        f"experiment {experiment_id}: run {launched['id']} {launched['status']} on queue {launched['queue']}",
        file=sys.stderr,
    )
    if launched.get("warning"):
        print(f"warning: {launched['warning']}", file=sys.stderr)
    print(launched["id"])
    return 0


def find_experiment(api: Api, reference: str) -> int | None:
    """The id of the experiment `reference` names: an id, or the name of the one experiment of that
    name you may see (None: none has it, so launch creates it; ApiError when several do)."""
    if reference.isascii() and reference.isdigit():
        return int(api.get(f"experiments/{reference}")["id"])
    found = api.get("experiments", {"name": reference, "limit": 20})["experiments"]
    if len(found) > 1:
        listed = ", ".join(f"{e['id']} (owner {e['owner']})" for e in found)
        raise ApiError(f"{len(found)} experiments are named {reference!r}: {listed}; give --experiment ID")
    return int(found[0]["id"]) if found else None


def watch(api: Api, args, sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll the run and its new metric points; print a line per step; stop when the run has ended
    (exit 0 if it succeeded, 1 otherwise)."""
    after_step, status = -1, None
    while True:
        run = api.get(f"runs/{args.run}")  # the status first: metrics read after it hold all it had
        series = api.get(f"runs/{args.run}/metrics", {"after_step": after_step})["series"]
        for step, values in formatting.points_by_step(series).items():
            print(formatting.metric_line(step, values, args.metric), flush=True)
            after_step = max(after_step, step)
        if run["status"] != status:
            status = run["status"]
            print(
                f"run {args.run}: {status} (step {run['step']}/{run['max_steps'] or '?'})", file=sys.stderr, flush=True
            )
        if status in ENDED_STATUSES:
            if status != "succeeded":
                print(f"run {args.run} {status}" + (f": {run['error']}" if run.get("error") else ""), file=sys.stderr)
            return 0 if status == "succeeded" else 1
        sleep(args.interval)


def action(api: Api, args) -> int:
    done = api.send("POST", f"runs/{args.run}/{args.command}")
    print(f"run {done['id']}: {done['status']}")
    return 0


def samples(api: Api, args) -> int:
    """One step's samples for people (default: the newest step), or with --jsonl every sample (of
    --step, if given) as JSON lines from the export endpoint."""
    if args.jsonl:
        with api.stream(f"runs/{args.run}/samples.jsonl", {"step": args.step}) as response:
            for line in response:
                sys.stdout.write(line.decode("utf-8"))
        return 0
    data = api.get(f"runs/{args.run}/samples", {"step": args.step})
    if data["step"] is None:
        print(f"run {args.run} has no samples yet", file=sys.stderr)
        return 0
    print(
        f"step {data['step']} ({len(data['samples'])} samples; steps with samples: "
        f"{', '.join(map(str, data['steps'][:10]))}{' ...' if len(data['steps']) > 10 else ''})"
    )
    for sample in data["samples"]:
        print(formatting.sample_block(sample))
    return 0


def download(api: Api, args) -> int:
    """The checkpoint as a zipped Hugging Face folder; written to a temporary name, then renamed,
    so a failed download leaves no half file at --out."""
    out = Path(args.out)
    partial = out.with_name(out.name + ".part")
    try:
        with open(partial, "wb") as handle:
            size_bytes = api.download(f"runs/{args.run}/checkpoints/{args.step}/hf.zip", handle)
        os.replace(partial, out)
    except OSError as exc:
        raise ApiError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    print(f"wrote {out} ({size_bytes} bytes)")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m grpo_client",
        description="The GRPO platform from the command line, through its HTTP API. "
        "Server: $GRPO_SERVER (default http://127.0.0.1:8000); token: $GRPO_TOKEN.",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    experiments = commands.add_parser("experiments", help="experiments: list")
    sub = experiments.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="the experiments you may see, newest first")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.set_defaults(handler=experiments_list)

    runs = commands.add_parser("runs", help="runs: list")
    sub = runs.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="the runs you may see, newest first")
    listing.add_argument("--status", action="append", choices=RUN_STATUSES, help="only these (repeatable)")
    listing.add_argument("--experiment", type=int, help="only this experiment's runs (its id)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.set_defaults(handler=runs_list)

    command = commands.add_parser("launch", help="create an experiment from a YAML config and launch a run")
    command.add_argument("config", metavar="CONFIG.yaml", help="the experiment config (trainers.config)")
    named = command.add_mutually_exclusive_group()
    named.add_argument("--name", help="a new experiment's name (default: the file's name without .yaml)")
    named.add_argument(
        "--experiment",
        metavar="NAME|ID",
        help="launch in this experiment instead of a new one: its config becomes the YAML (a new "
        "version only if it changed); a NAME no experiment has yet is created",
    )
    command.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        default=[],
        help="override a config field before it is validated, e.g. train.max_steps=50 "
        "(the value read as YAML; repeatable)",
    )
    command.add_argument("--queue", help="the queue to run on (default: the platform's)")
    command.add_argument("--max-restarts", type=int, help="automatic restarts after a crash")
    command.set_defaults(handler=launch)

    command = commands.add_parser("watch", help="print a run's metrics live, one line per step, until it ends")
    command.add_argument("run", type=int, metavar="RUN", help="the run's id")
    command.add_argument("--metric", action="append", help="only these metrics (repeatable; default all)")
    command.add_argument("--interval", type=float, default=WATCH_INTERVAL_S, help="seconds between polls")
    command.set_defaults(handler=watch)

    for name in ACTIONS:
        command = commands.add_parser(name, help=f"{name} a run")
        command.add_argument("run", type=int, metavar="RUN", help="the run's id")
        command.set_defaults(handler=action)

    command = commands.add_parser("samples", help="a run's rollout samples")
    command.add_argument("run", type=int, metavar="RUN", help="the run's id")
    command.add_argument("--step", type=int, help="this step's (default: the newest step with samples)")
    command.add_argument(
        "--jsonl", action="store_true", help="every sample (of --step if given) as JSON lines, for scripts"
    )
    command.set_defaults(handler=samples)

    command = commands.add_parser("download", help="download a checkpoint as a zipped Hugging Face folder")
    command.add_argument("run", type=int, metavar="RUN", help="the run's id")
    command.add_argument("--step", type=int, required=True, help="the checkpoint's step")
    command.add_argument("--out", required=True, metavar="FILE.zip", help="where to write the zip")
    command.set_defaults(handler=download)

    sweep_commands.add_parsers(commands)
    alert_commands.add_parsers(commands)
    evaluation_commands.add_parsers(commands)
    return top


def main(argv: list[str] | None = None, api: Api | None = None) -> int:
    args = parser().parse_args(argv)  # exits 2 on a usage error
    try:
        return args.handler(api or Api.from_environment(), args)
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head
        return 0

"""The `alerts` commands: list | add | enable | disable | delete | log, through /api/alerts (cli.py
adds them to its parser with `add_parsers`)."""

from __future__ import annotations

from grpo_client import formatting
from grpo_client.api import Api, ApiError

EVENTS = ("failed", "succeeded", "pruned", "stalled", "metric")
COMPARISONS = (">", ">=", "<", "<=", "~")
DELIVERY_STATUSES = ("pending", "sent", "written", "failed", "rate_limited")


def listing(api: Api, args) -> int:
    rules = api.get("alerts")["rules"]
    print(
        formatting.table(
            ["ID", "NAME", "EXPERIMENT", "EVENTS", "CHANNEL", "TARGET", "EVERY_S", "ENABLED"],
            [
                [
                    str(r["id"]),
                    r["name"] or "-",
                    str(r["experiment"]) if r["experiment"] else "all",
                    _events(r),
                    r["channel"],
                    r["target"],
                    r["min_interval_s"],
                    "yes" if r["enabled"] else "no",
                ]
                for r in rules
            ],
        )
    )
    return 0


def _events(rule: dict) -> str:
    events = [e for e in rule["events"] if e != "metric"]
    if "metric" in rule["events"]:
        condition = f"{rule['metric_name']}{rule['comparison']}{formatting.number(rule['threshold'])}"
        steps = rule.get("for_steps", 1)
        events.append(condition if steps == 1 else f"{condition}:{steps}steps")
    return ",".join(events)


def add(api: Api, args) -> int:
    """Create a rule; its id goes to stdout (the webhook URL is shown masked from now on)."""
    if bool(args.webhook) == bool(args.email):
        raise ApiError("give one of --webhook URL or --email ADDRESS")
    body = {
        "events": args.event,
        "channel": "webhook" if args.webhook else "email",
        "target": args.webhook or args.email,
        "experiment": args.experiment,
        "name": args.name or "",
        "min_interval_s": args.min_interval,
    }
    if args.metric:
        body.update(metric_name=args.metric, comparison=args.when, threshold=args.threshold, for_steps=args.for_steps)
        if "metric" not in body["events"]:
            body["events"] = [*body["events"], "metric"]
    rule = api.send("POST", "alerts", {k: v for k, v in body.items() if v is not None})
    print(rule["id"])
    return 0


def toggle(api: Api, args) -> int:
    rule = api.send("PATCH", f"alerts/{args.rule}", {"enabled": args.subcommand == "enable"})
    print(f"alert {rule['id']}: {'enabled' if rule['enabled'] else 'disabled'}")
    return 0


def delete(api: Api, args) -> int:
    api._open("DELETE", api.url(f"alerts/{args.rule}")).close()
    print(f"alert {args.rule}: deleted")
    return 0


def log(api: Api, args) -> int:
    deliveries = api.get("alerts/deliveries", {"rule": args.rule, "status": args.status, "limit": args.limit})
    print(
        formatting.table(
            ["ID", "WHEN", "RULE", "RUN", "EVENT", "STATUS", "TRIES", "ERROR"],
            [
                [
                    str(d["id"]),
                    d["created_at"][:19].replace("T", " "),
                    str(d["rule"]),
                    str(d["run"]) if d["run"] else "-",
                    d["event"],
                    d["status"],
                    str(d["attempts"]),
                    d["error"] or "-",
                ]
                for d in deliveries["deliveries"]
            ],
        )
    )
    return 0


def add_parsers(commands) -> None:
    """`alerts list|add|enable|disable|delete|log` under the top-level subparsers `commands`."""
    alerts = commands.add_parser("alerts", help="alert rules: list, add, enable, disable, delete, log")
    sub = alerts.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

    command = sub.add_parser("list", help="your alert rules (webhook URLs masked)")
    command.set_defaults(handler=listing)

    command = sub.add_parser("add", help="notify by webhook or e-mail; prints the rule's id")
    command.add_argument(
        "--event",
        action="append",
        choices=EVENTS,
        default=[],
        help="failed, succeeded, pruned, stalled (no heartbeat) or metric; repeat for several",
    )
    command.add_argument("--webhook", metavar="URL", help="POST {\"text\": ...} here (Slack-compatible)")
    command.add_argument("--email", metavar="ADDRESS", help="or send an e-mail here")
    command.add_argument("--experiment", type=int, help="only this experiment's runs (default: all yours)")
    command.add_argument("--metric", help="with --when and --threshold: notify when it crosses (adds --event metric)")
    command.add_argument(
        "--when", choices=COMPARISONS, help="the comparison, e.g. '<'; '~': stuck, varies by at most --threshold"
    )
    command.add_argument("--threshold", type=float)
    command.add_argument(
        "--for-steps",
        type=int,
        metavar="N",
        help="the condition must hold at each of the run's newest N points (1; '~' needs 2 or more)",
    )
    command.add_argument("--min-interval", type=float, metavar="S", help="at most one notification per S seconds (60)")
    command.add_argument("--name")
    command.set_defaults(handler=add)

    for name in ("enable", "disable"):
        command = sub.add_parser(name, help=f"{name} a rule")
        command.add_argument("rule", type=int, metavar="RULE", help="the rule's id")
        command.set_defaults(handler=toggle)

    command = sub.add_parser("delete", help="delete a rule and its delivery log")
    command.add_argument("rule", type=int, metavar="RULE", help="the rule's id")
    command.set_defaults(handler=delete)

    command = sub.add_parser("log", help="the delivery log, newest first, with each error")
    command.add_argument("--rule", type=int, help="only this rule's deliveries")
    command.add_argument("--status", choices=DELIVERY_STATUSES)
    command.add_argument("--limit", type=int, default=50)
    command.set_defaults(handler=log)

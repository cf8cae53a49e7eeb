"""Sum the test command's per-test CPU seconds (tests/cpu_accounting.py) by test file.

    .venv/bin/python -m tests.cpu_report [var/test-logs] [--top N] [--tests]

prints, per lane, its CPU seconds, then the test files (or with --tests the tests) that took the
most CPU across the lanes, with their share of the total: where a cut would shorten the command.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path


def read_lane(path: Path) -> list[tuple[float, float, str]]:
    """(cpu_s, wall_s, nodeid) per line of one lane's file."""
    rows = []
    for line in path.read_text().splitlines():
        cpu_s, wall_s, nodeid = line.split("\t", 2)
        rows.append((float(cpu_s), float(wall_s), nodeid))
    return rows


def by_key(rows: list[tuple[float, float, str]], whole_tests: bool) -> dict[str, list[float]]:
    """key (test file, or the test without its parameters) -> [cpu_s, wall_s, tests]."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for cpu_s, wall_s, nodeid in rows:
        key = nodeid.split("[")[0] if whole_tests else nodeid.split("::")[0]
        total = totals[key]
        total[0] += cpu_s
        total[1] += wall_s
        total[2] += 1
    return totals


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="?", default="var/test-logs", help="the folder of cpu-<lane>.tsv files")
    parser.add_argument("--top", type=int, default=25, help="how many files or tests to list (25)")
    parser.add_argument("--tests", action="store_true", help="list tests (parameters summed), not files")
    args = parser.parse_args(argv)
    lanes = sorted(Path(args.logs).glob("cpu-*.tsv"))
    if not lanes:
        raise SystemExit(f"no cpu-*.tsv in {args.logs}: run scripts/test.sh first")
    everything: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    grand_cpu_s = 0.0
    for lane in lanes:
        rows = read_lane(lane)
        lane_cpu_s = sum(row[0] for row in rows)
        grand_cpu_s += lane_cpu_s
        print(f"{lane.stem.removeprefix('cpu-'):<20} {lane_cpu_s:8.0f} CPU-s  {len(rows)} tests")
        for key, (cpu_s, wall_s, count) in by_key(rows, args.tests).items():
            total = everything[key]
            total[0] += cpu_s
            total[1] += wall_s
            total[2] += count
    print(f"{'all lanes':<20} {grand_cpu_s:8.0f} CPU-s\n")
    print(f"{'CPU-s':>8} {'share':>6} {'wall-s':>8} {'tests':>5}  {'test' if args.tests else 'file'}")
    ranked = sorted(everything.items(), key=lambda item: -item[1][0])
    for key, (cpu_s, wall_s, count) in ranked[: args.top]:
        print(f"{cpu_s:8.0f} {cpu_s / grand_cpu_s:6.1%} {wall_s:8.0f} {count:5d}  {key}")


if __name__ == "__main__":
    main()

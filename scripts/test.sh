#!/usr/bin/env bash
# First the linter and the formatter (ruff, configured in pyproject.toml): a finding fails the command
# before any test runs. Then the whole test suite, in two lanes that run side by side (separate pytest
# processes):
#  trainers: tests/ without tests/platform;
#  platform: tests/platform on the production path, PostgreSQL and Redis (local services), then
#            tests/platform again on the embedded default, SQLite and the filesystem broker.
# The platform's tests spend much of their time waiting on the worker, beat and trainer processes
# they start, so on a 2-core machine the two lanes end in about half the time of one process
# running everything. Two platform runs never overlap: they would share local ports (Ray's, the
# served platform's). Each output line carries its lane's name; var/test-logs/ keeps each run's
# whole log. A missing service is an error, not a skip. Extra arguments go to every pytest run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LOGS="$PWD/var/test-logs"
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log  # the summary below must not show an earlier invocation's result

# run_logged NAME CMD...: CMD's output, each line prefixed with [NAME], also kept in var/test-logs/NAME.log
run_logged() {
  local name=$1
  shift
  set +e
  "$@" 2>&1 | tee "$LOGS/$name.log" | sed -u "s/^/[$name] /"
  local status=${PIPESTATUS[0]}
  set -e
  echo "[$name] exit status $status"
  return "$status"
}

platform_lane() {
  local status=0
  echo "== tests: platform on PostgreSQL + Redis"
  DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/grpo}" \
  CELERY_BROKER_URL="${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}" \
  PLATFORM_DATA_DIR="${PLATFORM_DATA_DIR:-$PWD/var/test-production}" \
    run_logged platform-postgres "$PY" -m pytest -q tests/platform "$@" || status=1
  echo "== tests: platform on the embedded default (SQLite + filesystem broker)"
  (unset DATABASE_URL CELERY_BROKER_URL
   PLATFORM_DATA_DIR="$PWD/var/test-embedded" run_logged platform-sqlite "$PY" -m pytest -q tests/platform "$@") ||
    status=1
  return "$status"
}

echo "== lint: ruff check and ruff format --check (pyproject.toml)"
.venv/bin/ruff check --quiet . || { echo "lint: fix the findings above (many: .venv/bin/ruff check --fix .)"; exit 1; }
.venv/bin/ruff format --check --quiet . ||
  { echo "lint: files above are not formatted; run .venv/bin/ruff format ."; exit 1; }

echo "== tests: trainers and platform side by side (whole logs in var/test-logs/)"
run_logged trainers "$PY" -m pytest -q tests --ignore=tests/platform "$@" &
trainers_pid=$!
platform_lane "$@" &
platform_pid=$!
failed=0
wait "$trainers_pid" || failed=1
wait "$platform_pid" || failed=1

echo "== tests: summary"
for name in trainers platform-postgres platform-sqlite; do
  echo "$name: $(tail -n 1 "$LOGS/$name.log" 2>/dev/null || echo 'did not run')"
done
exit "$failed"

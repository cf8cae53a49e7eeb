#!/usr/bin/env bash
# First the linter and the formatter (ruff, configured in pyproject.toml): a finding fails the command
# before any test runs. Then the whole test suite, in four lanes that run side by side (separate
# pytest processes):
#  trainers:          tests/ without tests/platform, in 4 pytest-xdist worker processes; a worker
#                     takes a whole test file at a time, except the few files whose tests are shared
#                     out one by one (tests/conftest.py SPLIT_FILES), longest files first; compiled
#                     with XLA's older, faster-compiling CPU loop emitters (TEST_CODEGEN=fast,
#                     tests/conftest.py), without the tests marked production_codegen;
#  trainers-production-codegen: those few tests (they compare two differently built programs bit
#                     for bit), under XLA's own emitters, in one process;
#  platform-postgres: tests/platform on the production path, PostgreSQL and Redis (local services),
#                     in 3 workers; each has its own test database, data folder and Redis database
#                     (tests/xdist_worker_env.py);
#  platform-sqlite:   the platform tests marked both_databases (tests/platform/conftest.py lists the
#                     files and why) again on the embedded default, SQLite and the filesystem broker,
#                     in 2 workers.
# The platform lanes compile with the older emitters too (the trainers their tests start inherit XLA_FLAGS).
# A platform worker takes a whole test file at a time (--dist loadfile: a file's fixtures are set up once).
# TEST_WORKERS_TRAINERS, TEST_WORKERS_POSTGRES and TEST_WORKERS_SQLITE change the counts.
# The platform's tests spend most of their time waiting on the worker, beat and trainer processes
# they start, and the trainer's tests on XLA compiling (tests/conftest.py: a shared compilation
# cache in var/test-jax-cache, LLVM optimisation off), so on a 2-core machine the lanes together
# take about as long as the longest. Each output line carries its lane's name; var/test-logs/ keeps
# each lane's whole log and each test's CPU seconds (`.venv/bin/python -m tests.cpu_report` sums them
# by file). A missing service is an error, not a skip. Extra arguments go to every
# pytest run (e.g. -m "not slow" for a quick pass).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# Bytecode caches on, whatever the environment says: a dozen pytest processes each collect their lane's
# whole tree (test modules rewritten for assertions, about 15 CPU-s for the tree uncached) and the tests
# start some 300 Python processes; with the caches a module is compiled once in the run.
unset PYTHONDONTWRITEBYTECODE
LOGS="$PWD/var/test-logs"
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log "$LOGS"/cpu-*.tsv  # the summary below must not show an earlier invocation's result

# run_logged NAME CMD...: CMD's output, each line prefixed with [NAME], also kept in var/test-logs/NAME.log;
# each test's CPU seconds go to var/test-logs/cpu-NAME.tsv (tests/cpu_accounting.py)
run_logged() {
  local name=$1
  shift
  set +e
  TEST_CPU_LOG="$LOGS/cpu-$name.tsv" "$@" 2>&1 | tee "$LOGS/$name.log" | sed -u "s/^/[$name] /"
  local status=${PIPESTATUS[0]}
  set -e
  echo "[$name] exit status $status"
  return "$status"
}

echo "== lint: ruff check and ruff format --check (pyproject.toml)"
.venv/bin/ruff check --quiet . || { echo "lint: fix the findings above (many: .venv/bin/ruff check --fix .)"; exit 1; }
.venv/bin/ruff format --check --quiet . ||
  { echo "lint: files above are not formatted; run .venv/bin/ruff format ."; exit 1; }

echo "== tests: trainers, trainers-production-codegen, platform on PostgreSQL + Redis, platform on SQLite side by side (logs in var/test-logs/)"
TEST_CODEGEN=fast run_logged trainers "$PY" -m pytest -q tests --ignore=tests/platform \
  -n "${TEST_WORKERS_TRAINERS:-4}" --dist loadfile --no-loadscope-reorder "$@" &
trainers_pid=$!
TEST_CODEGEN=production run_logged trainers-production-codegen "$PY" -m pytest -q tests --ignore=tests/platform "$@" &
production_codegen_pid=$!
TEST_CODEGEN=fast \
DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/grpo}" \
CELERY_BROKER_URL="${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}" \
PLATFORM_DATA_DIR="${PLATFORM_DATA_DIR:-$PWD/var/test-production}" \
  run_logged platform-postgres "$PY" -m pytest -q tests/platform -n "${TEST_WORKERS_POSTGRES:-3}" --dist loadfile "$@" &
postgres_pid=$!
(unset DATABASE_URL CELERY_BROKER_URL
 TEST_CODEGEN=fast PLATFORM_DATA_DIR="$PWD/var/test-embedded" run_logged platform-sqlite "$PY" -m pytest -q tests/platform \
   -m both_databases -n "${TEST_WORKERS_SQLITE:-2}" --dist loadfile "$@") &
sqlite_pid=$!
failed=0
wait "$trainers_pid" || failed=1
wait "$production_codegen_pid" || failed=1
wait "$postgres_pid" || failed=1
wait "$sqlite_pid" || failed=1

echo "== tests: summary"
for name in trainers trainers-production-codegen platform-postgres platform-sqlite; do
  echo "$name: $(tail -n 1 "$LOGS/$name.log" 2>/dev/null || echo 'did not run')"
done
exit "$failed"

#!/usr/bin/env bash
# The whole test suite, twice over the platform's back ends:
#  1. everything, with the platform on the production path: PostgreSQL and Redis (local services);
#  2. the platform tests again on the embedded default: SQLite and the filesystem broker.
# A missing service is an error, not a skip. Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
echo "== tests: trainers + platform on PostgreSQL + Redis"
DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/grpo}" \
CELERY_BROKER_URL="${TEST_CELERY_BROKER_URL:-redis://127.0.0.1:6379/15}" \
PLATFORM_DATA_DIR="${PLATFORM_DATA_DIR:-$PWD/var/test-production}" \
  "$PY" -m pytest -q tests "$@"
echo "== tests: platform on the embedded default (SQLite + filesystem broker)"
env -u DATABASE_URL -u CELERY_BROKER_URL \
PLATFORM_DATA_DIR="$PWD/var/test-embedded" \
  "$PY" -m pytest -q tests/platform "$@"

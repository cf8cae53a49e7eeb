"""Trigram indexes for the rollout browser's text search, on PostgreSQL only (pg_trgm, a trusted
extension: a database owner may create it). Where the extension cannot be created the migration
still succeeds and the search keeps its bounded scan (experiments.sample_query). SQLite: nothing."""

import logging

from django.db import migrations

log = logging.getLogger(__name__)

TABLE = "experiments_rolloutsample"
# The expressions Django's `icontains` compares on PostgreSQL: UPPER(column::text) LIKE UPPER(%s).
INDEXES = {"sample_prompt_trgm": "prompt", "sample_completion_trgm": "completion"}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SAVEPOINT trgm")
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        except Exception as exc:  # noqa: BLE001 - no rights: the search keeps its bounded scan
            cursor.execute("ROLLBACK TO SAVEPOINT trgm")
            log.warning("pg_trgm is not available (%s): rollout text search stays a bounded scan", exc)
            return
        cursor.execute("RELEASE SAVEPOINT trgm")
        for name, column in INDEXES.items():
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {TABLE} USING gin ((UPPER({column}::text)) gin_trgm_ops)")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for name in INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("experiments", "0009_series_snapshots")]
    operations = [migrations.RunPython(create, drop)]

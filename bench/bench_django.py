"""Django for the platform benchmarks: settings pointed at a scratch database of the bench's own
(SQLite under `scratch_dir`, or a PostgreSQL database created if missing), migrated."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_django(backend: str, database_url: str, scratch_dir: str) -> None:
    """Point the settings at the scratch database (creating it on PostgreSQL) and migrate."""
    for path in (os.path.join(ROOT, "platform"), ROOT):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ["DJANGO_SETTINGS_MODULE"] = "grpo_platform.settings"
    os.environ.setdefault("PLATFORM_LOG_LEVEL", "WARNING")
    os.makedirs(scratch_dir, exist_ok=True)
    if backend == "postgresql":
        create_postgres_database(database_url)
        os.environ["DATABASE_URL"] = database_url
        os.environ.setdefault("PLATFORM_DATA_DIR", os.path.join(scratch_dir, "pg-data"))
    else:
        os.environ.pop("DATABASE_URL", None)
        os.environ["PLATFORM_DATA_DIR"] = os.path.join(scratch_dir, "sqlite-data")
        os.environ["PLATFORM_SQLITE_PATH"] = os.path.join(scratch_dir, "bench.sqlite3")
    import warnings

    import django
    from django.core.management import call_command

    warnings.filterwarnings("ignore", message="No directory at")  # whitenoise: no collected static files
    django.setup()
    call_command("migrate", verbosity=0)


def create_postgres_database(url: str) -> None:
    import dj_database_url
    import psycopg

    cfg = dj_database_url.parse(url)
    params = {
        "host": cfg["HOST"] or None,
        "port": cfg["PORT"] or None,
        "user": cfg["USER"] or None,
        "password": cfg["PASSWORD"] or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (cfg["NAME"],)).fetchone():
            conn.execute(f'CREATE DATABASE "{cfg["NAME"]}"')

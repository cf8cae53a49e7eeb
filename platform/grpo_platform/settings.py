"""Django settings, all from the environment.

Embedded default (nothing to run but this project): SQLite and a Celery broker kept in files, both
under PLATFORM_DATA_DIR (default ./var). Production: DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL
(Redis or RabbitMQ). See the README's "Running in production".
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import dj_database_url

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_DIR = REPO_ROOT

DATA_DIR = Path(os.environ.get("PLATFORM_DATA_DIR", REPO_ROOT / "var")).resolve()
ARTIFACTS_DIR = DATA_DIR / "runs"          # run directories: checkpoints and run files
BROKER_DIR = DATA_DIR / "broker"           # the embedded (filesystem) Celery broker
STATIC_ROOT_DIR = DATA_DIR / "static"
# Where experiments' data files (data.train_path, data.eval_path) may lie: an os.pathsep- or
# comma-separated list of directories; relative paths start in the first. A path that resolves
# (`..`, symlinks) outside all of them is refused, so a config cannot read the host's files.
PLATFORM_DATASET_DIRS = [
    Path(d.strip()).expanduser().resolve()
    for d in os.environ.get("PLATFORM_DATASET_DIRS", str(DATA_DIR / "datasets")).replace(",", os.pathsep).split(os.pathsep)
    if d.strip()
] or [DATA_DIR / "datasets"]
# Where experiments' pretrained models (model.path: Hugging Face folders) may lie, the same way:
# PLATFORM_MODELS_DIR is one directory or an os.pathsep- or comma-separated list; relative paths
# start in the first (where `serve` fetches the SmolLM2 demo model).
PLATFORM_MODELS_DIRS = [
    Path(d.strip()).expanduser().resolve()
    for d in os.environ.get("PLATFORM_MODELS_DIR", str(DATA_DIR / "models")).replace(",", os.pathsep).split(os.pathsep)
    if d.strip()
] or [DATA_DIR / "models"]
EXPORTS_DIR = DATA_DIR / "exports"       # runs' checkpoints exported as Hugging Face folders
for _d in (DATA_DIR, ARTIFACTS_DIR, STATIC_ROOT_DIR, *PLATFORM_DATASET_DIRS, *PLATFORM_MODELS_DIRS):
    _d.mkdir(parents=True, exist_ok=True)


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _secret_key() -> str:
    """PLATFORM_SECRET_KEY, or a random key kept in the data directory (created once)."""
    if os.environ.get("PLATFORM_SECRET_KEY"):
        return os.environ["PLATFORM_SECRET_KEY"]
    path = DATA_DIR / "secret_key"
    if not path.exists():
        import secrets as _secrets

        path.write_text(_secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = _env_bool("PLATFORM_DEBUG", False)
ALLOWED_HOSTS = [h for h in os.environ.get("PLATFORM_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("PLATFORM_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "experiments",
    "runner",
    "api",
    "web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "grpo_platform.urls"
WSGI_APPLICATION = "grpo_platform.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [REPO_ROOT / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database --------------------------------------------------------------------------------
SQLITE_PATH = Path(os.environ.get("PLATFORM_SQLITE_PATH", DATA_DIR / "platform.sqlite3"))
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=60, conn_health_checks=True)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": SQLITE_PATH,
            # Several processes (web, workers, trainers) write at once: WAL lets readers go on
            # while one writes; IMMEDIATE transactions plus a busy timeout make writers queue
            # instead of failing with "database is locked".
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # Tests share the database with worker subprocesses, so it must be a file.
            "TEST": {"NAME": str(DATA_DIR / "test_platform.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = STATIC_ROOT_DIR
# plotly.js is served from the installed plotly package (the machines have no internet: no CDN).
STATICFILES_DIRS = [
    REPO_ROOT / "platform" / "static",
    ("plotly", Path(importlib.util.find_spec("plotly").origin).parent / "package_data"),
]
WHITENOISE_USE_FINDERS = True  # serve straight from the apps and plotly's package, no collectstatic step

# --- Celery ----------------------------------------------------------------------------------
# Embedded default: kombu's filesystem transport (no server; supports fanout, so remote control
# works too). Cancel and pause never depend on it: they go through the database.
if os.environ.get("CELERY_BROKER_URL"):
    CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
    CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
else:
    CELERY_BROKER_URL = "filesystem://"
    for _sub in ("queue", "processed", "control"):
        (BROKER_DIR / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(BROKER_DIR / "control"),
    }
# Results live in the database (Run rows); Celery's own result backend is not used.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# Long GPU jobs: acknowledge after the task returns, put the message back if the worker dies,
# take one message at a time. A redelivered message never runs a Run twice: the task starts with
# a compare-and-set on (status, attempt). Redis's visibility timeout only controls how soon an
# unacknowledged message may reappear; correctness does not depend on it.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("PLATFORM_DEFAULT_QUEUE", "runs")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

# --- run supervision -------------------------------------------------------------------------
# A running run's supervisor writes a heartbeat every HEARTBEAT_S; the scheduler checks every
# REAP_EVERY_S and treats a run whose heartbeat is older than STALE_AFTER_S as lost (its worker
# died): it is requeued (up to the run's max_restarts) and resumes from its newest checkpoint.
# Worst case from a kill to the requeue: STALE_AFTER_S + REAP_EVERY_S.
PLATFORM_HEARTBEAT_S = float(os.environ.get("PLATFORM_HEARTBEAT_S", "2"))
PLATFORM_STALE_AFTER_S = float(os.environ.get("PLATFORM_STALE_AFTER_S", "20"))
PLATFORM_REAP_EVERY_S = float(os.environ.get("PLATFORM_REAP_EVERY_S", "5"))
# After a cancel or pause request, how long a trainer has to stop by itself before SIGTERM, and
# then how long after SIGTERM before SIGKILL.
PLATFORM_STOP_GRACE_S = float(os.environ.get("PLATFORM_STOP_GRACE_S", "60"))
PLATFORM_KILL_GRACE_S = float(os.environ.get("PLATFORM_KILL_GRACE_S", "15"))
PLATFORM_DEFAULT_MAX_RESTARTS = int(os.environ.get("PLATFORM_DEFAULT_MAX_RESTARTS", "3"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("PLATFORM_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

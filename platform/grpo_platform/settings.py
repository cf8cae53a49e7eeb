"""Django settings, all from the environment.

Embedded default (nothing to run but this project): SQLite and a Celery broker kept in files, both
under PLATFORM_DATA_DIR (default ./var). Production: DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL
(Redis or RabbitMQ). See docs/production.md.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import dj_database_url

from trainers.devices import host_memory_bytes

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_DIR = REPO_ROOT

DATA_DIR = Path(os.environ.get("PLATFORM_DATA_DIR", REPO_ROOT / "var")).resolve()
ARTIFACTS_DIR = DATA_DIR / "runs"  # run directories: checkpoints and run files
BROKER_DIR = DATA_DIR / "broker"  # the embedded (filesystem) Celery broker
STATIC_ROOT_DIR = DATA_DIR / "static"
# Where experiments' data files (data.train_path, data.eval_path) may lie: an os.pathsep- or
# comma-separated list of directories; relative paths start in the first. A path that resolves
# (`..`, symlinks) outside all of them is refused, so a config cannot read the host's files.
PLATFORM_DATASET_DIRS = [
    Path(d.strip()).expanduser().resolve()
    for d in os.environ.get("PLATFORM_DATASET_DIRS", str(DATA_DIR / "datasets"))
    .replace(",", os.pathsep)
    .split(os.pathsep)
    if d.strip()
] or [DATA_DIR / "datasets"]
# Uploaded datasets (experiments.datasets) go to <first dataset root>/users/<user id>/<name>.jsonl;
# one upload is at most this many bytes. Django streams a file upload above
# FILE_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) to a temporary file and DATA_UPLOAD_MAX_MEMORY_SIZE does not
# count file parts, so Django's defaults allow it; the upload views refuse a larger request early.
PLATFORM_DATASET_MAX_BYTES = int(os.environ.get("PLATFORM_DATASET_MAX_BYTES", str(200 * 1024 * 1024)))
# Where experiments' pretrained models (model.path: Hugging Face folders) may lie, the same way:
# PLATFORM_MODELS_DIR is one directory or an os.pathsep- or comma-separated list; relative paths
# start in the first (where `serve` fetches the SmolLM2 demo model).
PLATFORM_MODELS_DIRS = [
    Path(d.strip()).expanduser().resolve()
    for d in os.environ.get("PLATFORM_MODELS_DIR", str(DATA_DIR / "models")).replace(",", os.pathsep).split(os.pathsep)
    if d.strip()
] or [DATA_DIR / "models"]
# Modules whose Environment classes a config's dotted `env.name` may name (comma-separated; a listed
# package covers its submodules). Empty by default: the built-in environments only. A name outside
# the list is refused from its text alone, before anything is imported, so no user can make the web
# server or a worker run an installed module's code.
PLATFORM_ENVIRONMENT_MODULES = [
    m.strip() for m in os.environ.get("PLATFORM_ENVIRONMENT_MODULES", "").split(",") if m.strip()
]
# What the demos' order and expected step times assume this platform trains on: "auto" (look for an
# NVIDIA GPU or a TPU on this host, without JAX), "cpu", "gpu" or "tpu" (runner.step_time).
PLATFORM_ACCELERATOR = os.environ.get("PLATFORM_ACCELERATOR", "auto")
EXPORTS_DIR = DATA_DIR / "exports"  # runs' checkpoints exported as Hugging Face folders
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
ALLOWED_HOSTS = [
    h for h in os.environ.get("PLATFORM_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h
]
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
    "sweeps",
    "evaluations",
    "alerts",
    "api",
    "web",
    "drf_spectacular_sidecar",  # Swagger UI's files for /api/docs/ (static only; no DRF)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "api.long_urls.ApiUrlLengthMiddleware",  # a JSON 414 for over-long /api/ URLs
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

# Django's four standard validators (createsuperuser, the admin's password forms, changepassword).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiment-list"
LOGOUT_REDIRECT_URL = "login"
# Self-service sign-up at accounts/signup/ (web.signup_views); off: an admin makes the accounts.
PLATFORM_ALLOW_SIGNUP = _env_bool("PLATFORM_ALLOW_SIGNUP", False)

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
# Other housekeeping the scheduler runs in its own process (runner.beat): name -> (dotted path of a
# no-argument function, period in seconds). Sweeps launch and prune trials; alerts are delivered.
PLATFORM_PERIODIC_JOBS: dict[str, tuple[str, float]] = {}
PLATFORM_PERIODIC_JOBS["sweeps"] = ("sweeps.scheduler.tick", float(os.environ.get("PLATFORM_SWEEP_TICK_S", "2")))
PLATFORM_PERIODIC_JOBS["evaluations"] = (
    "evaluations.recovery.requeue_lost_jobs",
    float(os.environ.get("PLATFORM_EVALUATION_REAP_S", "10")),
)
PLATFORM_PERIODIC_JOBS["alerts"] = ("alerts.delivery.tick", float(os.environ.get("PLATFORM_ALERT_TICK_S", "5")))
# After a pause request, how long a trainer has to stop by itself (and checkpoint) before SIGTERM,
# and then how long after SIGTERM before SIGKILL.
PLATFORM_STOP_GRACE_S = float(os.environ.get("PLATFORM_STOP_GRACE_S", "60"))
PLATFORM_KILL_GRACE_S = float(os.environ.get("PLATFORM_KILL_GRACE_S", "15"))
# A cancel needs no checkpoint: a trainer still running CANCEL_GRACE_S after the supervisor saw the
# request (compiling, or inside a long step) is SIGKILLed with its process group. The supervisor and
# the trainer read the run's status every STATUS_POLL_S (one indexed read), so cancel ends the
# trainer within about STATUS_POLL_S + CANCEL_GRACE_S + STATUS_POLL_S (3 s at the defaults).
PLATFORM_CANCEL_GRACE_S = float(os.environ.get("PLATFORM_CANCEL_GRACE_S", "2"))
PLATFORM_STATUS_POLL_S = float(os.environ.get("PLATFORM_STATUS_POLL_S", "0.5"))
# A running trainer that reports nothing (no new step, no phase change) for STALL_FACTOR times its
# usual step time, never less than STALL_MIN_S (before the attempt's first step, which compiles:
# STALL_FIRST_STEP_S), has every thread's Python stack and phase recorded into its log, its events
# and a `stalled` alert (runner.stalls). The heartbeat goes on meanwhile: the worker is alive.
PLATFORM_STALL_FACTOR = float(os.environ.get("PLATFORM_STALL_FACTOR", "5"))
PLATFORM_STALL_MIN_S = float(os.environ.get("PLATFORM_STALL_MIN_S", "120"))
PLATFORM_STALL_FIRST_STEP_S = float(os.environ.get("PLATFORM_STALL_FIRST_STEP_S", "1800"))
PLATFORM_DEFAULT_MAX_RESTARTS = int(os.environ.get("PLATFORM_DEFAULT_MAX_RESTARTS", "3"))

# --- multi-host runs (cluster.hosts > 1): a gang of Ray actors (runner.ray_gang) ----------------
# PLATFORM_RAY_ADDRESS: the Ray cluster's address (host:port of its head's GCS, as `ray start --head`
# prints, or "auto"); unset, the worker starts a local Ray for each such run (one node: its "hosts"
# are processes on the worker's machine). Connecting must succeed within RAY_CONNECT_TIMEOUT_S (a
# local Ray, which starts its own processes and is slow on a loaded host, within
# RAY_LOCAL_START_TIMEOUT_S), and the cluster must find room for cluster.hosts hosts (one
# placement-group bundle each) within RAY_JOIN_TIMEOUT_S, else the run fails with a message
# naming the setting or cluster.hosts.
PLATFORM_RAY_ADDRESS = os.environ.get("PLATFORM_RAY_ADDRESS", "").strip()
PLATFORM_RAY_CONNECT_TIMEOUT_S = float(os.environ.get("PLATFORM_RAY_CONNECT_TIMEOUT_S", "30"))
PLATFORM_RAY_LOCAL_START_TIMEOUT_S = float(os.environ.get("PLATFORM_RAY_LOCAL_START_TIMEOUT_S", "180"))
PLATFORM_RAY_JOIN_TIMEOUT_S = float(os.environ.get("PLATFORM_RAY_JOIN_TIMEOUT_S", "120"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("PLATFORM_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# --- multi-user limits (runner.limits, runner.queues, experiments.config_limits) -------------------
# Per user: runs a worker holds at once (running, pausing, cancelling) and runs waiting on the queue.
# An admin may set other numbers for one user (admin: Run execution > User limits).
PLATFORM_MAX_ACTIVE_RUNS_PER_USER = int(os.environ.get("PLATFORM_MAX_ACTIVE_RUNS_PER_USER", "4"))
PLATFORM_MAX_QUEUED_RUNS_PER_USER = int(os.environ.get("PLATFORM_MAX_QUEUED_RUNS_PER_USER", "20"))
# Per user: sweeps running at once (a new one beyond it is refused, 429; sweeps.services).
PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER = int(os.environ.get("PLATFORM_MAX_ACTIVE_SWEEPS_PER_USER", "5"))
# A worker that takes a run whose owner already has that many active runs sends it again this much later.
PLATFORM_ACTIVE_CAP_RETRY_S = float(os.environ.get("PLATFORM_ACTIVE_CAP_RETRY_S", "30"))
# What one step of a run may hold, checked before a run goes on the queue and again when a worker
# starts it (a UserLimits row overrides them per user): sequences = prompts per step x G; tokens =
# sequences x (prompt + completion tokens).
PLATFORM_MAX_SEQUENCES_PER_STEP = int(os.environ.get("PLATFORM_MAX_SEQUENCES_PER_STEP", "8192"))
PLATFORM_MAX_TOKENS_PER_STEP = int(os.environ.get("PLATFORM_MAX_TOKENS_PER_STEP", str(8 * 1024 * 1024)))
# What one run may ask of the cluster (runner.step_limits, at launch and when a worker starts it):
# cluster.hosts, and hosts x cluster.devices_per_host (1 per host when that is empty).
PLATFORM_MAX_HOSTS_PER_RUN = int(os.environ.get("PLATFORM_MAX_HOSTS_PER_RUN", "8"))
PLATFORM_MAX_DEVICES_PER_RUN = int(os.environ.get("PLATFORM_MAX_DEVICES_PER_RUN", "64"))
# Evaluation jobs one user may have queued or running at once, and their tokens together
# (prompts x k x max_new_tokens of each; evaluations.services).
PLATFORM_MAX_EVALUATION_JOBS_PER_USER = int(os.environ.get("PLATFORM_MAX_EVALUATION_JOBS_PER_USER", "8"))
PLATFORM_MAX_EVALUATION_TOKENS_PER_USER = int(
    os.environ.get("PLATFORM_MAX_EVALUATION_TOKENS_PER_USER", str(64 * 1024 * 1024))
)
# Memory one run may take on a worker (runner.step_limits): a run whose step the trainer estimates
# above it (trainers.loop.memory_estimate) is refused. Default: this machine's memory (its control
# group's limit when lower: trainers.devices.host_memory_bytes) x
# PLATFORM_WORKER_MEMORY_FRACTION (0.8: the rest for the OS, the web server and the database); set it
# where the workers' machines differ from this one, or divide by `worker --concurrency`.
PLATFORM_WORKER_MEMORY_FRACTION = 0.8
PLATFORM_WORKER_MEMORY_BYTES = int(
    os.environ.get("PLATFORM_WORKER_MEMORY_BYTES") or (host_memory_bytes() * PLATFORM_WORKER_MEMORY_FRACTION)
)
# Disk one user's datasets, exports and checkpoints may take together (a UserLimits row overrides it).
PLATFORM_STORAGE_QUOTA_BYTES = int(os.environ.get("PLATFORM_STORAGE_QUOTA_BYTES", str(50 * 1024**3)))
# This server's bounds on configs, tighter than the schema's: {dotted field: largest value}.
# PLATFORM_CONFIG_LIMITS (a JSON object) overrides single entries, e.g. '{"train.max_steps": 5000}'.
PLATFORM_CONFIG_LIMITS = {
    "train.max_steps": 1_000_000,
    "rollout.max_new_tokens": 8192,
    "data.max_prompt_tokens": 8192,
    "batch.prompts_per_step": 4096,
    "grpo.num_generations": 256,
    "grpo.num_iterations": 16,
    "data.train_prompts": 1_000_000,
    "eval.prompts": 100_000,
}
if os.environ.get("PLATFORM_CONFIG_LIMITS"):
    import json as _json

    PLATFORM_CONFIG_LIMITS.update(
        {str(k): int(v) for k, v in _json.loads(os.environ["PLATFORM_CONFIG_LIMITS"]).items()}
    )

# --- login throttling (django-axes) --------------------------------------------------------------
# After AXES_FAILURE_LIMIT failed logins for one username from one address, that pair is refused
# (HTTP 429, registration/locked_out.html) for PLATFORM_LOGIN_COOLOFF_S; a success resets the count.
INSTALLED_APPS += ["axes"]
AUTHENTICATION_BACKENDS = [
    "web.login_throttle.LoginThrottleBackend",  # axes' check; skipped when authenticate() has no request
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("PLATFORM_LOGIN_FAILURE_LIMIT", "5"))
# ... and after PLATFORM_LOGIN_IP_FAILURE_LIMIT failures from one address for any usernames, that
# address is refused the same way (password spraying; web.login_throttle.LoginThrottleHandler)
PLATFORM_LOGIN_IP_FAILURE_LIMIT = int(os.environ.get("PLATFORM_LOGIN_IP_FAILURE_LIMIT", "20"))
AXES_HANDLER = "web.login_throttle.LoginThrottleHandler"
AXES_COOLOFF_TIME = float(os.environ.get("PLATFORM_LOGIN_COOLOFF_S", "900")) / 3600  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # failures are kept (AccessAttempt); successes are not logged
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "web.login_throttle.client_ip"
AXES_VERBOSE = False

# --- security headers --------------------------------------------------------------------------
# PLATFORM_TLS_PROXY=1: the site is served over HTTPS by a reverse proxy that sets
# X-Forwarded-Proto (and X-Forwarded-For): cookies are sent over HTTPS only, browsers are told to
# use HTTPS (HSTS, PLATFORM_HSTS_SECONDS, default one year, subdomains included) and plain HTTP is
# redirected. Off by default: the embedded local setup serves plain HTTP on localhost.
PLATFORM_TLS_PROXY = _env_bool("PLATFORM_TLS_PROXY", False)
if PLATFORM_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("PLATFORM_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_SSL_REDIRECT = _env_bool("PLATFORM_SSL_REDIRECT", True)
# Content-Security-Policy on every response (grpo_platform.security_headers), on by default: the
# pages load scripts and styles from this site only, with no inline scripts or event handlers;
# inline style attributes stay allowed (progress bars, Plotly). PLATFORM_CSP="" turns it off.
PLATFORM_CSP = os.environ.get(
    "PLATFORM_CSP",
    (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
)
MIDDLEWARE += [
    "grpo_platform.security_headers.ContentSecurityPolicyMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into the 429 page
]

# --- alerts (alerts.delivery) and e-mail ---------------------------------------------------------
# Links in notifications point here. A run is "stalled" when active with a heartbeat older than
# PLATFORM_ALERT_STALL_AFTER_S (default half of PLATFORM_STALE_AFTER_S: before the reaper requeues it).
# Webhooks: a request times out after WEBHOOK_TIMEOUT_S; a failed delivery is tried MAX_ATTEMPTS times,
# RETRY_S apart, doubled each time. PLATFORM_ALERT_WEBHOOK_ALLOW: comma-separated host names,
# addresses or CIDR blocks in local or private networks that webhooks may call (none by default).
PLATFORM_BASE_URL = os.environ.get("PLATFORM_BASE_URL", "http://localhost:8000")
PLATFORM_ALERT_STALL_AFTER_S = float(os.environ.get("PLATFORM_ALERT_STALL_AFTER_S", str(PLATFORM_STALE_AFTER_S / 2)))
PLATFORM_ALERT_WEBHOOK_ALLOW = [
    h.strip() for h in os.environ.get("PLATFORM_ALERT_WEBHOOK_ALLOW", "").split(",") if h.strip()
]
PLATFORM_ALERT_WEBHOOK_TIMEOUT_S = float(os.environ.get("PLATFORM_ALERT_WEBHOOK_TIMEOUT_S", "5"))
PLATFORM_ALERT_MAX_ATTEMPTS = int(os.environ.get("PLATFORM_ALERT_MAX_ATTEMPTS", "3"))
PLATFORM_ALERT_RETRY_S = float(os.environ.get("PLATFORM_ALERT_RETRY_S", "30"))
PLATFORM_ALERT_CLAIM_S = float(os.environ.get("PLATFORM_ALERT_CLAIM_S", "60"))
# E-mail: PLATFORM_EMAIL_HOST set -> SMTP (PORT, USER, PASSWORD, PLATFORM_EMAIL_TLS=1); otherwise mails are
# written as files under <PLATFORM_DATA_DIR>/mail. PLATFORM_EMAIL_BACKEND (a Django backend path) overrides both.
EMAIL_HOST = os.environ.get("PLATFORM_EMAIL_HOST", "")
EMAIL_PORT = int(os.environ.get("PLATFORM_EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("PLATFORM_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("PLATFORM_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = _env_bool("PLATFORM_EMAIL_TLS", False)
EMAIL_TIMEOUT = 10
EMAIL_FILE_PATH = str(DATA_DIR / "mail")
EMAIL_BACKEND = os.environ.get("PLATFORM_EMAIL_BACKEND") or (
    "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST else "django.core.mail.backends.filebased.EmailBackend"
)
DEFAULT_FROM_EMAIL = os.environ.get("PLATFORM_EMAIL_FROM", "grpo-platform@localhost")

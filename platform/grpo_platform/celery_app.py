"""The Celery application: settings come from Django's (CELERY_* names)."""

import os
import sys

_PLATFORM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_PLATFORM_DIR)
for _p in (_PLATFORM_DIR, _ROOT):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "grpo_platform.settings")

from celery import Celery  # noqa: E402

app = Celery("grpo_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runner", "sweeps", "evaluations", "alerts"])

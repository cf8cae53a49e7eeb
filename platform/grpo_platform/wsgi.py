"""WSGI entry point (gunicorn grpo_platform.wsgi, with platform/ on the path)."""

import os
import sys

_PLATFORM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (_PLATFORM_DIR, os.path.dirname(_PLATFORM_DIR)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "grpo_platform.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()

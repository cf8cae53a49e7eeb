"""The demo account `serve` sets up: user "demo" with a random password created once (kept in
DATA_DIR/demo_password), and the experiment "demo: arithmetic" with configs/demo.yaml's config."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model

DEMO_USERNAME = "demo"
DEMO_EXPERIMENT = "demo: arithmetic"


def demo_password() -> str:
    """The demo user's password: read from DATA_DIR/demo_password, created on first use."""
    path = settings.DATA_DIR / "demo_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12) + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def ensure_demo() -> tuple[str, str]:
    """Create (or repair) the demo user and experiment. Returns (username, password)."""
    from experiments import configs
    from experiments.models import Experiment

    password = demo_password()
    user, created = get_user_model().objects.get_or_create(username=DEMO_USERNAME)
    if created or not user.check_password(password):
        user.set_password(password)
        user.save()
    if not Experiment.objects.filter(owner=user, name=DEMO_EXPERIMENT).exists():
        text = (settings.REPO_ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8")
        config = configs.stored(configs.parse_text(text))
        experiment = Experiment(owner=user, name=DEMO_EXPERIMENT,
                                description="A tiny model learns 2-3 digit arithmetic on CPU (configs/demo.yaml).")
        experiment.set_config(config, user=user, note="demo config")
    return DEMO_USERNAME, password

"""What the web UI does to experiments beyond a form save: clone one, restore a version. Both
validate the config again (`Experiment.set_config` -> `full_clean`: ValidationError if the schema
or the dataset roots refuse it now). (Runs are steered through runner.services.)"""

from __future__ import annotations

from django.db import transaction

from experiments.models import ConfigVersion, Experiment

CLONE_PREFIX = "copy of "


def clone_experiment(experiment: Experiment, user) -> Experiment:
    """A new experiment owned by `user` with the same config, named "copy of <name>"."""
    with transaction.atomic():
        clone = Experiment(
            owner=user,
            name=(CLONE_PREFIX + experiment.name)[:200],
            description=experiment.description,
        )
        clone.set_config(experiment.config, user=user, note=f"cloned from {experiment.name} (#{experiment.pk})"[:200])
    return clone


def restore_version(experiment: Experiment, version: ConfigVersion, user) -> ConfigVersion | None:
    """Make `version`'s config current again (a new version; None if it already is current)."""
    try:
        return experiment.set_config(version.config, user=user, note=f"restored v{version.number}")
    except Exception:
        experiment.refresh_from_db()  # the refused config must not linger in the caller's copy
        raise

"""What the web UI does to experiments beyond a form save: clone one, restore a version.
(Runs are steered through experiments.models: launch_run, request_cancel, ...)"""

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
    return experiment.set_config(version.config, user=user, note=f"restored v{version.number}")

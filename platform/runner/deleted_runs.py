"""A deleted run's files go with its row: its directory under settings.ARTIFACTS_DIR (checkpoints,
logs, run files) and its Hugging Face exports under settings.EXPORTS_DIR are removed once the
deletion commits (a rolled-back delete keeps them), also for the admin's bulk delete and the cascades
of a deleted experiment or user. Connected in RunnerConfig.ready.

A directory is removed only when it lies inside the artifacts root (a run_dir that resolves outside,
through `..` or a symbolic link, is left alone) and no other run names the same directory. A fork's
starting checkpoint is a hard link: removing the parent's directory leaves the fork's copy intact,
and the other way round."""

from __future__ import annotations

import logging
import os
import shutil

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from experiments.models import Run
from runner.storage import export_folders, run_directory

log = logging.getLogger(__name__)


def _inside(path: str, root: str) -> bool:
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    return real != real_root and os.path.commonpath([real, real_root]) == real_root


def remove_tree(path: str, root: str) -> None:
    """Remove the directory `path` if it lies inside `root`; a missing one is fine, others are logged."""
    if not _inside(path, root):
        log.warning("not removing %s: it is not inside %s", path, root)
        return
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)


@receiver(post_delete, sender=Run)
def _remove_run_files(sender, instance: Run, **kwargs) -> None:
    run_id, run_dir, directory = instance.pk, instance.run_dir, run_directory(instance)
    exports_root = str(settings.EXPORTS_DIR)

    def remove() -> None:
        if run_dir and Run.objects.filter(run_dir=run_dir).exists():
            log.warning("run %s: not removing %s, another run names it", run_id, directory)
        else:
            remove_tree(directory, str(settings.ARTIFACTS_DIR))
        for folder in export_folders([run_id]).get(run_id, []):
            remove_tree(str(folder), exports_root)

    transaction.on_commit(remove)

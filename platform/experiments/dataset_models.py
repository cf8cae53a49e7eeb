"""Uploaded datasets: a JSONL file per row, owned by a user and shared explicitly.

A Dataset's file lies at `<first dataset root>/users/<owner id>/<name>.jsonl` (`path` holds it
relative to that root); it was checked line by line by the trainer's own line check when it was
uploaded (experiments.dataset_files) and is never changed afterwards. Who may see and use one
(`DatasetQuerySet.visible_to`): its owner, the users it is shared with (`shared_with`), and users
with the `experiments.view_dataset` permission (superusers), the platform's one rule. Only its
owner shares, unshares or deletes it (the admin: users with the change/delete permission).

A config names a dataset in `data.train_dataset` / `data.eval_dataset`: the owner's own by `name`,
one shared with them as `owner/name` (`resolver`); a data path given directly may not name a file
in the uploads tree (`uploads_dir`), so the name and its check are the only way in. This module
imports no other module of the app but the Django-free dataset_files, so experiments.configs can use
it."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.db.models.signals import post_delete
from django.dispatch import receiver

from experiments.dataset_files import UPLOADS_FOLDER

log = logging.getLogger(__name__)


def dataset_root() -> Path:
    """Where uploaded datasets are written: the first of settings.PLATFORM_DATASET_DIRS."""
    return Path(settings.PLATFORM_DATASET_DIRS[0])


def uploads_dir() -> Path:
    """The uploads tree (`<dataset root>/users/`): its files are read only through a dataset name,
    never by `data.train_path` / `data.eval_path` (experiments.configs passes it as private)."""
    return dataset_root() / UPLOADS_FOLDER


class DatasetQuerySet(models.QuerySet):
    def visible_to(self, user):
        """The datasets `user` may see and name in a config: their own, those shared with them, and
        every one with the view (or change) permission."""
        if not user or not user.is_authenticated or not user.is_active:
            return self.none()
        if user.has_perm("experiments.view_dataset") or user.has_perm("experiments.change_dataset"):
            return self
        shared = Dataset.shared_with.through.objects.filter(user=user).values("dataset_id")
        return self.filter(Q(owner=user) | Q(pk__in=shared))  # a subquery: no join, no duplicate rows

    def by_reference(self, user, reference: str):
        """The dataset `reference` names for `user` ('name': their own; 'owner/name': anyone's they
        may see), or None."""
        owner_name, _, name = reference.rpartition("/")
        rows = self.visible_to(user).filter(name=name)
        rows = rows.filter(owner__username=owner_name) if owner_name else rows.filter(owner=user)
        return rows.select_related("owner").first()


class Dataset(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=64, help_text="Unique per owner: letters, digits, '.', '_', '-'.")
    description = models.TextField(blank=True)
    path = models.CharField(max_length=500, help_text="The JSONL file, relative to the first dataset root.")
    size_bytes = models.BigIntegerField()
    rows = models.PositiveIntegerField(help_text="Examples (non-blank lines).")
    sha256 = models.CharField(max_length=64)
    preview = models.JSONField(default=list, blank=True, help_text="The first rows (long strings cut).")
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="shared_datasets",
        help_text="Users who may see this dataset and use it as owner/name.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DatasetQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="dataset_name_unique_per_owner")]

    def __str__(self) -> str:
        return self.reference

    @property
    def reference(self) -> str:
        """How a config names it from any account: owner/name."""
        return f"{self.owner.get_username()}/{self.name}"

    @property
    def absolute_path(self) -> str:
        return str(dataset_root() / self.path)

    def reference_for(self, user) -> str:
        """How `user`'s config names it: 'name' for the owner, else 'owner/name'."""
        return self.name if user is not None and user.pk == self.owner_id else self.reference


def resolver(owner) -> Callable[[str], str | None]:
    """`trainers.parse_config`'s `datasets` for a config of `owner`: a dataset reference -> its
    file's absolute path, None for one `owner` may not use (or no owner)."""

    def resolve(reference: str) -> str | None:
        if owner is None or not isinstance(reference, str):
            return None
        dataset = Dataset.objects.by_reference(owner, reference)
        return dataset.absolute_path if dataset is not None else None

    return resolve


@receiver(post_delete, sender=Dataset)
def _remove_file(sender, instance: Dataset, **kwargs) -> None:
    """A deleted row's file goes too, once the deletion commits (also for the admin's bulk delete
    and a deleted user's cascade)."""
    path = instance.absolute_path

    def remove() -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove dataset file %s: %s", path, exc)

    transaction.on_commit(remove)

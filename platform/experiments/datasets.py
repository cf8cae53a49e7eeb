"""What users do with datasets (the API and the web pages both come here): upload one, share or
unshare it, delete it. A refusal is `DatasetRefused(status, message, field)`, which the API answers
as JSON and the pages show as a message.

Upload: the name is checked, then the file streams through the trainer's line check into a
temporary file beside its destination (experiments.dataset_files); only a good file gets a row, and
it is renamed into place inside the transaction that inserts the row, after the insert, so two
uploads of one name cannot overwrite each other's file (the second insert fails first: 409).

Delete is refused (409) while an experiment names the dataset in its current config: the owner's
by name, or one of a user it is shared with by owner/name. Runs keep their config snapshot: a run
started again after the deletion (retry, a restart) fails with a message naming the field.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q

from experiments import dataset_files
from experiments.dataset_models import Dataset, dataset_root
from experiments.models import Experiment, text_problem
from experiments.refusals import Refused

USAGE_SHOWN = 5
SHARE_REFUSED = "cannot share with: {names} (no such user, or not one you can share with)"


class DatasetRefused(Refused):
    """Why an upload, a share or a delete was refused."""


def max_upload_bytes() -> int:
    return int(settings.PLATFORM_DATASET_MAX_BYTES)


def check_new_name(owner, name: object) -> str:
    """The name a new dataset of `owner` may take, or DatasetRefused (400 bad, 409 taken)."""
    problem = dataset_files.name_problem(name)
    if problem:
        raise DatasetRefused(400, problem, "name")
    if Dataset.objects.filter(owner=owner, name=name).exists():
        raise DatasetRefused(
            409, f"you already have a dataset named {name!r}; pick another name or delete it first", "name"
        )
    return str(name)


def upload(
    owner,
    name: object,
    chunks: Iterable[bytes],
    file_name: str,
    description: object = "",
    room_check: Callable[[int], None] | None = None,
) -> tuple[Dataset | None, dataset_files.DatasetCheck | None]:
    """Create `owner`'s dataset `name` from an upload. Returns (the dataset, its check), or (None,
    the check) when the file has problems (check.error_lines()); DatasetRefused for a bad or taken
    name or description. `room_check(size_bytes)` (runner.storage.upload_room_check: the quota) is
    called inside the transaction that stores the dataset, after the owner's row is locked, so two
    uploads of one owner take turns and the second sees the first; it raises DatasetRefused to refuse."""
    name = check_new_name(owner, name)
    description = description or ""
    if not isinstance(description, str) or text_problem(description):
        raise DatasetRefused(400, text_problem(description) or "must be text", "description")
    relative = dataset_files.relative_path(owner.pk, name)
    destination = dataset_root() / relative
    shown_name = os.path.basename(file_name or "") or f"{name}.jsonl"
    check, temporary_path = dataset_files.write_checked(chunks, shown_name, max_upload_bytes(), str(destination.parent))
    if not check.ok:
        return None, check
    try:
        with transaction.atomic():
            if room_check is not None:
                get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
                room_check(check.size_bytes)
            dataset = Dataset.objects.create(
                owner=owner,
                name=name,
                description=description,
                path=relative,
                size_bytes=check.size_bytes,
                rows=check.rows,
                sha256=check.sha256,
                preview=check.preview,
            )
            os.replace(temporary_path, destination)
    except IntegrityError:
        os.unlink(temporary_path)
        raise DatasetRefused(409, f"you already have a dataset named {name!r}", "name") from None
    except BaseException:
        if os.path.exists(temporary_path):
            os.unlink(temporary_path)
        raise
    return dataset, check


def share(dataset: Dataset, usernames: object, share_with: bool = True) -> list[str]:
    """Share `dataset` with the users named (or, with share_with False, stop sharing). Returns the
    usernames it is shared with afterwards; DatasetRefused 400 naming `users` for names that are no
    active user, one message for an unknown name and an inactive user (SHARE_REFUSED), so sharing
    never tells which usernames exist."""
    if not isinstance(usernames, list) or not all(isinstance(u, str) and u for u in usernames) or not usernames:
        raise DatasetRefused(400, "a non-empty list of usernames", "users")
    if len(usernames) > 1000:
        raise DatasetRefused(400, "at most 1000 usernames at a time", "users")
    users = list(get_user_model().objects.filter(username__in=set(usernames), is_active=True))
    unknown = sorted(set(usernames) - {u.get_username() for u in users})
    if unknown:
        raise DatasetRefused(400, SHARE_REFUSED.format(names=", ".join(unknown[:10])), "users")
    users = [u for u in users if u.pk != dataset.owner_id]
    if share_with:
        dataset.shared_with.add(*users)
    else:
        dataset.shared_with.remove(*users)
    return shared_usernames(dataset)


def shared_usernames(dataset: Dataset) -> list[str]:
    return sorted(dataset.shared_with.values_list("username", flat=True))


def experiments_naming(dataset: Dataset):
    """Experiments whose current config names `dataset` in a way that resolves to it."""
    by_owner = Q(owner=dataset.owner_id) & (
        Q(config__data__train_dataset=dataset.name) | Q(config__data__eval_dataset=dataset.name)
    )
    sharers = list(dataset.shared_with.values_list("pk", flat=True)) + [dataset.owner_id]
    by_reference = Q(owner__in=sharers) & (
        Q(config__data__train_dataset=dataset.reference) | Q(config__data__eval_dataset=dataset.reference)
    )
    return Experiment.objects.filter(by_owner | by_reference).order_by("name")


def delete(dataset: Dataset) -> None:
    """Delete `dataset` and its file, or DatasetRefused 409 while an experiment names it."""
    using = list(experiments_naming(dataset).values_list("name", flat=True)[: USAGE_SHOWN + 1])
    if using:
        shown = ", ".join(repr(n) for n in using[:USAGE_SHOWN]) + (", ..." if len(using) > USAGE_SHOWN else "")
        raise DatasetRefused(
            409,
            f"experiments name this dataset in their config ({shown}); change their "
            "data.train_dataset / data.eval_dataset first",
        )
    dataset.delete()

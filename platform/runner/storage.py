"""Where a user's files lie on disk, how much they take, and the per-user storage quota over them.

Three kinds of files count against a user (the owner of the experiment, whoever made the file):

  datasets     their uploaded datasets: the sum of `Dataset.size_bytes` (one query)
  checkpoints  their runs' directories (settings.ARTIFACTS_DIR/<run_dir>/: checkpoints, a fork's
               starting checkpoint, logs and run files), walked on disk
  exports      their runs' Hugging Face exports (settings.EXPORTS_DIR/run-<id>-step-<N>/), walked

Sizes are the files' own sizes (`st_size`); symbolic links are not followed; each inode counts
once per user: a file hard-linked twice inside one directory, and a fork's starting checkpoint (a
hard link of its parent's, runner.forks) across a user's runs, take their bytes once, as on disk.

Walking every run directory on every request would cost a stat per file, so a run's size is cached
(the process's Django cache, RUN_SIZE_CACHE_S) under a key made of its directory, attempt and
status, and only while its status is settled (succeeded, failed, cancelled, paused): nothing writes
into a run's directory then, and any change that could (a retry, a resume, a restart) changes the
attempt or the status, hence the key. Queued and active runs are walked on every call (a user has
few: runner.limits caps them). Exports are few small folders and are walked every time.

The quota (`quota_bytes_for`) is PLATFORM_STORAGE_QUOTA_BYTES unless the user's UserLimits row sets
`storage_quota_bytes`. It is enforced where new files are asked for:

- a dataset upload that would take the user over it is refused (413) before the file is stored
  (the API and the page check the request's size first, then the parsed file's);
- an export, and putting a run on the queue (launch, resume, retry, fork: `check_storage_room`,
  beside runner.limits.check_queued_room), are refused (429) while the user is at or over it.

A run that is training when its checkpoints cross the quota is not stopped: it finishes (its
checkpoints keep being written, so the user's work is never lost mid-run); the next launch, resume,
retry, fork, export or upload is refused until the user frees space. An upload's last check is made
inside the transaction that stores it, after the user's row is locked (`upload_room_check`), so two
uploads at the same moment take turns and the second sees the first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db.models import Sum

from experiments.dataset_models import Dataset
from experiments.models import SETTLED_STATUSES, Run
from runner.limits import LaunchRefused, limits_for

RUN_SIZE_CACHE_S = 600  # a settled run's size is walked again after this long (files removed by hand)
EXPORT_NAME = re.compile(r"run-(?P<run>[0-9]+)-step-(?P<step>[0-9]+)")


def run_directory(run: Run) -> str:
    """The run's directory (checkpoints, config.yaml), as the trainer child uses it."""
    return os.path.join(settings.ARTIFACTS_DIR, run.run_dir or f"run-{run.pk}")


def export_folder(run: Run, step: int) -> Path:
    """Where checkpoint `step` of `run` is exported as a Hugging Face folder (runner.exports)."""
    return Path(settings.EXPORTS_DIR) / f"run-{run.pk}-step-{step}"


def export_folders(run_ids) -> dict[int, list[Path]]:
    """The export folders under settings.EXPORTS_DIR of the runs `run_ids`: {run id: [folder, ...]}
    by step (one listing of the folder)."""
    wanted = set(run_ids)
    found: dict[int, list[tuple[int, Path]]] = {}
    try:
        entries = list(os.scandir(settings.EXPORTS_DIR))
    except OSError:
        return {}
    for entry in entries:
        match = EXPORT_NAME.fullmatch(entry.name)
        if match and int(match["run"]) in wanted and entry.is_dir(follow_symlinks=False):
            found.setdefault(int(match["run"]), []).append((int(match["step"]), Path(entry.path)))
    return {run_id: [path for _, path in sorted(pairs)] for run_id, pairs in found.items()}


def tree_bytes(path: str | os.PathLike) -> int:
    """The bytes of the regular files under `path` (a file: its own size; missing: 0), each
    inode once, symbolic links not followed."""
    return tree_walk(path)[0]


def tree_walk(path: str | os.PathLike) -> tuple[int, dict[tuple[int, int], int]]:
    """(`tree_bytes(path)`, {(device, inode): size} of its files with more than one link): what
    `runs_bytes` needs to count a hard link shared by two runs once."""
    root = os.fspath(path)
    if os.path.islink(root) or not os.path.isdir(root):
        try:
            info = os.lstat(root)
        except OSError:
            return 0, {}
        return (info.st_size if stat.S_ISREG(info.st_mode) else 0), {}
    linked: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    total = 0
    pending = [root]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:  # removed meanwhile (checkpoint retention), or unreadable
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    if (info.st_dev, info.st_ino) not in seen:
                        seen.add((info.st_dev, info.st_ino))
                        total += info.st_size
                        if info.st_nlink > 1:
                            linked[(info.st_dev, info.st_ino)] = info.st_size
            except OSError:
                continue
    return total, linked


def _cache_key(run: Run, directory: str) -> str:
    digest = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:32]
    return f"storage:run:{digest}:{run.pk}:{run.attempt}:{run.status}"


def runs_bytes(runs) -> int:
    """The bytes under the directories of `runs` (Run objects with pk, run_dir, attempt and
    status), each inode once (a hard link shared by two runs counts once), settled runs' sizes
    cached (see the module docstring)."""
    runs = list(runs)
    directories = {run.pk: run_directory(run) for run in runs}
    keys = {run.pk: _cache_key(run, directories[run.pk]) for run in runs if run.status in SETTLED_STATUSES}
    cached = cache.get_many(list(keys.values())) if keys else {}
    total, fresh = 0, {}
    counted: set[tuple[int, int]] = set()
    for run in runs:
        key = keys.get(run.pk)
        entry = cached.get(key) if key is not None else None
        if not (isinstance(entry, tuple) and len(entry) == 2):
            size, linked = tree_walk(directories[run.pk])
            entry = (size, [(dev, ino, n) for (dev, ino), n in linked.items()])
            if key is not None:
                fresh[key] = entry
        size, linked = entry
        total += size
        for dev, ino, n in linked:  # counted already under another run: take it off again
            if (dev, ino) in counted:
                total -= n
            counted.add((dev, ino))
    if fresh:
        cache.set_many(fresh, timeout=RUN_SIZE_CACHE_S)
    return total


def quota_bytes_for(user) -> int:
    """The user's storage quota: their UserLimits row's `storage_quota_bytes` where set, else
    settings.PLATFORM_STORAGE_QUOTA_BYTES."""
    return limits_for(user).storage_quota_bytes


@dataclasses.dataclass(frozen=True)
class StorageUsage:
    datasets_bytes: int
    checkpoints_bytes: int
    exports_bytes: int
    quota_bytes: int

    @property
    def used_bytes(self) -> int:
        return self.datasets_bytes + self.checkpoints_bytes + self.exports_bytes

    @property
    def over_quota(self) -> bool:
        """At or over the quota: nothing new may be stored."""
        return self.used_bytes >= self.quota_bytes

    def as_json(self) -> dict:
        return {
            "datasets_bytes": self.datasets_bytes,
            "checkpoints_bytes": self.checkpoints_bytes,
            "exports_bytes": self.exports_bytes,
            "used_bytes": self.used_bytes,
            "quota_bytes": self.quota_bytes,
            "over_quota": self.over_quota,
        }


def usage_for(user) -> StorageUsage:
    """What `user`'s datasets, run directories and exports take now, and their quota."""
    datasets_bytes = Dataset.objects.filter(owner_id=user.pk).aggregate(total=Sum("size_bytes"))["total"] or 0
    runs = list(Run.objects.filter(experiment__owner_id=user.pk).only("pk", "run_dir", "attempt", "status"))
    exports = export_folders(run.pk for run in runs)
    return StorageUsage(
        datasets_bytes=int(datasets_bytes),
        checkpoints_bytes=runs_bytes(runs),
        exports_bytes=sum(tree_bytes(folder) for folders in exports.values() for folder in folders),
        quota_bytes=quota_bytes_for(user),
    )


def format_bytes(size_bytes: int) -> str:
    """`size_bytes` for people, in binary units: 512 B, 1.5 KiB, 538.2 MiB, 50.0 GiB."""
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def quota_message(usage: StorageUsage, adding_bytes: int | None = None, adding: str = "this upload") -> str:
    """The refusal for a user with `usage`: what they use by kind, their quota, what is asked for
    (`adding`, `adding_bytes`, if given), and what to do."""
    kinds = (
        f"datasets {format_bytes(usage.datasets_bytes)}, checkpoints {format_bytes(usage.checkpoints_bytes)}, "
        f"exports {format_bytes(usage.exports_bytes)}"
    )
    asked = f"; {adding} is {format_bytes(adding_bytes)}" if adding_bytes is not None else ""
    return (
        f"over your storage quota: you use {format_bytes(usage.used_bytes)} ({kinds}) of your "
        f"{format_bytes(usage.quota_bytes)} quota{asked}; delete datasets you no longer need, or ask an "
        f"admin to delete old runs and exports or to raise your quota (see your Account page)"
    )


def over_quota_message(user) -> str | None:
    """Why `user` may store nothing new now (they are at or over their quota), or None."""
    usage = usage_for(user)
    return quota_message(usage) if usage.over_quota else None


def upload_refusal(
    usage: StorageUsage, size_bytes: int, slack_bytes: int = 0, adding: str = "this upload"
) -> str | None:
    """Why an upload of `size_bytes` by a user with `usage` (`usage_for`, read once per request: it
    walks the run directories) is refused (more than `slack_bytes` of it would not fit under their
    quota), or None. The slack lets a request's size, framing included, be checked before the file
    is read."""
    if usage.used_bytes + size_bytes - slack_bytes <= usage.quota_bytes:
        return None
    return quota_message(usage, size_bytes, adding)


def upload_room_check(user, adding: str = "this upload"):
    """For experiments.datasets.upload's `room_check`: called with the file's size inside the
    transaction that stores it (the user's row locked), it reads the user's usage again and raises
    DatasetRefused(413) when the file would take them over their quota."""
    from experiments.datasets import DatasetRefused

    def check(size_bytes: int) -> None:
        refusal = upload_refusal(usage_for(user), size_bytes, adding=adding)
        if refusal:
            raise DatasetRefused(413, refusal)

    return check


def check_storage_room(user) -> None:
    """Call where a run goes on the queue (beside runner.limits.check_queued_room): LaunchRefused
    (429) while `user` is at or over their storage quota, which rolls the caller's transaction back."""
    message = over_quota_message(user)
    if message:
        raise LaunchRefused(429, message)

"""Leaderboards: per dataset (`EvaluationJob.dataset_key`), one row per policy (a run's checkpoint or
a model folder) from its newest succeeded job, best first (accuracy, then pass@k, then reward,
then the newer job). The web page and the API share these."""

from __future__ import annotations

import dataclasses
from typing import Iterable

from evaluations.models import EvaluationJob, JobStatus

MAX_JOBS = 2000  # succeeded jobs read for one leaderboard (the newest)


def _score(value: float | None) -> float:
    return float("-inf") if value is None else value


def ranked(jobs: Iterable[EvaluationJob]) -> list[EvaluationJob]:
    """`jobs` (succeeded, newest first) -> the newest one per policy, best first. Pure: no queries."""
    newest: dict[tuple, EvaluationJob] = {}
    for job in jobs:
        newest.setdefault((job.run_id, job.step, job.model_path), job)
    return sorted(newest.values(), key=lambda j: (_score(j.accuracy), _score(j.pass_at_k), _score(j.reward_mean),
                                                  j.finished_at.timestamp() if j.finished_at else 0.0, j.pk),
                  reverse=True)


def leaderboard(user, dataset_key: str) -> list[EvaluationJob]:
    """The ranked rows of `dataset_key` among the jobs `user` may see."""
    jobs = (EvaluationJob.objects.visible_to(user).filter(dataset_key=dataset_key, status=JobStatus.SUCCEEDED)
            .select_related("run", "owner").order_by("-finished_at", "-id")[:MAX_JOBS])
    return ranked(jobs)


@dataclasses.dataclass(frozen=True)
class Board:
    key: str
    label: str
    jobs: int


def boards(user) -> list[Board]:
    """Every dataset with a succeeded job `user` may see: its key, label and job count, by label."""
    rows = (EvaluationJob.objects.visible_to(user).filter(status=JobStatus.SUCCEEDED)
            .values_list("dataset_key", "dataset_label"))
    counts: dict[str, list] = {}
    for key, label in rows:
        entry = counts.setdefault(key, [label, 0])
        entry[1] += 1
    return sorted((Board(key, label, n) for key, (label, n) in counts.items()), key=lambda b: (b.label, b.key))

"""Leaderboards: per dataset (`EvaluationJob.dataset_key`), and within it one board per measure
(prompts, k): jobs of different prompt counts or k never rank against each other, nor does a later
job of one measure hide an earlier one of another. Each row is a policy (a run's checkpoint or a
model folder) on one measure, from its newest succeeded job that has an accuracy (a newer job
without one never hides a measured one), best first (accuracy, then pass@k, then reward, then the
newer job; a missing value ranks below any measured one); rows are listed by measure (more prompts
first, then the larger k) and `rank` restarts for each. The web page and the API share these."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from evaluations.models import EvaluationJob, JobStatus

MAX_JOBS = 2000  # succeeded jobs read for one leaderboard (the newest)


def _score(value: float | None) -> float:
    return float("-inf") if value is None else value


def measure(job: EvaluationJob) -> tuple[int, int]:
    """What a job measured: (prompts, k); prompts 0 = the whole dataset."""
    return job.prompts, job.k


def ranked(jobs: Iterable[EvaluationJob]) -> list[EvaluationJob]:
    """`jobs` (succeeded, newest first) -> one per (policy, prompts, k): the newest with an accuracy
    (else the newest), by measure, best first within each; each gets `rank` (1 = best of its
    measure). Pure: no queries."""
    newest: dict[tuple, EvaluationJob] = {}
    for job in jobs:
        key = (job.run_id, job.step, job.model_path, *measure(job))
        kept = newest.get(key)
        if kept is None or (kept.accuracy is None and job.accuracy is not None):
            newest[key] = job
    rows = sorted(
        newest.values(),
        key=lambda j: (
            _score(j.accuracy),
            _score(j.pass_at_k),
            _score(j.reward_mean),
            j.finished_at.timestamp() if j.finished_at else 0.0,
            j.pk,
        ),
        reverse=True,
    )
    rows.sort(key=lambda j: measure(j), reverse=True)  # stable: each measure keeps its order
    rank, previous = 0, None
    for job in rows:
        rank = 1 if measure(job) != previous else rank + 1
        job.rank, previous = rank, measure(job)
    return rows


def leaderboard(user, dataset_key: str, prompts: int | None = None, k: int | None = None) -> list[EvaluationJob]:
    """The ranked rows of `dataset_key` among the jobs `user` may see (only the board of `prompts`
    and `k` where given)."""
    jobs = EvaluationJob.objects.visible_to(user).filter(dataset_key=dataset_key, status=JobStatus.SUCCEEDED)
    if prompts is not None:
        jobs = jobs.filter(prompts=prompts)
    if k is not None:
        jobs = jobs.filter(k=k)
    return ranked(jobs.select_related("run", "owner").order_by("-finished_at", "-id")[:MAX_JOBS])


@dataclasses.dataclass(frozen=True)
class Board:
    key: str
    label: str
    jobs: int
    measures: tuple[tuple[int, int], ...] = ()  # its boards' (prompts, k), as `ranked` lists them


def boards(user) -> list[Board]:
    """Every dataset with a succeeded job `user` may see: its key, label, job count and measures, by label."""
    rows = (
        EvaluationJob.objects.visible_to(user)
        .filter(status=JobStatus.SUCCEEDED)
        .values_list("dataset_key", "dataset_label", "prompts", "k")
    )
    counts: dict[str, list] = {}
    for key, label, prompts, k in rows:
        entry = counts.setdefault(key, [label, 0, set()])
        entry[1] += 1
        entry[2].add((prompts, k))
    return sorted(
        (Board(key, label, n, tuple(sorted(m, reverse=True))) for key, (label, n, m) in counts.items()),
        key=lambda b: (b.label, b.key),
    )

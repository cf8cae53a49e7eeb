"""The evaluation endpoints' shapes (api/evaluation_views.py): what they take and answer (see
api/contract.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from api.contract import Shape
from api.inputs import Query, WholeNumber
from evaluations.models import JobStatus

DATASET_SPEC = "'task:NAME' (a built-in task's held-out prompts), 'dataset:ID' (an uploaded dataset) or 'run_eval'"


LIST_LIMIT, LIST_LIMIT_MAX = 100, 500  # jobs or samples per page: by default, at most


class EvaluationInput(BaseModel):
    """A checkpoint (run + step) or a model folder (model), and a dataset."""

    run: WholeNumber | None = Field(None, description="the checkpoint's run (with step)")
    step: WholeNumber | None = Field(None, description="the checkpoint's step")
    model: str | None = Field(None, description="a model folder as GET /api/models lists it (instead of run/step)")
    dataset: str = Field(description=DATASET_SPEC)
    prompts: WholeNumber | None = Field(None, ge=0, le=10_000, description="prompts scored (default 64; 0 = all)")
    k: WholeNumber | None = Field(
        None, ge=1, le=64, description="samples per prompt for pass@k (default 4; 1 = greedy only)"
    )
    max_new_tokens: WholeNumber | None = Field(None, ge=1, le=4096, description="completion budget (default the run's)")


class EvaluationJobJson(Shape):
    id: int
    url: str
    status: str = Field(description="queued, running, succeeded, failed or cancelled")
    run: int | None
    step: int | None
    model: str
    policy: str = Field(description="'#7 step 30' or the model folder")
    dataset: str = Field(description="the leaderboard key: task:NAME, dataset:ID or run-eval:RUN")
    dataset_label: str
    prompts: int
    k: int
    progress_done: int
    progress_total: int
    accuracy: float | None
    pass_at_1: float | None
    pass_at_k: float | None
    reward_mean: float | None
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class EvaluationList(Shape):
    evaluations: list[EvaluationJobJson]
    count: int


class EvaluationListQuery(Query):
    run: WholeNumber | None = Field(None, ge=0, description="only jobs on this run's checkpoints")
    dataset: str | None = Field(None, max_length=80, description="only jobs on this dataset key")
    status: Literal[tuple(JobStatus.values)] | None = None
    limit: WholeNumber = Field(LIST_LIMIT, ge=1, description=f"at most {LIST_LIMIT_MAX}")


class EvaluationSampleJson(Shape):
    index: int
    prompt: str
    completion: str
    answer: str
    reward: float | None
    correct: bool
    samples_correct: int | None = Field(description="of the job's k samples")


class EvaluationSamplesQuery(Query):
    after: WholeNumber = Field(-1, description="only samples with index above this")
    limit: WholeNumber = Field(LIST_LIMIT, ge=1, description=f"at most {LIST_LIMIT_MAX}")
    correct: bool | None = Field(None, description="only correct (true) or wrong (false) ones")


class EvaluationSamples(Shape):
    samples: list[EvaluationSampleJson]
    next_after: int | None = Field(description="the next page's `after`, null at the end")


class Cancelled(Shape):
    id: int
    status: str = Field(description="cancelled")


class LeaderboardQuery(Query):
    dataset: str | None = Field(None, max_length=80, description="a dataset key; none = the list of leaderboards")
    prompts: WholeNumber | None = Field(None, ge=0, description="only the board of jobs that scored this many prompts")
    k: WholeNumber | None = Field(None, ge=1, description="only the board of jobs with this k")


class LeaderboardMeasure(Shape):
    prompts: int = Field(description="prompts scored (0 = the whole dataset)")
    k: int


class LeaderboardEntry(Shape):
    key: str
    label: str
    jobs: int
    measures: list[LeaderboardMeasure] = Field(description="the (prompts, k) boards of this dataset")


class LeaderboardRow(EvaluationJobJson):
    rank: int = Field(description="1 = the best of the rows with its prompts and k")


class Leaderboard(Shape):
    dataset: str | None
    boards: list[LeaderboardEntry]
    rows: list[LeaderboardRow] = Field(
        description="by (prompts, k), more prompts first; within each, best first: accuracy, pass@k, reward, newer"
    )


class OnEndInput(BaseModel):
    dataset: str = Field(description=DATASET_SPEC)
    prompts: WholeNumber | None = Field(None, ge=0, le=10_000)
    k: WholeNumber | None = Field(None, ge=1, le=64)


class OnEnd(Shape):
    run: int
    dataset: str
    prompts: int
    k: int
    job: int | None

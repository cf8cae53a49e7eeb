"""Evaluation jobs and their per-prompt samples, and a run's request to evaluate its best checkpoint
when it ends.

An EvaluationJob scores one policy (a run's checkpoint, or a model folder under a model root) on one
dataset: a built-in task's held-out prompts (`task`), an uploaded dataset (`dataset`), or the eval
set of the checkpoint's run (`run_eval`). `dataset_key` names the dataset the same way for every job
on it ("task:arithmetic", "dataset:12", "run-eval:7"): the leaderboard groups jobs by it. Results
(accuracy, pass@k, reward mean) are filled when the job succeeds; a failed job keeps its error.
Who may see a job: its owner, and users with the view permission (superusers); who may cancel it: its
owner, and users with the change permission."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


PENDING_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)  # what counts against the owner's evaluation limits


class DatasetKind(models.TextChoices):
    TASK = "task", "built-in task"
    DATASET = "dataset", "uploaded dataset"
    RUN_EVAL = "run_eval", "the run's eval set"


class EvaluationQuerySet(models.QuerySet):
    def visible_to(self, user):
        """The jobs `user` may see: their own; every one with the view permission."""
        if not user or not user.is_authenticated or not user.is_active:
            return self.none()
        if user.has_perm("evaluations.view_evaluationjob"):
            return self
        return self.filter(owner=user)

    def steerable_by(self, user):
        """The jobs `user` may cancel: their own; every one with the change permission."""
        if not user or not user.is_authenticated or not user.is_active:
            return self.none()
        if user.has_perm("evaluations.change_evaluationjob"):
            return self
        return self.filter(owner=user)


class EvaluationJob(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_jobs")
    checkpoint = models.ForeignKey(
        "experiments.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    run = models.ForeignKey(
        "experiments.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="evaluations",
        help_text="The checkpoint's run (kept if the row goes).",
    )
    step = models.IntegerField(null=True, blank=True, help_text="The checkpoint's step.")
    model_path = models.CharField(
        max_length=500, blank=True, help_text="A model folder (as model.path names it) instead of a checkpoint."
    )
    dataset_kind = models.CharField(max_length=16, choices=DatasetKind.choices)
    task = models.CharField(max_length=64, blank=True)
    dataset = models.ForeignKey(
        "experiments.Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    dataset_key = models.CharField(max_length=80, db_index=True, help_text="The leaderboard this job ranks on.")
    dataset_label = models.CharField(max_length=200)
    prompts = models.PositiveIntegerField(default=64, help_text="Prompts scored (0 = the whole dataset).")
    k = models.PositiveIntegerField(default=4, help_text="Samples per prompt for pass@k (1 = greedy only).")
    max_new_tokens = models.PositiveIntegerField(null=True, blank=True, help_text="Empty = the run's budget.")
    tokens = models.PositiveBigIntegerField(
        default=0,
        help_text="Completion tokens it may generate: prompts x k x "
        "max_new_tokens (bounds where unknown); counted against its owner's limit.",
    )
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True)
    progress_done = models.PositiveIntegerField(default=0, help_text="Prompts scored so far.")
    progress_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    accuracy = models.FloatField(null=True, blank=True, help_text="Greedy accuracy.")
    pass_at_1 = models.FloatField(null=True, blank=True)
    pass_at_k = models.FloatField(null=True, blank=True)
    reward_mean = models.FloatField(null=True, blank=True)
    requested_by_run = models.ForeignKey(
        "experiments.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Set for an evaluate-on-end job.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Written every few seconds while running.")
    attempts = models.PositiveIntegerField(
        default=0, help_text="Times a worker claimed it (a lost worker's is retried)."
    )

    objects = EvaluationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["dataset_key", "accuracy"], name="evaluation_leaderboard")]

    def __str__(self) -> str:
        return f"evaluation {self.pk}: {self.policy_label} on {self.dataset_label}"

    @property
    def policy_label(self) -> str:
        """ "run #7 step 30" or the model folder."""
        if self.model_path:
            return self.model_path
        run = self.run.label if self.run is not None else "a deleted run"
        return f"{run} step {self.step}"

    @property
    def finished(self) -> bool:
        return self.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class EvaluationSample(models.Model):
    """One prompt of a job: its greedy completion, reward, correctness and how many of the k samples
    were correct."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(EvaluationJob, on_delete=models.CASCADE, related_name="samples")
    index = models.IntegerField()
    prompt = models.TextField()
    completion = models.TextField()
    answer = models.TextField(blank=True)
    reward = models.FloatField(null=True, blank=True)
    correct = models.BooleanField(default=False)
    samples_correct = models.IntegerField(null=True, blank=True, help_text="Of the job's k samples.")

    class Meta:
        ordering = ["job", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="evaluation_sample_unique_index")]


class EvaluateOnEnd(models.Model):
    """A run's request: when it succeeds, evaluate its best checkpoint (highest eval/accuracy, else
    reward/mean, newest on ties) on this dataset. `job` is set once that job is made."""

    run = models.OneToOneField("experiments.Run", on_delete=models.CASCADE, related_name="evaluate_on_end")
    dataset_kind = models.CharField(max_length=16, choices=DatasetKind.choices)
    task = models.CharField(max_length=64, blank=True)
    dataset = models.ForeignKey(
        "experiments.Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    prompts = models.PositiveIntegerField(default=64)
    k = models.PositiveIntegerField(default=4)
    job = models.ForeignKey(EvaluationJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"evaluate run {self.run_id} on end"

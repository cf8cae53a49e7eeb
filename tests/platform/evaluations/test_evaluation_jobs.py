"""evaluations.jobs in this process (no worker): a model folder under the model root scored on an
uploaded dataset by the trainer's `evaluate` child fills the job's results and samples; a job whose
checkpoint or dataset went away fails with the reason, before any child starts."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_run
from datasets_testlib import dataset_root, upload  # noqa: F401 (fixture)

from evaluations import jobs, services
from evaluations.models import EvaluationJob
from experiments.models import Checkpoint
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def model_root(settings, tmp_path):
    root = tmp_path / "models"
    write_tiny_model(root / "tiny-chat")
    settings.PLATFORM_MODELS_DIRS = [root]
    return root


def test_a_model_folder_on_an_uploaded_dataset(alice, model_root, dataset_root, monkeypatch):  # noqa: F811
    monkeypatch.setattr(services, "send_when_committed", lambda job: None)
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(3)]
    dataset = upload(alice, "sums", "".join(json.dumps(r) + "\n" for r in rows).encode())
    job = services.create_job(
        alice, {"model": "tiny-chat", "dataset": f"dataset:{dataset.pk}", "prompts": 0, "k": 2, "max_new_tokens": 4}
    )
    config = jobs.child_config(job)
    assert config["model"]["path"] == str(model_root / "tiny-chat")
    assert config["rewards"] == [{"name": "math_answer", "weight": 1.0}]  # an uploaded dataset on a model folder
    command = jobs.child_command(job, "cfg.yaml", "out.jsonl")
    assert command[command.index("--dataset") + 1] == dataset.absolute_path
    assert command[command.index("evaluate") + 1] == str(model_root / "tiny-chat")

    assert jobs.run_job(job.pk) == "succeeded"
    job.refresh_from_db()
    assert job.error == "" and job.attempts == 1 and job.progress_done == job.progress_total == 3
    samples = list(job.samples.order_by("index"))
    assert [s.prompt for s in samples] == [r["prompt"] for r in rows]
    assert [s.answer for s in samples] == ["0", "2", "4"]
    assert job.accuracy == pytest.approx(sum(s.correct for s in samples) / 3)
    assert all(s.samples_correct is not None and 0 <= s.samples_correct <= 2 for s in samples)
    assert jobs.run_job(job.pk) == ""  # a redelivered message does nothing


def test_a_job_whose_checkpoint_or_dataset_is_gone_fails_with_the_reason(alice, dataset_root, monkeypatch):  # noqa: F811
    monkeypatch.setattr(services, "send_when_committed", lambda job: None)
    run = make_run(alice, status="succeeded", run_dir="run-gone")
    Checkpoint.objects.create(run=run, step=2, path="run-gone/checkpoints/2")
    job = services.create_job(alice, {"run": run.pk, "step": 2, "dataset": "task:reverse"})
    Checkpoint.objects.filter(run=run).delete()
    assert jobs.run_job(job.pk) == "failed"
    assert EvaluationJob.objects.get(pk=job.pk).error == "the checkpoint (step 2) was deleted"

    Checkpoint.objects.create(run=run, step=2, path="run-gone/checkpoints/2")
    dataset = upload(alice, "soon-gone")
    job = services.create_job(alice, {"run": run.pk, "step": 2, "dataset": f"dataset:{dataset.pk}"})
    dataset.delete()
    assert jobs.run_job(job.pk) == "failed"
    assert EvaluationJob.objects.get(pk=job.pk).error == "the dataset was deleted"
    assert run.checkpoints.count() == 1  # nothing else touched

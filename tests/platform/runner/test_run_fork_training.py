"""Forks that really train, through the platform's own path (the trainer child's `run_attempt`,
in this process), and a checkpoint downloaded as a zipped Hugging Face folder.

- continued: the child resumes at the parent's step N + 1 with its weights, optimizer state and
  data position, so with the same config it ends with exactly the parent's final parameters;
- fresh: the child starts at step 0 from the checkpoint's weights with a new optimizer: its first
  step's rollouts (same seed, same prompts as the parent's first step) come from other weights;
- download: `GET /api/runs/<id>/checkpoints/<step>/hf.zip` holds config.json, model.safetensors
  and the tokenizer files under `run-<id>-step-<N>/`, and transformers loads the unpacked folder."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from api_testlib import token_client
from platform_testlib import tiny_config

from experiments.models import Experiment, MetricPoint, Run, RunEvent
from runner import services
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.django_db(transaction=True)  # the trainer's hooks write from their own threads


@pytest.fixture
def places(settings, tmp_path):
    settings.PLATFORM_MODELS_DIRS = [tmp_path / "models"]
    settings.ARTIFACTS_DIR = tmp_path / "runs"
    settings.EXPORTS_DIR = tmp_path / "exports"
    return tmp_path


def train_here(run: Run) -> Run:
    """Train the queued run's attempt here, as the worker's child would, to success."""
    from runner.attempt import run_attempt

    Run.objects.filter(pk=run.pk).update(status="running")
    assert run_attempt(run.pk, run.attempt) == 0
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    return run


def fork(user, run: Run, body: dict) -> Run:
    response = token_client(user).post(f"/api/runs/{run.pk}/fork", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    return Run.objects.get(pk=response.json()["id"])


def metric_steps(run: Run, name: str = "entropy") -> dict[int, float]:
    return dict(MetricPoint.objects.filter(run=run, name=name).values_list("step", "value"))


def test_continued_and_fresh_forks_train_from_the_checkpoint(alice, places, sent_messages, restore_signals):
    experiment = Experiment(owner=alice, name="toy")
    experiment.set_config(
        tiny_config(train__max_steps=2, checkpoint__every_steps=1, checkpoint__keep_last=3, grpo__beta=0.04), user=alice
    )
    parent = train_here(services.launch_run(experiment))
    assert sorted(parent.checkpoints.values_list("step", flat=True)) == [1, 2]

    continued = fork(alice, parent, {"step": 1, "optimizer": "continued"})
    assert continued.step == 1
    continued = train_here(continued)
    assert sorted(metric_steps(continued)) == [2]  # resumed at N + 1
    assert RunEvent.objects.filter(run=continued, message="resuming from checkpoint at step 1").exists()
    # the same weights, optimizer state, data position and per-step key: the parent's very result
    assert continued.params_digest == parent.params_digest
    assert metric_steps(continued)[2] == pytest.approx(metric_steps(parent)[2], rel=1e-6)

    fresh = train_here(fork(alice, parent, {"step": 1}))
    assert fresh.fork_optimizer == "fresh" and sorted(metric_steps(fresh)) == [1, 2]  # from step 0
    start = places / "runs" / fresh.run_dir / "fork-start" / "1"
    assert RunEvent.objects.filter(
        run=fresh, message=f"starting from the weights of checkpoint {start} (new optimizer state)"
    ).exists()
    # step 1 draws the parent's step-1 prompts with the parent's key (training is deterministic: the
    # continued fork above reproduced the parent exactly), but from the checkpoint's weights, not
    # the random init: another entropy (one step at lr 1e-3 moves it by about 1e-3), other weights
    assert metric_steps(fresh)[1] != metric_steps(parent)[1]
    assert metric_steps(fresh, "kl")[1] == 0.0  # its reference is the weights it started from
    assert fresh.params_digest not in (parent.params_digest, "")
    assert [(r.pk, r.forked_from_step) for r in parent.forks.order_by("pk")] == [(continued.pk, 1), (fresh.pk, 1)]


def hf_config() -> dict:
    return {
        "seed": 0,
        "model": {"path": "tiny-chat"},
        "data": {"task": "arithmetic", "train_prompts": 16, "eval_prompts": 0},
        "rollout": {"max_new_tokens": 4},
        "batch": {"prompts_per_step": 2},
        "grpo": {"num_generations": 2, "beta": 0.0},
        "optimizer": {"weight_decay": 0.1},  # the weights move even when every reward ties
        "train": {"max_steps": 2, "samples_per_step": 2},
        "checkpoint": {"every_steps": 1, "keep_last": 3},
    }


def test_download_a_checkpoint_as_a_zipped_hugging_face_folder(alice, bob, places, sent_messages, restore_signals):
    write_tiny_model(places / "models" / "tiny-chat")
    experiment = Experiment(owner=alice, name="tiny chat")
    experiment.set_config(hf_config(), user=alice)
    run = train_here(services.launch_run(experiment))
    client = token_client(alice)

    response = client.get(f"/api/runs/{run.pk}/checkpoints/1/hf.zip")  # exported on the way
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == f'attachment; filename="run-{run.pk}-step-1.zip"'
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    root = f"run-{run.pk}-step-1"
    names = set(archive.namelist())
    assert {
        f"{root}/config.json",
        f"{root}/model.safetensors",
        f"{root}/tokenizer.json",
        f"{root}/tokenizer_config.json",
    } <= names
    assert archive.getinfo(f"{root}/model.safetensors").compress_type == zipfile.ZIP_STORED
    assert json.loads(archive.read(f"{root}/trained_by.json"))["step"] == 1
    archive.extractall(places / "unzipped")

    import transformers
    from safetensors.numpy import load_file

    folder = places / "unzipped" / root
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert transformers.AutoTokenizer.from_pretrained(folder)("1+1=")["input_ids"]
    weights = load_file(str(folder / "model.safetensors"))
    base = load_file(str(places / "models" / "tiny-chat" / "model.safetensors"))
    assert not np.allclose(weights["model.embed_tokens.weight"], base["model.embed_tokens.weight"])  # trained
    np.testing.assert_allclose(model.model.embed_tokens.weight.detach().numpy(), weights["model.embed_tokens.weight"])

    # again: exported again for this download (the first one kept no copy)
    again = client.get(f"/api/runs/{run.pk}/checkpoints/1/hf.zip")
    assert again.status_code == 200 and b"".join(again.streaming_content)[:2] == b"PK"
    # the run page links each checkpoint's zip
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/api/runs/{run.pk}/checkpoints/2/hf.zip"' in html
    # an unknown step, someone else's run, a toy run
    response = client.get(f"/api/runs/{run.pk}/checkpoints/7/hf.zip")
    assert response.status_code == 404
    assert response.json() == {"error": f"run {run.pk} has no checkpoint at step 7; it has steps 1, 2"}
    assert token_client(bob).get(f"/api/runs/{run.pk}/checkpoints/1/hf.zip").status_code == 404
    toy = Experiment(owner=alice, name="toy")
    toy.set_config(tiny_config(), user=alice)
    toy_run = Run.objects.create(
        experiment=toy, config=toy.config, status="succeeded", attempt=1, max_steps=6, run_dir="run-toy"
    )
    response = token_client(alice).get(f"/api/runs/{toy_run.pk}/checkpoints/2/hf.zip")
    assert response.status_code == 409
    assert response.json()["error"].startswith("export needs a run on a Hugging Face model (model.path)")

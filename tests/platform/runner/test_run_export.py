"""A run on a Hugging Face model through the platform's own path (the trainer child's `run_attempt`,
in this process): its samples keep the chat template's rendering with roles and special tokens, and
its checkpoints export as Hugging Face folders through `POST /api/runs/<id>/export` and the run
page's Export form. The exported folder loads in transformers and holds the trained weights. A
checkpoint's hf.zip download leaves nothing behind on the server.

The model is tests/tiny_models.py's random tiny Llama with a ChatML template, trained 2 steps."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from api_testlib import token_client
from django.contrib.auth.models import Permission
from django.urls import reverse
from platform_testlib import tiny_config

from experiments.models import Checkpoint, Experiment, RolloutSample, Run
from runner import services
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.django_db(transaction=True)  # the trainer's hooks write from their own threads


@pytest.fixture
def places(settings, tmp_path):
    """This test's own model root (with the tiny model), run directories and exports folder."""
    settings.PLATFORM_MODELS_DIRS = [tmp_path / "models"]
    settings.ARTIFACTS_DIR = tmp_path / "runs"
    settings.EXPORTS_DIR = tmp_path / "exports"
    write_tiny_model(tmp_path / "models" / "tiny-chat")
    return tmp_path


def hf_config(**changes) -> dict:
    raw = {
        "seed": 0,
        "model": {"path": "tiny-chat"},
        "data": {"task": "arithmetic", "train_prompts": 16, "eval_prompts": 0, "system_prompt": "Answer briefly."},
        "rollout": {"max_new_tokens": 4},
        "batch": {"prompts_per_step": 2},
        "grpo": {"num_generations": 2, "beta": 0.0},
        "optimizer": {"weight_decay": 0.1},  # the weights move even when every reward ties
        "train": {"max_steps": 2, "samples_per_step": 2},
        "checkpoint": {"every_steps": 1, "keep_last": 3},
    }
    raw.update(changes)
    return raw


def trained_run(user, sent_messages) -> Run:
    """Launch (the queue send is faked) and train it here, as the worker's child would."""
    from runner.attempt import run_attempt

    experiment = Experiment(owner=user, name="tiny chat")
    experiment.set_config(hf_config(), user=user)
    run = services.launch_run(experiment)
    assert sent_messages == [(run.pk, 1, run.queue)]
    Run.objects.filter(pk=run.pk).update(status="running")
    assert run_attempt(run.pk, 1) == 0
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    return run


def files_under(root: Path) -> dict[str, int]:
    """{relative path: size} of every file under `root`."""
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def post_export(client, run: Run, body: dict | None = None):
    return client.post(f"/api/runs/{run.pk}/export", json.dumps(body or {}), content_type="application/json")


def test_train_then_export_through_the_api_and_the_page(alice, bob, places, sent_messages, restore_signals):
    run = trained_run(alice, sent_messages)
    assert sorted(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [1, 2]

    # samples: the chat template's text (roles, special tokens), the messages behind it
    sample = RolloutSample.objects.filter(run=run).order_by("step", "index").first()
    assert sample.prompt.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n")
    assert sample.prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    messages = sample.extra["prompt_messages"]
    assert [m["role"] for m in messages] == ["system", "user"] and messages[1]["content"] in sample.prompt
    body = token_client(alice).get(f"/api/runs/{run.pk}/samples?step={sample.step}").json()["samples"][0]
    assert body["prompt_messages"] == messages
    assert body["prompt_segments"][:4] == [
        {"kind": "special", "text": "<|im_start|>"},
        {"kind": "role", "text": "system"},
        {"kind": "text", "text": "\nAnswer briefly."},
        {"kind": "special", "text": "<|im_end|>"},
    ]

    # a download of a checkpoint not exported yet: exported for it into a temporary folder, zipped,
    # and gone afterwards; nothing under the data dir changes, however often it is downloaded
    client = token_client(alice)
    before = files_under(places)
    for _ in range(2):
        response = client.get(f"/api/runs/{run.pk}/checkpoints/2/hf.zip")
        assert response.status_code == 200, response.content
        body = b"".join(response.streaming_content)
        assert int(response["Content-Length"]) == len(body)
        assert json.loads(zipfile.ZipFile(io.BytesIO(body)).read(f"run-{run.pk}-step-2/trained_by.json"))["step"] == 2
        assert files_under(places) == before

    # the API: newest checkpoint by default, as a folder transformers loads
    response = post_export(client, run)
    assert response.status_code == 201, response.content
    out = places / "exports" / f"run-{run.pk}-step-2"
    assert response.json() == {"path": str(out), "step": 2, "dtype": "float32"}
    import transformers
    from safetensors.numpy import load_file

    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM"
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert (
        tokenizer.apply_chat_template([{"role": "user", "content": "1+1="}], tokenize=False, add_generation_prompt=True)
        == "<|im_start|>user\n1+1=<|im_end|>\n<|im_start|>assistant\n"
    )
    exported = load_file(str(out / "model.safetensors"))
    base = load_file(str(places / "models" / "tiny-chat" / "model.safetensors"))
    assert set(exported) == set(base)
    assert not np.allclose(exported["model.embed_tokens.weight"], base["model.embed_tokens.weight"])  # trained
    np.testing.assert_allclose(model.model.embed_tokens.weight.detach().numpy(), exported["model.embed_tokens.weight"])

    # again: refused, saying where it is; an unknown step; bad input
    response = post_export(client, run)
    assert response.status_code == 409 and str(out) in response.json()["error"]
    response = post_export(client, run, {"step": 7})
    assert response.status_code == 404
    assert response.json()["error"] == f"run {run.pk} has no checkpoint at step 7; it has steps 1, 2"
    assert post_export(client, run, {"step": "two"}).json()["errors"] == {"step": "must be a whole number, got 'two'"}
    assert post_export(client, run, {"dtype": "float16"}).json()["errors"] == {
        "dtype": "must be 'float32' or 'bfloat16', got 'float16'"
    }
    assert not (places / "exports" / f"run-{run.pk}-step-7").exists()

    # someone else's run: 404; one they may see but not change: 403, like the other run actions
    assert post_export(token_client(bob), run).status_code == 404
    bob.user_permissions.add(Permission.objects.get(codename="view_run"))
    response = post_export(token_client(bob), run, {"step": 1})
    assert response.status_code == 403 and not (places / "exports" / f"run-{run.pk}-step-1").exists()

    # the run page: an Export form (with CSRF) for step 1 in bfloat16, and the exports listed
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    page = browser.get(reverse("run-detail", args=[run.pk]))
    html = page.content.decode()
    assert 'id="export-form"' in html and str(out) in html
    assert browser.post(reverse("run-export", args=[run.pk]), {"step": "1", "dtype": "bfloat16"}).status_code == 403
    token = page.cookies["csrftoken"].value
    response = browser.post(
        reverse("run-export", args=[run.pk]),
        {"step": "1", "dtype": "bfloat16", "csrfmiddlewaretoken": token},
        follow=True,
    )
    step1 = places / "exports" / f"run-{run.pk}-step-1"
    assert f"Exported run {run.pk} step 1 (bfloat16) to {step1}." in response.content.decode()
    assert json.loads((step1 / "config.json").read_text())["torch_dtype"] == "bfloat16"
    response = browser.post(
        reverse("run-export", args=[run.pk]), {"step": "1", "csrfmiddlewaretoken": token}, follow=True
    )
    assert "is already exported (or being exported) at" in response.content.decode()


def test_export_refuses_a_toy_run_and_a_run_without_checkpoints(alice, places):
    toy = Experiment(owner=alice, name="toy")
    toy.set_config(tiny_config(), user=alice)
    run = Run.objects.create(
        experiment=toy, config=toy.config, status="succeeded", attempt=1, max_steps=6, run_dir="run-toy"
    )
    response = post_export(token_client(alice), run)
    assert response.status_code == 400
    assert response.json()["error"].startswith("export needs a run on a Hugging Face model (model.path)")

    hf = Experiment(owner=alice, name="hf")
    hf.set_config(hf_config(), user=alice)
    run = Run.objects.create(
        experiment=hf, config=hf.config, status="queued", attempt=1, max_steps=2, run_dir="run-new"
    )
    response = post_export(token_client(alice), run)
    assert response.status_code == 400 and response.json()["error"].startswith(f"run {run.pk} has no checkpoint yet")
    assert not any((places / "exports").glob("*"))


def test_run_page_shows_the_export_form_only_for_a_model_run(alice_client, alice, places):
    toy = Experiment(owner=alice, name="toy")
    toy.set_config(tiny_config(), user=alice)
    run = Run.objects.create(experiment=toy, config=toy.config, status="succeeded", attempt=1, max_steps=6)
    assert 'id="export-form"' not in alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    hf = Experiment(owner=alice, name="hf")
    hf.set_config(hf_config(), user=alice)
    run = Run.objects.create(experiment=hf, config=hf.config, status="succeeded", attempt=1, max_steps=2)
    assert 'id="export-form"' in alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert hf.config["model"]["path"] == "tiny-chat"  # stored relative to the model root (no server path)

"""Security probe: one user must not occupy a worker with one huge step. Each
config field is capped on its own (PLATFORM_CONFIG_LIMITS), so their product is capped too: sequences
per step and tokens per step (settings, a `UserLimits` row per user) and the trainer's memory estimate
of a step against a worker's memory (PLATFORM_WORKER_MEMORY_BYTES). Every path onto the queue refuses
(launch, resume, retry, fork: 429, nothing queued), the worker refuses again when a run starts, and
saving the experiment stays allowed (a draft) while its plan preview says a launch would be refused."""

from __future__ import annotations

import json

import pytest
from api_testlib import make_experiment, make_run, token_client
from django.urls import reverse
from platform_testlib import tiny_config

from experiments.models import Experiment, Run
from runner.models import UserLimits

pytestmark = pytest.mark.django_db

# The probe: 4096 prompts x G 256 x 8192 completion tokens on the qwen3-0.6b preset, every
# field at or under this server's PLATFORM_CONFIG_LIMITS.
HUGE = {
    "model": {"preset": "qwen3-0.6b"},
    "batch": {"prompts_per_step": 4096},
    "grpo": {"num_generations": 256},
    "rollout": {"max_new_tokens": 8192},
    "data": {"task": "arithmetic", "train_prompts": 64},
}


def huge_experiment(user) -> Experiment:
    """The probe's config, saved through the API as a user would: creating it is allowed (201)."""
    response = token_client(user).post(
        "/api/experiments", json.dumps({"name": "huge", "config": HUGE}), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    return Experiment.objects.get(pk=response.json()["id"])


def test_the_issues_launch_is_refused_with_the_fields_and_nothing_is_queued(alice, sent_messages):
    experiment = huge_experiment(alice)
    response = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs")
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error.startswith(
        "a step of this run is too large: sequences per step: batch.prompts_per_step 4096 x "
        "grpo.num_generations 256 = 1048576, the limit is 8192; lower batch.prompts_per_step or "
        "grpo.num_generations, or an admin can raise your limit"
    )
    # tokens: 1048576 x (64 prompt + 8192 completion tokens), over 8 Mi
    assert (
        "tokens per step: 1048576 sequences x (data.max_prompt_tokens 64 + rollout.max_new_tokens 8192) = "
        "8657043456, the limit is 8388608"
    ) in error
    assert "memory: a step needs about " in error and "GiB (PLATFORM_WORKER_MEMORY_BYTES)" in error
    assert experiment.runs.count() == 0 and sent_messages == []


def test_the_web_launch_says_why(alice, alice_client, sent_messages):
    experiment = huge_experiment(alice)
    page = alice_client.post(reverse("experiment-launch", args=[experiment.pk]), follow=True).content.decode()
    assert "Cannot launch: a step of this run is too large: sequences per step: batch.prompts_per_step 4096" in page
    assert experiment.runs.count() == 0 and sent_messages == []


def test_an_admin_override_lets_one_user_launch_a_bigger_step(alice, bob, settings, sent_messages):
    settings.PLATFORM_MAX_SEQUENCES_PER_STEP = 8  # the tiny config: 4 prompts x G 4 = 16 sequences
    settings.PLATFORM_MAX_TOKENS_PER_STEP = 100  # 16 x (64 + 4) = 1088 tokens
    mine, theirs = make_experiment(alice), make_experiment(bob)
    refused = token_client(alice).post(f"/api/experiments/{mine.pk}/runs")
    assert refused.status_code == 429
    assert "= 16, the limit is 8" in refused.json()["error"] and "= 1088, the limit is 100" in refused.json()["error"]
    UserLimits.objects.create(user=alice, max_sequences_per_step=16, max_tokens_per_step=1088)
    assert token_client(alice).post(f"/api/experiments/{mine.pk}/runs").status_code == 201
    assert token_client(bob).post(f"/api/experiments/{theirs.pk}/runs").status_code == 429  # the default still holds
    UserLimits.objects.filter(user=alice).update(max_tokens_per_step=1087)  # one token short
    assert "the limit is 1087" in token_client(alice).post(f"/api/experiments/{mine.pk}/runs").json()["error"]


def test_a_step_that_cannot_fit_a_worker_is_refused_with_the_estimate_and_the_limit(alice, settings, sent_messages):
    settings.PLATFORM_WORKER_MEMORY_BYTES = 512 * 1024**2
    experiment = make_experiment(alice)
    error = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs").json()["error"]
    # the tiny config: the runtime's 0.78 GiB and a step's 0.01 GiB
    assert error.startswith("a step of this run is too large: memory: a step needs about 0.79 GiB")
    assert "more than a worker's 0.50 GiB (PLATFORM_WORKER_MEMORY_BYTES); lower " in error
    assert experiment.runs.count() == 0 and sent_messages == []


@pytest.mark.parametrize("action, status", [("retry", "failed"), ("resume", "paused")])
def test_retry_and_resume_of_a_stored_huge_run_are_refused(alice, action, status, sent_messages):
    experiment = huge_experiment(alice)
    run = make_run(alice, status=status, experiment=experiment, error="before")
    response = token_client(alice).post(f"/api/runs/{run.pk}/{action}")
    assert response.status_code == 429 and "sequences per step" in response.json()["error"]
    run.refresh_from_db()
    assert (run.status, run.attempt) == (status, 1) and sent_messages == []


def test_a_fork_of_a_run_whose_owner_limit_was_lowered_is_refused(alice, settings, tmp_path, sent_messages):
    from experiments.models import Checkpoint

    settings.ARTIFACTS_DIR = tmp_path
    parent = make_run(alice, status="succeeded", run_dir="run-parent", step=6)
    (tmp_path / "run-parent" / "checkpoints" / "2" / "params").mkdir(parents=True)
    Checkpoint.objects.create(run=parent, step=2, path="run-parent/checkpoints/2", size_bytes=1)
    UserLimits.objects.create(user=alice, max_sequences_per_step=15)
    response = token_client(alice).post(
        f"/api/runs/{parent.pk}/fork", json.dumps({"step": 2}), content_type="application/json"
    )
    assert response.status_code == 429 and "= 16, the limit is 15" in response.json()["error"]
    assert not Run.objects.filter(forked_from=parent).exists() and sent_messages == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-parent"]  # no child directory left


def test_the_worker_fails_a_stored_run_over_the_caps_at_start(alice, restore_signals):
    """A run queued before the caps (or before the owner's limit was lowered) fails when a worker
    starts it, with the same message, before any training."""
    from runner.attempt import run_attempt

    experiment = make_experiment(alice)
    run = make_run(alice, status="running", experiment=experiment)
    UserLimits.objects.create(user=alice, max_tokens_per_step=1000)
    assert run_attempt(run.pk, 1) == 1
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith(
        "a step of this run is too large: tokens per step: 16 sequences x "
        "(data.max_prompt_tokens 64 + rollout.max_new_tokens 4) = 1088, the limit is 1000"
    )
    assert run.events.filter(level="error", message=run.error).exists()


def test_the_plan_preview_shows_the_figures_the_limits_and_the_refusal(alice, alice_client):
    experiment = huge_experiment(alice)
    response = alice_client.post(
        reverse("plan-preview"), {"mode": "yaml", "name": "huge", "config_yaml": json.dumps(HUGE)}
    )
    plan = response.json()["plan"]
    assert plan["sequences_per_step"] == 1048576 and plan["tokens_per_step"] == 8657043456
    assert plan["max_sequences_per_step"] == 8192 and plan["max_tokens_per_step"] == 8388608
    assert plan["step_memory_gib"] > 1000 and plan["launch"].startswith("refused: sequences per step")
    assert "Your limits\n  sequences per step            1048576 of 8192" in response.json()["text"]
    page = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert "Memory of a step (estimate)" in page and "Launch                          refused: sequences" in page
    small = alice_client.post(
        reverse("plan-preview"), {"mode": "yaml", "name": "t", "config_yaml": json.dumps(tiny_config())}
    ).json()["plan"]
    assert small["launch"] == "allowed" and small["tokens_per_step"] == 16 * (64 + 4)

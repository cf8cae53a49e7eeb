"""Multi-user limits: queued-run caps at every path onto the queue (launch, resume, retry) with a
lock against simultaneous launches, the active-run cap when a worker takes a run, registered
queues a user may launch to, and the API's launch validating the stored config again."""

from __future__ import annotations

import importlib
import threading

import pytest
from api_testlib import make_experiment, make_run, token_client
from django.contrib.auth.models import Group
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from experiments.models import Run
from runner import limits, queues, services
from runner.limits import LaunchRefused, active_wait, limits_for, queued_refusal
from runner.models import RunQueue, UserLimits, Worker

# --- the pure rules ------------------------------------------------------------------------------


def test_queued_refusal_message():
    assert queued_refusal(19, 20) is None
    assert queued_refusal(20, 20) == "you have 20 queued runs, the limit is 20; cancel one or ask an admin"
    assert queued_refusal(1, 1) == "you have 1 queued run, the limit is 1; cancel one or ask an admin"
    assert queued_refusal(0, 0) is not None  # a limit of 0: no runs at all


def test_active_wait_message():
    assert active_wait(3, 4) is None
    assert active_wait(4, 4) == (
        "waiting: the owner has 4 active runs, the limit is 4; it starts when one of them ends"
    )


def test_step_cap_arithmetic():
    """sequences = prompts x G; tokens = sequences x (data.max_prompt_tokens + the completion budget:
    rollout.max_new_tokens, else the task's own); the refusal names the fields, values and limit."""
    from runner.step_limits import sequences_refusal, tokens_refusal
    from trainers.config import ExperimentConfig, parse_config
    from trainers.step.plan import make_plan

    plan = make_plan(
        parse_config(
            {
                "batch": {"prompts_per_step": 12},
                "grpo": {"num_generations": 5},
                "data": {"task": "arithmetic", "max_prompt_tokens": 30},
            }
        )
    )
    assert (plan.sequences_per_step, plan.completion_token_budget, plan.tokens_per_step) == (60, 6, 60 * 36)
    assert sequences_refusal(plan, 60) is None and tokens_refusal(plan, 2160) is None
    assert sequences_refusal(plan, 59) == (
        "sequences per step: batch.prompts_per_step 12 x grpo.num_generations 5 = 60, the limit is 59; lower "
        "batch.prompts_per_step or grpo.num_generations, or an admin can raise your limit (admin: Run execution > "
        "User limits)"
    )
    assert tokens_refusal(plan, 2159) == (
        "tokens per step: 60 sequences x (data.max_prompt_tokens 30 + rollout.max_new_tokens 6) = 2160, the limit "
        "is 2159; lower batch.prompts_per_step, grpo.num_generations, rollout.max_new_tokens or "
        "data.max_prompt_tokens, or an admin can raise your limit (admin: Run execution > User limits)"
    )
    jsonl = make_plan(
        ExperimentConfig.model_validate(
            {"data": {"train_path": "x.jsonl"}, "batch": {"prompts_per_step": 2}, "grpo": {"num_generations": 2}}
        )
    )
    assert jsonl.tokens_per_step == 4 * (64 + 64)  # JSONL data: 64 completion tokens unless set


def test_limits_come_from_settings_unless_overridden(alice, bob, settings):
    settings.PLATFORM_MAX_ACTIVE_RUNS_PER_USER, settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 4, 20
    settings.PLATFORM_MAX_SEQUENCES_PER_STEP, settings.PLATFORM_MAX_TOKENS_PER_STEP = 8192, 1000
    UserLimits.objects.create(user=alice, max_queued_runs=50, max_tokens_per_step=5000)  # others empty: the defaults
    settings.PLATFORM_STORAGE_QUOTA_BYTES = 10**9
    shown = (
        "max_active_runs",
        "max_queued_runs",
        "max_sequences_per_step",
        "max_tokens_per_step",
        "storage_quota_bytes",
    )
    assert [getattr(limits_for(alice), f) for f in shown] == [4, 50, 8192, 5000, 10**9]
    assert [getattr(limits_for(bob), f) for f in shown] == [4, 20, 8192, 1000, 10**9]
    assert limits.limit_values(alice)["max_tokens_per_step"] == (5000, True)  # the account page says "yours"
    assert limits.limit_values(alice)["max_active_runs"] == (4, False)


# --- queued-run cap ------------------------------------------------------------------------------


def test_launch_over_the_queued_limit_is_429_and_creates_nothing(
    alice, bob, settings, sent_messages, django_capture_on_commit_callbacks
):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 2
    experiment = make_experiment(alice)
    make_run(bob, status="queued")  # someone else's queued runs do not count
    make_run(alice, status="running")  # nor running ones
    client = token_client(alice)
    url = f"/api/experiments/{experiment.pk}/runs"
    with django_capture_on_commit_callbacks(execute=True):
        assert [client.post(url).status_code for _ in range(2)] == [201, 201]
        refused = client.post(url)
    assert refused.status_code == 429
    assert refused.json()["error"] == "you have 2 queued runs, the limit is 2; cancel one or ask an admin"
    assert experiment.runs.count() == 2 and len(sent_messages) == 2  # no third run, no third message


def test_an_admin_override_raises_one_users_limit(alice, settings, sent_messages):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 1
    experiment = make_experiment(alice)
    services.launch_run(experiment)
    with pytest.raises(LaunchRefused):
        services.launch_run(experiment)
    UserLimits.objects.create(user=alice, max_queued_runs=2)
    assert services.launch_run(experiment).status == "queued"


def test_resume_and_retry_count_too_and_leave_the_run_as_it_was(
    alice, settings, sent_messages, django_capture_on_commit_callbacks
):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 1
    queued = make_run(alice, status="queued")
    paused = make_run(alice, status="paused", experiment=queued.experiment)
    failed = make_run(alice, status="failed", experiment=queued.experiment, error="boom")
    client = token_client(alice)
    with django_capture_on_commit_callbacks(execute=True):
        for run, action in ((paused, "resume"), (failed, "retry")):
            response = client.post(f"/api/runs/{run.pk}/{action}")
            assert response.status_code == 429 and "the limit is 1" in response.json()["error"], action
    paused.refresh_from_db(), failed.refresh_from_db()
    assert (paused.status, paused.attempt, failed.status, failed.error) == ("paused", 1, "failed", "boom")
    assert sent_messages == []
    services.request_cancel(queued)  # room again
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(f"/api/runs/{paused.pk}/resume").status_code == 202
    assert sent_messages == [(paused.pk, 2, paused.queue)]


def test_web_launch_and_resume_say_why_in_a_message(alice_client, alice, settings, sent_messages):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 0
    experiment = make_experiment(alice)
    page = alice_client.post(reverse("experiment-launch", args=[experiment.pk]), follow=True).content.decode()
    assert "Cannot launch: you have 0 queued runs, the limit is 0; cancel one or ask an admin" in page
    paused = make_run(alice, status="paused", experiment=experiment)
    page = alice_client.post(reverse("run-control", args=[paused.pk, "resume"]), follow=True).content.decode()
    assert f"Run {paused.pk}: cannot resume: you have 0 queued runs" in page
    assert experiment.runs.filter(status="queued").count() == 0


def test_admin_resume_action_reports_the_refusal(admin_client, admin_user, settings, sent_messages):
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 0
    paused = make_run(admin_user, status="paused")
    response = admin_client.post(
        reverse("admin:experiments_run_changelist"),
        {"action": "resume_runs", "_selected_action": [paused.pk]},
        follow=True,
    )
    shown = [str(m) for m in response.context["messages"]]
    assert shown[0] == f"run {paused.pk}: you have 0 queued runs, the limit is 0; cancel one or ask an admin"
    assert Run.objects.get(pk=paused.pk).status == "paused"


def test_the_check_locks_the_owners_row(alice, settings, django_assert_num_queries, sent_messages):
    """The count runs after `SELECT ... FOR UPDATE` on the user's row (PostgreSQL; SQLite's
    IMMEDIATE transactions serialise writers instead), so concurrent launches take turns."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        limits.check_queued_room(alice)
    sql = [q["sql"] for q in queries.captured_queries]
    lock = next(i for i, s in enumerate(sql) if "auth_user" in s)
    count = next(i for i, s in enumerate(sql) if "COUNT(" in s.upper())
    assert lock < count
    if connection.features.has_select_for_update:
        assert "FOR UPDATE" in sql[lock]


@pytest.mark.django_db(transaction=True)
def test_simultaneous_launches_cannot_both_pass(settings, monkeypatch):
    """Two threads launch at the same moment with one queued run allowed: exactly one run is queued."""
    from django.contrib.auth import get_user_model

    monkeypatch.setattr(services, "send_run_message", lambda *args: None)
    settings.PLATFORM_MAX_QUEUED_RUNS_PER_USER = 1
    user = get_user_model().objects.create_user("racer", password="racer-pass-123")
    experiment = make_experiment(user)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []
    real_check = limits.check_queued_room

    def slow_check(owner):  # every thread has created its run before any of them counts
        barrier.wait(timeout=10) if connection.vendor != "sqlite" else None
        real_check(owner)

    monkeypatch.setattr(services, "check_queued_room", slow_check)

    def launch():
        from django.db import connections

        try:
            if connection.vendor == "sqlite":
                barrier.wait(timeout=10)
            services.launch_run(experiment)
            outcomes.append("queued")
        except LaunchRefused:
            outcomes.append("refused")
        except Exception as exc:  # noqa: BLE001 - reported below
            outcomes.append(f"error {exc!r}")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["queued", "refused", "refused", "refused"]
    assert Run.objects.filter(experiment=experiment, status="queued").count() == 1


# --- active-run cap (when a worker takes the run) ----------------------------------------------


def test_a_worker_leaves_a_run_queued_while_its_owner_is_at_the_active_limit(alice, bob, settings, monkeypatch):
    from runner import tasks

    settings.PLATFORM_MAX_ACTIVE_RUNS_PER_USER = 2
    settings.PLATFORM_ACTIVE_CAP_RETRY_S = 30
    experiment = make_experiment(alice)
    for status in ("running", "pausing"):
        make_run(alice, status=status, experiment=experiment)
    make_run(bob, status="running")
    waiting = make_run(alice, status="queued", experiment=experiment, queue="runs")
    resent, started = [], []
    monkeypatch.setattr(tasks.execute_run, "apply_async", lambda **kw: resent.append(kw))
    monkeypatch.setattr("runner.supervisor.Supervisor.run", lambda self: started.append(self.run_id) or "running")
    assert tasks.execute_run.run(waiting.pk, 1) == "" and started == []
    assert resent == [{"args": [waiting.pk, 1], "queue": "runs", "countdown": 30}]
    assert tasks.execute_run.run(waiting.pk, 1) == ""  # again: one event, not two
    events = list(waiting.events.filter(message__startswith="waiting:").values_list("message", flat=True))
    assert events == ["waiting: the owner has 2 active runs, the limit is 2; it starts when one of them ends"]
    assert Run.objects.get(pk=waiting.pk).status == "queued"
    UserLimits.objects.create(user=alice, max_active_runs=3)
    assert tasks.execute_run.run(waiting.pk, 1) == "running" and len(started) == 1


def test_two_runs_claimed_in_the_same_instant_do_not_both_pass_the_active_cap(alice, settings, monkeypatch):
    """Both messages pass the early check (the owner has no active run); the claim checks again in
    its transaction, so the second run stays queued and its message is sent again."""
    from runner import tasks
    from runner.supervisor import Supervisor

    settings.PLATFORM_MAX_ACTIVE_RUNS_PER_USER = 1
    settings.PLATFORM_ACTIVE_CAP_RETRY_S = 30
    experiment = make_experiment(alice)
    first = make_run(alice, status="queued", experiment=experiment, queue="runs")
    second = make_run(alice, status="queued", experiment=experiment, queue="runs")
    assert tasks.waits_for_active_room(first.pk, 1) is False and tasks.waits_for_active_room(second.pk, 1) is False
    resent = []
    monkeypatch.setattr(tasks.execute_run, "apply_async", lambda **kw: resent.append(kw))
    monkeypatch.setattr(tasks, "waits_for_active_room", _early_check_passes(tasks.waits_for_active_room))
    monkeypatch.setattr(Supervisor, "spawn", lambda self, run: None)
    monkeypatch.setattr(Supervisor, "wait", lambda self: 0)
    monkeypatch.setattr(Supervisor, "finalize_retrying", lambda self, code: Run.objects.get(pk=self.run_id).status)
    assert tasks.execute_run.run(first.pk, 1) == "running"
    assert tasks.execute_run.run(second.pk, 1) == ""
    assert Run.objects.get(pk=second.pk).status == "queued"
    assert resent == [{"args": [second.pk, 1], "queue": "runs", "countdown": 30}]
    assert second.events.filter(message__startswith="waiting: the owner has 1 active run,").count() == 1


def _early_check_passes(check):
    """waits_for_active_room as if the other run's claim had not committed yet: the early check
    finds room; the call that reports the claim's finding still records and re-sends."""
    return lambda run_id, attempt, waiting=None: check(run_id, attempt, waiting) if waiting else False


# --- queues ------------------------------------------------------------------------------------


def test_the_default_queue_is_registered_open_and_default(db, settings):
    """The runner's migration 0001 registers "runs"; launches that name no queue go there. Its data
    step is called here on an empty table: a transactional test run earlier in the same process
    empties every table, the migrations' rows too, so the row may be gone by now."""
    from django.apps import apps

    migration = importlib.import_module("runner.migrations.0001_initial")
    RunQueue.objects.all().delete()
    migration.create_default_queue(apps, None)
    row = RunQueue.objects.get(name=settings.CELERY_TASK_DEFAULT_QUEUE)
    assert row.is_default and row.open_to_everyone
    assert queues.default_queue_name() == "runs"


def test_queues_open_to_users_groups_or_everyone(alice, bob, staff):
    gpu = RunQueue.objects.create(name="gpu", description="H100s")
    gpu.users.add(alice)
    team = Group.objects.create(name="team")
    bob.groups.add(team)
    RunQueue.objects.create(name="team-q").groups.add(team)
    RunQueue.objects.create(name="zz-open", open_to_everyone=True)
    assert queues.allowed_queue_names(alice) == ["runs", "gpu", "zz-open"]
    assert queues.allowed_queue_names(bob) == ["runs", "team-q", "zz-open"]
    assert queues.allowed_queue_names(staff) == ["runs", "gpu", "team-q", "zz-open"]  # a superuser: all


def test_only_one_default_queue(db):
    other = RunQueue.objects.create(name="other", is_default=True)
    assert list(RunQueue.objects.filter(is_default=True)) == [other]
    assert queues.default_queue_name() == "other"


def test_the_builtin_default_queue_stays_open_without_its_row(alice, settings):
    """A flushed database (or a deleted row) leaves the settings' default queue usable by everyone."""
    RunQueue.objects.all().delete()
    assert queues.allowed_queue_names(alice) == ["runs"] and queues.resolve_queue(alice, None) == "runs"


def test_launch_to_a_queue_the_user_may_not_use(alice, bob, sent_messages):
    RunQueue.objects.create(name="gpu").users.add(bob)
    experiment = make_experiment(alice)
    client = token_client(alice)
    url = f"/api/experiments/{experiment.pk}/runs"
    forbidden = client.post(url, {"queue": "gpu"}, content_type="application/json")
    assert forbidden.status_code == 403
    assert forbidden.json()["errors"] == {"queue": "you may not launch to queue 'gpu'; your queues: runs"}
    unknown = client.post(url, {"queue": "nowhere"}, content_type="application/json")
    assert unknown.status_code == 400
    assert unknown.json()["errors"] == {"queue": "no queue named 'nowhere' is registered; your queues: runs"}
    assert experiment.runs.count() == 0 and sent_messages == []


def test_launch_warns_when_no_live_worker_reads_the_queue(alice, sent_messages):
    experiment = make_experiment(alice)
    client = token_client(alice)
    url = f"/api/experiments/{experiment.pk}/runs"
    body = client.post(url).json()
    assert body["queue"] == "runs" and "No live worker reads queue 'runs'" in body["warning"]
    Worker.objects.create(hostname="w@box", queues="gpu,runs", heartbeat_at=timezone.now())
    body = client.post(url).json()
    assert "warning" not in body
    Worker.objects.filter(hostname="w@box").update(heartbeat_at=timezone.now() - timezone.timedelta(hours=1))
    assert "warning" in client.post(url).json()  # a stale worker reads nothing


def test_web_launch_form_offers_only_allowed_queues(alice_client, alice, bob, sent_messages):
    experiment = make_experiment(alice)
    page = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert 'id="launch-queue"' not in page and '<input type="hidden" name="queue" value="runs">' in page
    RunQueue.objects.create(name="gpu").users.add(alice)
    RunQueue.objects.create(name="bobs").users.add(bob)
    page = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert '<option value="runs">' in page and '<option value="gpu">' in page and "bobs" not in page
    response = alice_client.post(reverse("experiment-launch", args=[experiment.pk]), {"queue": "gpu"}, follow=True)
    assert experiment.runs.get().queue == "gpu"
    assert "No live worker reads queue &#x27;gpu&#x27;" in response.content.decode()
    page = alice_client.post(
        reverse("experiment-launch", args=[experiment.pk]), {"queue": "bobs"}, follow=True
    ).content.decode()
    assert "Cannot launch: you may not launch to queue &#x27;bobs&#x27;; your queues: runs, gpu" in page
    assert experiment.runs.count() == 1


def test_queue_admin_pages_render(admin_client, alice):
    RunQueue.objects.create(name="gpu").users.add(alice)
    UserLimits.objects.create(user=alice, max_active_runs=1)
    for model in ("runqueue", "userlimits"):
        assert admin_client.get(reverse(f"admin:runner_{model}_changelist")).status_code == 200
        obj = {"runqueue": RunQueue, "userlimits": UserLimits}[model].objects.first()
        assert admin_client.get(reverse(f"admin:runner_{model}_change", args=[obj.pk])).status_code == 200


# --- the API's launch validates the stored config again ----------------------------------------


def test_api_launch_revalidates_the_stored_config(alice, settings, tmp_path, sent_messages):
    """A config that was valid when saved but is not now (its model folder removed) -> 400 with
    field errors, and no run."""
    experiment = make_experiment(alice)
    experiment.config = {**experiment.config, "model": {"path": str(tmp_path / "gone")}}
    experiment.save(update_fields=["config"])  # stored as is: no model folder there (any more)
    response = token_client(alice).post(f"/api/experiments/{experiment.pk}/runs")
    assert response.status_code == 400
    body = response.json()
    assert "model.path" in body["errors"] and "no longer valid" in body["error"]
    assert experiment.runs.count() == 0 and sent_messages == []

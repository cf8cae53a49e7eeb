"""End to end with real Celery processes (`manage.py worker`, `manage.py beat`) on the test database
and the configured broker: a run trains to success while its metrics stream in; pause, resume and
cancel; a worker SIGKILLed mid-run is detected by the scheduler, the run is requeued and resumes
from its newest checkpoint on a new worker, ending with each step stored once and the same
parameters as an uninterrupted run."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time

import pytest
from api_testlib import token_client
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count
from platform_testlib import tiny_config
from runner_testlib import platform_procs, wait_for

from experiments.models import (
    Checkpoint,
    Experiment,
    MetricPoint,
    RolloutSample,
    Run,
    RunEvent,
)
from runner.models import Worker
from runner.services import launch_run, request_cancel, request_pause, resume_run

pytestmark = pytest.mark.django_db(transaction=True)

# 40 short steps with a checkpoint every 4 (a checkpoint costs more than a tiny step): long
# enough to act mid-run on the tiny model.
LONG_RUN = dict(train__max_steps=40, checkpoint__every_steps=4, checkpoint__keep_last=3)
CORE_METRICS = {
    "reward/mean",
    "reward/std",
    "accuracy",
    "loss/policy",
    "grad_norm",
    "learning_rate",
    "timing/step_s",
    "throughput/tokens_per_s",
}
_reference_digest: dict[str, str] = {}  # config json -> params_digest of an uninterrupted run
STEP_VISIBLE_S = 10.0  # README: a step reaches the dashboard within 2 s; this deadline is generous


@pytest.fixture
def procs(transactional_db, tmp_path):
    """Start platform processes; they are killed before the test database is flushed."""
    with platform_procs(tmp_path) as procs:
        yield procs


def launch(name: str, config: dict) -> Run:
    user, _ = get_user_model().objects.get_or_create(username="runner-e2e")
    experiment = Experiment(owner=user, name=name, config={})
    experiment.set_config(config, user=user)
    return launch_run(experiment)


def status_of(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def assert_each_step_once(run: Run, max_steps: int) -> None:
    rows = MetricPoint.objects.filter(run=run).values("name", "step").annotate(n=Count("id"))
    assert rows and max(r["n"] for r in rows) == 1, "a (metric, step) stored twice"
    steps_by_name: dict[str, set[int]] = {}
    for r in rows:
        steps_by_name.setdefault(r["name"], set()).add(r["step"])
    assert CORE_METRICS <= set(steps_by_name)
    for name in CORE_METRICS:
        assert steps_by_name[name] == set(range(1, max_steps + 1)), name
    # rollout samples have no unique key: a replayed step must have replaced, not added, its rows
    per_step = dict(RolloutSample.objects.filter(run=run).values_list("step").annotate(n=Count("id")))
    assert per_step == {step: run.config["train"]["samples_per_step"] for step in range(1, max_steps + 1)}


def reference_digest(config: dict) -> str:
    """params_digest of `config` trained without interruption (from the success test if it ran)."""
    key = json.dumps(config, sort_keys=True)
    if key not in _reference_digest:
        from trainers import parse_config, train

        out = settings.DATA_DIR / "reference-run"
        shutil.rmtree(out, ignore_errors=True)
        _reference_digest[key] = train(parse_config(config), str(out)).params_digest
    return _reference_digest[key]


def _file_steps(path) -> set[int]:
    """Steps in the trainer's own metrics.jsonl (RunFilesHooks writes a line as it reports a step)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return set()
    steps = set()
    for line in lines:
        try:
            steps.add(json.loads(line)["step"])
        except (ValueError, KeyError):
            pass  # a line being written
    return steps


def test_worker_trains_a_run_while_metrics_stream_in(procs):
    """Every step's metrics reach the API within STEP_VISIBLE_S of the trainer reporting the step
    (the README says the dashboard sees a step within 2 s; the deadline is generous). The trainer
    reports a step to the database hooks and then writes it to metrics.jsonl; from the moment a
    step is in the file, the test waits at most STEP_VISIBLE_S for it in /api/runs/<id>/metrics."""
    config = tiny_config(**LONG_RUN)
    worker = procs.worker()
    run = launch("e2e success", config)
    client = token_client(run.experiment.owner)
    metrics_file = settings.ARTIFACTS_DIR / run.run_dir / "metrics.jsonl"
    in_file_since: dict[int, float] = {}  # step -> when the test first saw it in the file
    in_api: set[int] = set()
    seen_running_with_points = False
    deadline = time.monotonic() + 150
    while (status := status_of(run)) not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, f"run still {status}\n{procs.logs()}"
        assert worker.poll() is None, f"worker exited\n{procs.logs()}"
        now = time.monotonic()
        for step in _file_steps(metrics_file) - in_file_since.keys():
            in_file_since[step] = now
        body = client.get(f"/api/runs/{run.pk}/metrics", {"name": "reward/mean", "after_step": 0}).json()
        api_steps = {step for step, _ in body["points"]}
        seen_running_with_points |= status == "running" and bool(api_steps - in_api)
        in_api |= api_steps
        late = {step for step, since in in_file_since.items() if step not in in_api and now - since > STEP_VISIBLE_S}
        assert not late, f"steps {sorted(late)} reported but not in the API after {STEP_VISIBLE_S} s\n{procs.logs()}"
        time.sleep(0.1)
    run.refresh_from_db()
    assert run.status == "succeeded", f"{run.error}\n{procs.logs()}"
    assert seen_running_with_points, "no metric point reached the API while the run was running"
    assert len(in_file_since) >= 10, f"too few steps watched while the run trained: {sorted(in_file_since)}"
    assert _file_steps(metrics_file) == set(range(1, 41))
    body = client.get(f"/api/runs/{run.pk}/metrics", {"name": "reward/mean", "after_step": 0}).json()
    assert [step for step, _ in body["points"]] == list(range(1, 41))
    assert (run.step, run.max_steps, run.attempt, run.restarts) == (40, 40, 1, 0)
    assert len(run.params_digest) == 64 and run.latest_reward is not None
    assert run.running_s > 0 and run.started_at and run.finished_at
    assert_each_step_once(run, 40)
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [32, 36, 40]
    summary = json.loads((settings.ARTIFACTS_DIR / run.run_dir / "summary.json").read_text())
    assert summary["params_digest"] == run.params_digest
    # the worker registered itself, and the run records where it ran
    registered = Worker.objects.get(pid=worker.pid)
    assert run.worker_host == registered.hostname and registered.queues == "runs"
    _reference_digest[json.dumps(config, sort_keys=True)] = run.params_digest


def test_pause_resume_cancel_through_the_database(procs):
    config = tiny_config(train__max_steps=5000, checkpoint__every_steps=1000)
    procs.worker()
    run = launch("e2e controls", config)
    wait_for(lambda: Run.objects.get(pk=run.pk).step >= 3, 120, "step 3", procs)
    assert request_pause(Run.objects.get(pk=run.pk))
    wait_for(lambda: status_of(run) == "paused", 60, "paused", procs)
    run.refresh_from_db()
    paused_at = run.step
    assert 3 <= paused_at < 5000
    assert Checkpoint.objects.filter(run=run, step=paused_at).exists(), "a pause checkpoints first"
    assert MetricPoint.objects.filter(run=run, step__gt=paused_at).count() == 0

    assert resume_run(run)
    wait_for(
        lambda: RunEvent.objects.filter(
            run=run, attempt=2, message=f"resuming from checkpoint at step {paused_at}"
        ).exists(),
        120,
        "the resume from the pause checkpoint",
        procs,
    )
    # the resumed trainer is a new process that compiles its step again: on a loaded host that alone
    # has taken most of a minute
    wait_for(lambda: Run.objects.get(pk=run.pk).step >= paused_at + 2, 180, "progress after resume", procs)
    assert request_cancel(Run.objects.get(pk=run.pk))
    wait_for(lambda: status_of(run) == "cancelled", 60, "cancelled", procs)
    run.refresh_from_db()
    assert (run.attempt, run.restarts) == (2, 0) and run.params_digest == ""
    rows = MetricPoint.objects.filter(run=run, name="reward/mean").values_list("step", flat=True)
    assert sorted(rows) == list(range(1, run.step + 1))


def test_sigkilled_worker_is_replaced_and_the_run_resumes(procs):
    config = tiny_config(**LONG_RUN)
    first = procs.worker()
    procs.start("beat", "--loglevel", "INFO")
    run = launch("e2e sigkill", config)
    wait_for(lambda: Checkpoint.objects.filter(run=run).exists(), 150, "the first checkpoint row", procs)
    run.refresh_from_db()
    assert run.status == "running" and run.step < 40, "too late to kill mid-run"
    procs.kill(first)  # worker, its pool process and the trainer child: no chance to clean up
    killed_at_step = Run.objects.get(pk=run.pk).step
    newest_checkpoint = Checkpoint.objects.filter(run=run).order_by("-step").values_list("step", flat=True).first()
    procs.worker()

    wait_for(lambda: Run.objects.get(pk=run.pk).restarts == 1, 30, "the scheduler's requeue", procs)
    expected_digest = reference_digest(config)  # computed meanwhile if the success test did not run
    wait_for(lambda: status_of(run) in ("succeeded", "failed"), 150, "the resumed run to finish", procs)
    run.refresh_from_db()
    assert run.status == "succeeded", f"{run.error}\n{procs.logs()}"
    assert (run.restarts, run.attempt) == (1, 2)
    events = list(RunEvent.objects.filter(run=run).values_list("attempt", "message"))
    assert any(a == 1 and "lost (heartbeat" in m and "requeued, restart 1 of 3" in m for a, m in events), events
    resumed = [m for a, m in events if a == 2 and m.startswith("resuming from checkpoint at step ")]
    assert resumed, events
    resumed_from = int(resumed[0].rsplit(" ", 1)[1])
    # the newest checkpoint at the kill (one may have completed on disk just before its row)
    assert newest_checkpoint <= resumed_from <= killed_at_step + 4 and resumed_from % 4 == 0
    assert_each_step_once(run, 40)
    assert run.params_digest == expected_digest, "the resumed run differs from an uninterrupted one"


DEFAULT_SUPERVISION = {"PLATFORM_HEARTBEAT_S": None, "PLATFORM_STALE_AFTER_S": None, "PLATFORM_REAP_EVERY_S": None}
SCHEDULER_SLACK_S = 4.0  # the scheduler's own latency (tick, query) on top of STALE_AFTER_S + REAP_EVERY_S


def test_a_lost_worker_is_noticed_within_25_s_at_the_default_settings(procs):
    """The README's claim, with the scheduler (`manage.py beat`) at the default settings
    (PLATFORM_STALE_AFTER_S=20, PLATFORM_REAP_EVERY_S=5): a run whose worker's last heartbeat was
    at time T is requeued by T + 25 s (the test allows SCHEDULER_SLACK_S more) and not before
    T + 20 s. The worker here is one that wrote a heartbeat and died at once (a Run row with a
    fresh heartbeat and no process behind it), the worst case of a kill."""
    from django.utils import timezone

    assert (settings.PLATFORM_STALE_AFTER_S, settings.PLATFORM_REAP_EVERY_S) == (20, 5), "not the defaults"
    procs.start("beat", "--loglevel", "INFO", env=DEFAULT_SUPERVISION)
    # the scheduler is running its reaper once it forgets a long-silent worker row
    Worker.objects.create(hostname="long-gone@host", heartbeat_at=timezone.now() - dt.timedelta(hours=1))
    wait_for(
        lambda: not Worker.objects.filter(hostname="long-gone@host").exists(),
        60,
        "the scheduler's first reaper pass",
        procs,
    )

    user, _ = get_user_model().objects.get_or_create(username="runner-e2e")
    experiment = Experiment(owner=user, name="lost worker", config={})
    experiment.set_config(tiny_config(), user=user)
    last_heartbeat = timezone.now()
    waiting_since = time.monotonic()
    run = Run.objects.create(
        experiment=experiment,
        config=experiment.config,
        status="running",
        attempt=1,
        worker_host="lost@host",
        heartbeat_at=last_heartbeat,
        max_steps=6,
        run_dir="run-lost",
    )
    limit_s = settings.PLATFORM_STALE_AFTER_S + settings.PLATFORM_REAP_EVERY_S + SCHEDULER_SLACK_S
    wait_for(
        lambda: Run.objects.get(pk=run.pk).restarts == 1,
        limit_s - (time.monotonic() - waiting_since),
        f"the requeue within {limit_s:g} s of the last heartbeat",
        procs,
    )
    run.refresh_from_db()
    assert (run.status, run.attempt) == ("queued", 2)
    requeued = RunEvent.objects.get(run=run, attempt=1, message__contains="requeued, restart 1 of 3")
    # not before the heartbeat was PLATFORM_STALE_AFTER_S old (database timestamps, not the test's clock)
    assert (requeued.created_at - last_heartbeat).total_seconds() >= settings.PLATFORM_STALE_AFTER_S


def test_a_run_trains_from_a_file_in_the_dataset_dir(procs):
    """Through the API as a user would: a JSONL file in the dataset dir, named by a relative path;
    the worker resolves it inside the roots and trains from it."""
    dataset = settings.PLATFORM_DATASET_DIRS[0] / f"e2e-{time.time_ns()}.jsonl"
    prompts = {f"{i}+{i}=": str(2 * i) for i in range(16)}
    dataset.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in prompts.items()))
    try:
        user, _ = get_user_model().objects.get_or_create(username="runner-e2e")
        client = token_client(user)
        config = tiny_config(train__max_steps=3, checkpoint__every_steps=0)
        config["data"] = {"task": None, "train_path": dataset.name, "train_prompts": 0, "eval_prompts": 0}
        config["rewards"] = [{"name": "exact_match", "weight": 1.0}]
        response = client.post(
            "/api/experiments", json.dumps({"name": "from a file", "config": config}), content_type="application/json"
        )
        assert response.status_code == 201, response.content
        procs.worker()
        response = client.post(f"/api/experiments/{response.json()['id']}/runs")
        assert response.status_code == 201, response.content
        run = Run.objects.get(pk=response.json()["id"])
        wait_for(lambda: status_of(run) in ("succeeded", "failed"), 150, "the run to finish", procs)
        run.refresh_from_db()
        assert run.status == "succeeded", f"{run.error}\n{procs.logs()}"
        assert run.config["data"]["train_path"] == dataset.name  # stored relative; the worker resolves it
        sampled = set(RolloutSample.objects.filter(run=run).values_list("prompt", flat=True))
        assert sampled and sampled <= set(prompts), sampled  # the prompts came from the file
        assert MetricPoint.objects.filter(run=run, name="reward/mean").count() == 3
    finally:
        dataset.unlink(missing_ok=True)

"""Runs must not lie: probe cases, on both back ends:

- a run with `optimizer.learning_rate: 1e308` ends `failed`, with one line naming the step and the
  metric in run.error and in its events (no traceback), the bad step's metrics stored and the last
  good checkpoint kept;
- NaN, +inf and -inf metric values are stored (MetricPoint.value: NULL is NaN) and every metric
  answer (metrics, chart, compare) spells them "NaN", "Infinity", "-Infinity";
- a chat-message dataset with a `model.preset` (the character tokenizer, no chat template) is
  refused when the experiment is created: 400 naming data.train_path / data.train_dataset.
"""

from __future__ import annotations

import json
import math

import pytest
from api_testlib import add_points, fresh_series_cache, make_run, token_client  # noqa: F401 - fixture
from browser_testlib import logged_in_page  # noqa: F401 - fixture
from datasets_testlib import dataset_config, dataset_root, upload  # noqa: F401 - fixture
from platform_testlib import tiny_config

from experiments import run_compare
from experiments.models import Experiment, MetricPoint, Run, RunEvent
from runner import services
from runner.db_hooks import DatabaseHooks

NAN, INF = float("nan"), float("inf")


@pytest.fixture
def fresh_caches(fresh_series_cache):  # noqa: F811 - the imported fixture
    run_compare.FRAGMENT_CACHE.clear()
    yield
    run_compare.FRAGMENT_CACHE.clear()


def get(user, url: str) -> dict:
    response = token_client(user).get(url)
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def assert_strict_json(user, url: str) -> None:
    """The answer is standard JSON: no NaN / Infinity tokens (which JSON.parse refuses)."""
    text = token_client(user).get(url).content.decode()
    json.loads(text, parse_constant=lambda token: pytest.fail(f"{url}: non-standard JSON token {token}"))


# --- storage and the API ------------------------------------------------------------------------


@pytest.mark.django_db
def test_non_finite_metrics_are_stored_and_answered_as_such(alice, fresh_caches):
    run = make_run(alice, status="running")
    hooks = DatabaseHooks(run.pk, attempt=1, flush_interval_s=0, background_flush=False)
    hooks.on_step(1, {"grad_norm": 0.5, "loss/policy": 0.25, "is/weight_max": 2.0})
    base = f"/api/runs/{run.pk}"
    assert get(alice, f"{base}/chart")["series"]["grad_norm"]["values"] == [0.5]  # cached: later rows are refreshed
    hooks.on_step(2, {"grad_norm": NAN, "loss/policy": -INF, "is/weight_max": INF})
    hooks.close()

    stored = dict(MetricPoint.objects.filter(run=run, step=2).values_list("name", "value"))
    assert stored == {"grad_norm": None, "loss/policy": -INF, "is/weight_max": INF}  # NULL is NaN
    assert RunEvent.objects.filter(run=run, level="warning", message__contains="grad_norm is nan at step 2").exists()

    for _ in ("refreshed", "loaded afresh"):
        chart = get(alice, f"{base}/chart")["series"]
        assert chart["grad_norm"] == {"steps": [1, 2], "values": [0.5, "NaN"]}
        assert chart["loss/policy"]["values"] == [0.25, "-Infinity"]
        assert chart["is/weight_max"]["values"] == [2.0, "Infinity"]
        fresh = get(alice, f"{base}/metrics?after_step=1")["series"]
        assert fresh == {
            "grad_norm": [[2, "NaN"]],
            "is/weight_max": [[2, "Infinity"]],
            "loss/policy": [[2, "-Infinity"]],
        }
        compare = get(alice, f"/api/runs/compare?runs={run.pk}")["runs"][0]["series"]
        assert compare["grad_norm"]["values"] == [0.5, "NaN"]
        fresh_caches_clear()
    assert get(alice, f"{base}/metrics?name=grad_norm")["points"] == [[1, 0.5], [2, "NaN"]]
    assert get(alice, f"{base}/metrics?name=loss/policy&after_step=1")["points"] == [[2, "-Infinity"]]
    for url in (
        f"{base}/chart",
        f"{base}/metrics",
        f"{base}/metrics?name=grad_norm",
        f"/api/runs/compare?runs={run.pk}",
    ):
        assert_strict_json(alice, url)


def fresh_caches_clear() -> None:
    from experiments import metric_series

    metric_series.SERIES_CACHE.clear()
    run_compare.FRAGMENT_CACHE.clear()


@pytest.mark.django_db
def test_a_nan_survives_downsampling_in_the_chart(alice, fresh_caches):
    run = make_run(alice)
    add_points(run, {"grad_norm": [(s, float(s)) for s in range(1, 100)] + [(100, NAN)]})
    values = get(alice, f"/api/runs/{run.pk}/chart?max_points=10")["series"]["grad_norm"]["values"]
    assert len(values) <= 10 and values[-1] == "NaN"


# --- a diverging run through the platform's own path ----------------------------------------------


@pytest.mark.django_db(transaction=True)  # the trainer's hooks write from their own threads
def test_a_huge_learning_rate_fails_the_run_with_the_step_and_metric(
    alice, settings, tmp_path, sent_messages, restore_signals
):
    from runner.attempt import run_attempt

    settings.ARTIFACTS_DIR = tmp_path / "runs"
    experiment = Experiment(owner=alice, name="diverges")
    experiment.set_config(
        tiny_config(
            optimizer__learning_rate=1e308, train__max_steps=4, checkpoint__every_steps=1, checkpoint__keep_last=4
        ),
        user=alice,
    )
    run = services.launch_run(experiment)
    Run.objects.filter(pk=run.pk).update(status="running")
    assert run_attempt(run.pk, run.attempt) == 1
    run.refresh_from_db()
    assert run.status == "failed"
    assert "\n" not in run.error and "Traceback" not in run.error
    assert (
        run.error.startswith("step ") and "(non-finite): training diverged; lower optimizer.learning_rate" in run.error
    )
    bad_step = int(run.error.split(":")[0].split()[1])
    metric = run.error.split(": ", 1)[1].split(" is ")[0]
    assert bad_step < 4
    assert RunEvent.objects.filter(run=run, level="error", message=run.error).exists()
    # the bad step's metrics are stored (its grad_norm or loss as a non-finite value), the last good checkpoint kept
    value = MetricPoint.objects.get(run=run, name=metric, step=bad_step).value
    assert value is None or not math.isfinite(value)
    assert max(run.checkpoints.values_list("step", flat=True), default=0) == bad_step - 1  # no garbage weights kept
    points = get(alice, f"/api/runs/{run.pk}/metrics?name={metric}")["points"]
    assert points[-1][0] == bad_step and points[-1][1] in ("NaN", "Infinity", "-Infinity")


# --- a chat dataset with the character tokenizer --------------------------------------------------

CHAT_LINES = "".join(
    json.dumps({"prompt": [{"role": "user", "content": f"{i}+1="}], "answer": str(i + 1)}) + "\n" for i in range(6)
).encode()


@pytest.mark.django_db
def test_chat_dataset_with_a_preset_is_refused_at_create(alice, dataset_root):  # noqa: F811 - the fixture
    (dataset_root / "chat.jsonl").write_bytes(CHAT_LINES)
    config = tiny_config()
    config["data"].update(task=None, train_path="chat.jsonl")
    config["rewards"] = [{"name": "exact_match", "weight": 1.0}]
    client = token_client(alice)
    response = client.post(
        "/api/experiments", json.dumps({"name": "chat", "config": config}), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    message = response.json()["errors"]["data.train_path"]
    assert "chat messages" in message and "model.path" in message and "model.preset 'tiny'" in message

    upload(alice, "chat", CHAT_LINES)
    response = client.post(
        "/api/experiments",
        json.dumps({"name": "chat", "config": dataset_config(tiny_config, "chat")}),
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert "chat messages" in response.json()["errors"]["data.train_dataset"]
    # the same file with string prompts is fine
    upload(alice, "plain")
    response = client.post(
        "/api/experiments",
        json.dumps({"name": "plain", "config": dataset_config(tiny_config, "plain")}),
        content_type="application/json",
    )
    assert response.status_code == 201, response.content


# --- the charts mark them -----------------------------------------------------------------------


def diverged_run(user) -> Run:
    """A failed run whose grad_norm is finite at steps 1-2 and NaN at step 3, loss/policy -inf there."""
    run = make_run(user, status="failed", step=3, error="step 3: grad_norm is nan (non-finite): training diverged")
    add_points(
        run,
        {
            "grad_norm": [(1, 0.5), (2, 0.7), (3, NAN)],
            "loss/policy": [(1, 0.1), (2, 0.2), (3, -INF)],
            "reward/mean": [(1, 0.1), (2, 0.2), (3, 0.0)],
        },
    )
    return run


def marks(page, metric: str) -> list[tuple[list, list]]:
    """(x, hover texts) of the chart's non-finite marker traces, as drawn."""
    return page.locator(f".chart[data-metric='{metric}']").evaluate(
        "div => div.data.filter(t => t.mode === 'markers').map(t => [Array.from(t.x), Array.from(t.text)])"
    )


@pytest.mark.django_db(transaction=True)
def test_run_and_compare_pages_mark_non_finite_points(logged_in_page, alice, fresh_caches):  # noqa: F811
    from django.urls import reverse
    from playwright.sync_api import expect

    page = logged_in_page
    run = diverged_run(alice)
    page.goto(reverse("run-detail", args=[run.pk]))
    chart = page.locator(".chart[data-metric='grad_norm']")
    expect(chart).to_have_attribute("data-points", "3")
    expect(chart).to_have_attribute("data-non-finite", "1")
    assert marks(page, "grad_norm") == [[[3], ["step 3: NaN"]]]
    # the marker sits on the y-range's top edge, which the finite points set
    top = chart.evaluate("div => div.layout.yaxis.range[1]")
    assert chart.evaluate("div => div.data.find(t => t.mode === 'markers').y[0]") == top
    loss = page.locator(".chart[data-metric='loss/policy']")
    expect(loss).to_have_attribute("data-non-finite", "1")
    assert [[3], ["step 3: -inf"]] in marks(page, "loss/policy")
    expect(page.locator(".chart[data-metric='reward/mean']")).to_have_attribute("data-non-finite", "0")

    page.goto(f"{reverse('run-compare')}?runs={run.pk}")
    expect(page.locator("#compare")).to_have_attribute("data-state", "ready")
    expect(page.locator(".chart[data-metric='grad_norm']")).to_have_attribute("data-non-finite", "1")
    assert marks(page, "grad_norm") == [[[3], ["step 3: NaN"]]]

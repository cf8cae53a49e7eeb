"""The web UI's scripts in a real browser (Debian's Chromium through Playwright) against the live
test server: the form's live plan preview, inline errors and tab switch, and the run dashboard
filling and extending its charts, samples, checkpoints and log without a reload.

Run data is written straight into the database here (no worker): this tests the page's scripts
and their use of the JSON API, not the runner."""

from __future__ import annotations

import re

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    make_experiment,
    make_run,
)

from experiments.models import Checkpoint, Experiment, MetricPoint, RolloutSample, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page(logged_in_page):  # noqa: F811
    """A Chromium page logged in as alice, base URL = the live server (browser_testlib)."""
    return logged_in_page


def test_form_preview_errors_and_tabs(page, alice):
    page.goto(reverse("experiment-new"))
    expect(page.locator("#plan-sequences_per_step")).to_have_text("128")  # 16 prompts x G=8
    page.fill("[name=batch__prompts_per_step]", "4")
    page.fill("[name=grpo__num_generations]", "4")
    expect(page.locator("#plan-sequences_per_step")).to_have_text("16")
    # a schema error appears live next to its field, and the plan says invalid
    page.fill("[name=batch__mini_batch_prompts]", "3")
    field_errors = page.locator("[data-error-for='batch.mini_batch_prompts']")
    expect(field_errors).to_contain_text("does not divide batch.prompts_per_step=4; use 1, 2 or 4")
    expect(page.locator("#plan-preview")).to_have_attribute("data-state", "error")
    page.fill("[name=batch__mini_batch_prompts]", "2")
    expect(field_errors).to_be_empty()
    expect(page.locator("#plan-optimizer_updates_per_step")).to_have_text("2")
    # form -> YAML carries the edits over; YAML edits drive the plan; YAML -> form carries them back
    page.click("#tab-yaml")
    yaml_box = page.locator("#id_config_yaml")
    expect(yaml_box).to_be_visible()
    expect(yaml_box).to_have_value(re.compile(r"mini_batch_prompts: 2"))
    text = yaml_box.input_value().replace("prompts_per_step: 4", "prompts_per_step: 8")
    yaml_box.fill(text)
    expect(page.locator("#plan-sequences_per_step")).to_have_text("32")
    yaml_box.fill(text + "\nbatch: [\n")
    expect(page.locator("#yaml-errors")).to_contain_text("not valid YAML at line")
    page.click("#tab-form")  # refused while the YAML cannot be read
    expect(page.locator("#tab-note")).to_contain_text("Fix the YAML")
    yaml_box.fill(text)
    expect(page.locator("#yaml-errors")).to_be_empty()
    page.click("#tab-form")
    expect(page.locator("[name=batch__prompts_per_step]")).to_have_value("8")
    page.fill("[name=name]", "from the browser")
    page.click("#save-experiment")
    expect(page.locator("#launch-run")).to_be_visible()
    config = Experiment.objects.get(name="from the browser").config
    assert config["batch"] == {**config["batch"], "prompts_per_step": 8, "mini_batch_prompts": 2}


def _report(run: Run, steps: range) -> None:
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, step=s, name=name, value=value)
            for s in steps
            for name, value in (
                ("reward/mean", s / 10),
                ("reward/std", 0.1),
                ("loss/policy", -s / 100),
                ("timing/step_s", 0.5),
                ("timing/rollout_s", 0.3),
                ("eval/accuracy", 0.5),
                ("custom/new_metric", 1.0),
            )
        ]
    )
    Run.objects.filter(pk=run.pk).update(step=steps[-1], latest_reward=steps[-1] / 10)


def _points(page, metric: str) -> int:
    return int(page.locator(f"[data-metric='{metric}']").get_attribute("data-points") or 0)


def test_dashboard_updates_live(page, alice):
    run = make_run(make_experiment(alice), status="running", max_steps=20)
    _report(run, range(1, 6))
    RolloutSample.objects.create(
        run=run, step=5, index=0, prompt="1+1=", completion="2", answer="2", reward=1.0, advantage=0.5
    )
    Checkpoint.objects.create(
        run=run, step=4, path="run-1/checkpoints/4", size_bytes=2048, metrics={"reward/mean": 0.4}
    )
    run.add_event("hello from the trainer")
    page.goto(reverse("run-detail", args=[run.pk]))
    page.evaluate("window.__no_reload = 1")
    expect(page.locator("[data-metric='reward/mean']")).to_have_attribute("data-points", "5")
    expect(page.locator("[data-metric='timing/step_s']")).to_have_attribute("data-points", "5")
    expect(page.locator("[data-metric='eval/reward_mean']")).to_be_visible()  # lazy chart, shown once fed
    expect(page.locator("[data-metric='custom/new_metric']")).to_be_visible()  # unknown metric: own chart
    expect(page.locator("#samples-table tbody tr")).to_have_count(1)
    expect(page.locator("#checkpoints-table tbody tr")).to_have_count(1)
    expect(page.locator("#run-log")).to_contain_text("hello from the trainer")
    expect(page.locator("#run-step")).to_have_text("5")
    expect(page.locator("[data-control=pause]")).to_be_visible()
    expect(page.locator("[data-control=resume]")).to_be_hidden()
    # the run goes on: new points arrive without a reload (the page polls every second; the
    # generous timeout only keeps a loaded machine from failing the test)
    _report(run, range(6, 9))
    RolloutSample.objects.create(run=run, step=8, index=0, prompt="2+2=", completion="4", answer="4", reward=1.0)
    expect(page.locator("[data-metric='reward/mean']")).to_have_attribute("data-points", "8", timeout=15_000)
    expect(page.locator("#run-step")).to_have_text("8")
    expect(page.locator("#sample-step option")).to_have_count(3)  # newest + steps 8 and 5
    page.select_option("#sample-step", "5")
    expect(page.locator("#samples-table tbody")).to_contain_text("1+1=")
    # the status changes: controls follow
    Run.objects.filter(pk=run.pk).update(status="paused")
    expect(page.locator("#run-status")).to_have_text("paused")
    expect(page.locator("[data-control=resume]")).to_be_visible()
    expect(page.locator("[data-control=pause]")).to_be_hidden()
    assert page.evaluate("window.__no_reload") == 1


def test_dashboard_shows_chat_samples_with_roles_and_muted_special_tokens_as_text(page, alice):
    """A chat-rendered prompt shows its roles as labels and its special tokens as muted spans; a
    completion full of markup stays text (nothing runs, nothing is added to the page)."""
    run = make_run(make_experiment(alice), status="succeeded", max_steps=1, step=1)
    prompt = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    hostile = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"><b>5</b><|im_end|>'
    RolloutSample.objects.create(
        run=run,
        step=1,
        index=0,
        prompt=prompt,
        completion=hostile,
        answer="<i>5</i>",
        reward=1.0,
        extra={"prompt_format": "chat_template"},
    )
    page.goto(reverse("run-detail", args=[run.pk]))
    row = page.locator("#samples-table tbody tr")
    expect(row).to_have_count(1)
    prompt_cell, completion_cell = row.locator("td").nth(1), row.locator("td").nth(2)
    expect(prompt_cell.locator(".role-label")).to_have_text(["system", "user", "assistant"])
    expect(prompt_cell.locator(".tok-special")).to_have_count(5)  # 3 x <|im_start|>, 2 x <|im_end|>
    expect(prompt_cell.locator(".tok-special").first).to_have_text("<|im_start|>")
    expect(prompt_cell).to_contain_text("What is 2+3?")
    assert prompt_cell.evaluate("td => td.textContent") == prompt  # every character kept, in order
    expect(completion_cell).to_have_text(hostile)
    assert completion_cell.locator("script, img, b").count() == 0
    assert completion_cell.locator(".tok-special").inner_text() == "<|im_end|>"
    expect(row.locator("td").nth(3)).to_have_text("<i>5</i>")
    assert page.evaluate("window.__xss") is None

"""What a new user hit on the chart and page details, in a real browser (Chromium
through Playwright) against the live test server: a single point shows (a marker, its value as the
axis's tick, not 8-digit ticks); a timing chart whose slow steps are its rhythm is not covered in
compile markers; a sweep's plots before any value say so instead of drawing "Infinity" axes, and a
learning rate spanning decades gets a log axis; the checkpoint table's key metric is the one the
config keeps the best by, and its column says which; the group view says "4 of 8 shown"; the
rollout browser opens at the newest step; the evaluate form's labels are words; the sweep form
sets the trials' steps."""

from __future__ import annotations

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page, script_evaluator  # noqa: F401 (fixture)
from django.urls import reverse
from platform_testlib import tiny_config
from playwright.sync_api import expect
from test_web_charts_js import CHARTS_JS
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import Checkpoint, MetricPoint, RolloutSample
from sweeps.models import Sweep, SweepStatus, Trial

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]


def test_a_single_point_has_a_marker_and_its_value_on_the_axis(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = make_run(make_experiment(alice), status="running", step=19)
    MetricPoint.objects.create(run=run, step=19, name="reward/mean", value=189999999.0, wall_time=1e9)
    page.goto(reverse("run-detail", args=[run.pk]))
    chart = page.locator(".chart[data-metric='reward/mean']")
    expect(chart).to_have_attribute("data-points", "1")
    assert chart.evaluate("div => div.data.find(t => t.name === 'reward/mean').mode") == "lines+markers"
    expect(chart.locator(".point")).to_have_count(1)
    expect(chart).to_have_attribute("data-y-ticks", "1.9e8")
    assert chart.locator(".xtick text").all_text_contents() == ["19"]  # not 18.5, 19, 19.5


def test_slow_steps_that_are_the_runs_rhythm_are_not_compile_marks():
    with script_evaluator(CHARTS_JS) as js:
        # every other step 4x slower (an eval step): no compile marks at all
        assert js("GrpoCharts.compileSteps(Array.from({length: 40}, (_, i) => i % 2 ? 4 : 1))") == []
        # two slow steps in 40: those are marked
        assert js("GrpoCharts.compileSteps(Array.from({length: 40}, (_, i) => i === 0 || i === 9 ? 9 : 1))") == [0, 9]


def make_sweep(user, space, values):
    experiment = make_experiment(user, name="sweepme")
    sweep = Sweep.objects.create(
        experiment=experiment,
        name="s",
        space=space,
        base_config=experiment.config,
        sampler="random",
        metric="reward/mean",
        max_trials=max(len(values), 1),
        status=SweepStatus.RUNNING if not values else SweepStatus.FINISHED,
    )
    for number, (lr, value) in enumerate(values):
        run = make_run(experiment, status="succeeded", step=3)
        Trial.objects.create(
            sweep=sweep,
            number=number,
            params={"optimizer.learning_rate": lr},
            run=run,
            status="succeeded",
            value=value,
            value_step=3,
        )
    return sweep


LR_SPACE = {"optimizer.learning_rate": {"type": "float", "low": 1e-7, "high": 1e-2}}


def test_sweep_plots_before_data_say_so_and_decades_get_a_log_axis(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    empty = make_sweep(alice, LR_SPACE, [])
    page.goto(reverse("sweep-detail", args=[empty.pk]))
    expect(page.locator("#sweep-plots-empty")).to_be_visible()
    expect(page.locator("#sweep-plots-body")).to_be_hidden()
    expect(page.locator("#sweep-plots")).not_to_contain_text("Infinity")
    expect(page.locator("#sweep-plots")).to_have_attribute("data-empty", "1")

    sweep = make_sweep(alice, LR_SPACE, [(1e-7, 0.1), (2e-5, 0.5), (8e-3, 0.3)])
    page.goto(reverse("sweep-detail", args=[sweep.pk]))
    expect(page.locator("#sweep-plots-empty")).to_be_hidden()
    expect(page.locator("#sweep-scatter .xtick").first).to_be_visible()
    assert page.locator("#sweep-scatter").evaluate("div => div.layout.xaxis.type") == "log"
    xs = page.locator("#sweep-scatter .point").evaluate_all(
        "nodes => nodes.map(n => Math.round(n.getBoundingClientRect().x))"
    )
    assert len(set(xs)) == 3, xs  # three places, not three dots on top of each other at 0


def test_the_checkpoint_column_is_the_configs_keep_best_metric(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    config = tiny_config()
    config["checkpoint"] = {**config.get("checkpoint", {}), "keep_best_metric": "reward/mean"}
    run = make_run(make_experiment(alice, config=config), status="succeeded", max_steps=4)
    Checkpoint.objects.create(
        run=run, step=4, path="run/checkpoints/4", size_bytes=1024, metrics={"reward/mean": 0.9, "eval/accuracy": 0.75}
    )
    page.goto(reverse("run-detail", args=[run.pk]))
    expect(page.locator("#checkpoint-key-head")).to_contain_text("reward/mean")
    key = page.locator("#checkpoints-table tr[data-step='4'] .checkpoint-key")
    expect(key).to_have_text("0.900")
    expect(key).to_have_attribute("title", "reward/mean")


def samples(run, steps, per_group, groups=1):
    RolloutSample.objects.bulk_create(
        [
            RolloutSample(
                run=run,
                step=step,
                index=group * per_group + n,
                group=group,
                prompt="p",
                prompt_hash="0" * 32,
                completion=f"s{step}g{group}n{n}",
                reward=1.0,
                advantage=0.0,
                extra={"generation": n},
            )
            for step in steps
            for group in range(groups)
            for n in range(per_group)
        ]
    )


def test_the_group_view_says_how_many_of_the_group_it_shows(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    config = tiny_config()
    config["grpo"] = {**config.get("grpo", {}), "num_generations": 8}
    run = make_run(make_experiment(alice, config=config), status="succeeded", step=1)
    samples(run, [1], per_group=4)  # train.samples_per_step 4 kept half of group 0
    url = reverse("run-samples", args=[run.pk])
    page.goto(f"{url}?kind=train&step=1&group=0")
    expect(page.locator("#sample-group .sample-card")).to_have_count(4)
    expect(page.locator("#samples-group-count")).to_contain_text("4 of 8 shown")
    expect(page.locator("#samples-group-count")).to_contain_text("train.samples_per_step")
    page.goto(f"{url}?kind=train&step=1&group=0&limit=2")
    expect(page.locator("#samples-group-count")).to_contain_text("2 of 8 shown")
    page.click("#samples-group-all")
    expect(page.locator("#sample-group .sample-card")).to_have_count(4)


def test_the_rollout_browser_opens_at_the_newest_step(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    run = make_run(make_experiment(alice), status="succeeded", step=3)
    samples(run, [1, 2, 3], per_group=30)  # 90 samples, 50 a page
    page.goto(reverse("run-samples", args=[run.pk]))
    steps = page.locator("#samples-browse tbody tr td:first-child").all_text_contents()
    assert steps[-1] == "3" and "1" not in steps, steps
    expect(page.locator("#samples-next")).to_have_count(0)
    page.click("#samples-prev")  # older samples
    older = page.locator("#samples-browse tbody tr td:first-child").all_text_contents()
    assert older[0] == "1", older


def test_the_evaluate_form_labels_are_words(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    page.goto(reverse("evaluation-new"))
    labels = page.locator("#evaluation-form label").all_text_contents()
    assert "Max new tokens" in labels and "when the run ends" in labels, labels
    assert not any(label in ("maxnewtokens", "onend") for label in labels)


def test_the_sweep_form_sets_the_steps_of_every_trial(logged_in_page, alice, sent_messages):  # noqa: F811
    page = logged_in_page
    experiment = make_experiment(alice, name="sweepme")
    page.goto(reverse("sweep-new", args=[experiment.pk]))
    expect(page.locator("#sweep-max-steps")).to_have_value(str(experiment.config["train"]["max_steps"]))
    page.fill("#sweep-max-steps", "7")
    page.fill("#sweep-max-trials", "2")
    page.click("#sweep-submit")
    sweep = Sweep.objects.get()
    expect(page).to_have_url(f"/sweeps/{sweep.pk}/")
    assert sweep.base_config["train"]["max_steps"] == 7
    assert {t.run.max_steps for t in sweep.trials.exclude(run=None)} <= {7}

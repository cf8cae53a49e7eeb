"""Every main page fits a 390 px phone screen, in a real browser (Chromium through
Playwright) against the live test server: the document is no wider than the window (wide tables
scroll inside their own box, long words and code wrap) and the header spans the width; at
1280 px the same pages are unchanged in that (no page wider than the window either)."""

from __future__ import annotations

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from django.utils import timezone
from web_testlib import add_long_samples, fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from evaluations.models import EvaluationJob
from experiments.dataset_models import Dataset
from experiments.models import Checkpoint, MetricPoint
from sweeps.models import Sweep, SweepStatus, Trial

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
LONG = "a-rather-long-experiment-name-without-spaces-that-goes-on"


def main_pages(user) -> dict[str, str]:
    """name -> address of every main page, with data in it (long names, tables with rows)."""
    experiment = make_experiment(user, name=LONG)
    run = make_run(experiment, status="succeeded", step=3, name=LONG)
    other = make_run(experiment, status="succeeded", step=3)
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=r, step=s, name="reward/mean", value=s / 10, wall_time=1e9 + s)
            for r in (run, other)
            for s in (1, 2, 3)
        ]
    )
    Checkpoint.objects.create(run=run, step=3, path="run/checkpoints/3", size_bytes=2048, metrics={"reward/mean": 0.3})
    add_long_samples(run)
    space = {"optimizer.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True}}
    sweep = Sweep.objects.create(
        experiment=experiment,
        name=LONG[:60],
        space=space,
        base_config=experiment.config,
        metric="reward/mean",
        max_trials=1,
        status=SweepStatus.FINISHED,
    )
    Trial.objects.create(
        sweep=sweep,
        number=0,
        params={"optimizer.learning_rate": 1e-3},
        run=run,
        status="succeeded",
        value=0.3,
        value_step=3,
    )
    job = EvaluationJob.objects.create(
        owner=user,
        run=run,
        step=3,
        checkpoint=run.checkpoints.get(step=3),
        dataset_kind="task",
        task="reverse",
        dataset_key="task:reverse",
        dataset_label="task reverse",
        status="succeeded",
        accuracy=0.5,
        pass_at_1=0.5,
        reward_mean=0.2,
        k=2,
        finished_at=timezone.now(),
    )
    dataset = Dataset.objects.filter(owner=user).first()
    pages = {
        "home": reverse("index"),
        "experiments": reverse("experiment-list"),
        "new experiment": reverse("experiment-new"),
        "import": reverse("experiment-import"),
        "experiment": reverse("experiment-detail", args=[experiment.pk]),
        "versions": reverse("version-list", args=[experiment.pk]),
        "runs": reverse("run-list"),
        "run": reverse("run-detail", args=[run.pk]),
        "samples": reverse("run-samples", args=[run.pk]),
        "compare": f"{reverse('run-compare')}?runs={run.pk},{other.pk}",
        "sweeps": reverse("sweep-list"),
        "sweep": reverse("sweep-detail", args=[sweep.pk]),
        "new sweep": reverse("sweep-new", args=[experiment.pk]),
        "evaluations": reverse("evaluation-list"),
        "new evaluation": reverse("evaluation-new"),
        "evaluation": reverse("evaluation-detail", args=[job.pk]),
        "leaderboard": reverse("leaderboard"),
        "datasets": reverse("dataset-list"),
        "alerts": reverse("alert-list"),
        "account": reverse("account"),
        "api tokens": reverse("api-tokens"),
    }
    if dataset is not None:
        pages["dataset"] = reverse("dataset-detail", args=[dataset.pk])
    return pages


def widths(page, pages: dict[str, str], width: int) -> dict[str, tuple[int, int]]:
    """name -> (document scrollWidth, header width) at `width` px."""
    page.set_viewport_size({"width": width, "height": 800})
    out = {}
    for name, url in pages.items():
        page.goto(url)
        page.wait_for_load_state("load")
        out[name] = page.evaluate("""() => [document.documentElement.scrollWidth,
                                            Math.round(document.querySelector('header.topbar').getBoundingClientRect().width)]""")
        if out[name][0] > width:  # say what sticks out: the outermost elements past the right edge
            out[name].append(
                page.evaluate(
                    """(width) => [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > width + 1
                             && !(e.parentElement && e.parentElement.getBoundingClientRect().right > width + 1))
                .slice(0, 5).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + [...e.classList].join('.'))""",
                    width,
                )
            )
    return out


@pytest.mark.parametrize("width", [390, 1280])
def test_every_main_page_fits_the_screen_and_the_header_spans_it(logged_in_page, alice, width):  # noqa: F811
    page = logged_in_page
    measured = widths(page, main_pages(alice), width)
    too_wide = {name: (w, *rest) for name, (w, _, *rest) in measured.items() if w > width}
    assert too_wide == {}, f"wider than {width} px: {too_wide}"
    short_header = {name: h for name, (_, h, *_rest) in measured.items() if h < width}
    assert short_header == {}, f"header narrower than {width} px: {short_header}"


def test_a_wide_table_scrolls_inside_its_box_at_390_px(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    main_pages(alice)
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(reverse("run-list"))
    table = page.locator("#run-table")
    box = table.evaluate(
        "t => { let e = t; while (e && getComputedStyle(e).overflowX !== 'auto') "
        "e = e.parentElement; return e ? [e.clientWidth, e.scrollWidth] : null; }"
    )
    assert box is not None, "no scrolling box around the runs table"
    assert box[0] <= 390

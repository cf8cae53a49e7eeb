"""Tables and the API docs on a phone, in Chromium against the live test server, at 390 px (a phone:
Chromium's mobile emulation, which lays a page out as wide as its viewport meta tag says, 980 px
without one) and at 1280 px: a table's columns stay a few characters wide (a name, a status or a date
never stands one character a line), a wide table scrolls inside its own box, and /api/docs/ is laid
out as wide as the phone."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from api_testlib import fresh_caches  # noqa: F401 (fixture)
from browser_testlib import CHROMIUM, CHROMIUM_ARGS
from django.db import connections
from django.urls import reverse
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright
from web_testlib import add_long_samples, fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import Checkpoint, MetricPoint

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_caches")]
DEMO = "demo: SmolLM2 arithmetic"
LONG = "a-rather-long-experiment-name-without-spaces-that-goes-on"

# Per table: its cells narrower than their text's longest word, or than its first 6 characters for
# a longer word (a column squeezed to a character or two a line; a name without spaces may break after
# 6), measured in the cell's own font; how many cells were measured; and whether the table ends inside
# the window or scrolls in a box of its own that does.
TABLE_CELLS = """(id) => {
  const table = document.getElementById(id);
  const pen = document.createElement('canvas').getContext('2d');
  const wordWidth = (cell) => {
    const style = getComputedStyle(cell);
    pen.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const words = cell.innerText.split(/\\s+/).filter(Boolean).map(w => w.slice(0, 6));
    return Math.max(0, ...words.map(w => pen.measureText(w).width));
  };
  const inner = (cell) => {
    const style = getComputedStyle(cell);
    return cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  };
  const cells = [...table.querySelectorAll('th, td')]
    .filter(c => c.offsetParent !== null && c.innerText.trim().length >= 4);
  const narrow = cells.filter(c => inner(c) + 1 < wordWidth(c)).map(c => c.innerText.trim().slice(0, 24));
  let box = table;
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
  const fits = table.getBoundingClientRect().right <= innerWidth + 1
    || (box !== null && box.getBoundingClientRect().right <= innerWidth + 1);
  return {cells: cells.length, narrow, fits};
}"""


@pytest.fixture
def open_page(live_server, client, alice, monkeypatch) -> Iterator[Callable]:
    """open_page(width) -> a Chromium page logged in as alice, `width` px wide: under 800 px a
    phone (mobile emulation, touch, 3 device pixels a px). Script errors fail the test."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    client.force_login(alice)
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)

        def open_page(width: int):
            phone = width < 800
            context = browser.new_context(
                base_url=live_server.url,
                viewport={"width": width, "height": 844 if phone else 900},
                is_mobile=phone,
                has_touch=phone,
                device_scale_factor=3 if phone else 1,
            )
            cookie = {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}
            context.add_cookies([cookie])
            page = context.new_page()
            set_browser_waits(page)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            return page

        try:
            yield open_page
        finally:
            connections.close_all()
            browser.close()
    assert errors == [], f"script errors: {errors}"


def pages_with_tables(user) -> dict[str, tuple[str, str]]:
    """name -> (address, table id): the runs list, the rollout browser, a run's checkpoints and the
    experiments list, with the names, statuses and texts that squeezed their columns."""
    demo = make_experiment(user, name=DEMO)
    demo.description = "Start here: SmolLM2-135M-Instruct learns arithmetic word problems with GRPO."
    demo.save()
    long = make_experiment(user, name=LONG)
    run = make_run(demo, status="succeeded", step=3, name=LONG)
    make_run(long, status="succeeded", step=3)
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, step=s, name="reward/mean", value=s / 10, wall_time=1e9 + s) for s in (1, 2, 3)]
    )
    Checkpoint.objects.create(run=run, step=3, path="run/checkpoints/3", size_bytes=2048, metrics={"reward/mean": 0.3})
    add_long_samples(run)
    return {
        "runs": (reverse("run-list"), "run-table"),
        "rollout browser": (reverse("run-samples", args=[run.pk]), "samples-browse"),
        "checkpoints": (reverse("run-detail", args=[run.pk]), "checkpoints-table"),
        "experiments": (reverse("experiment-list"), "experiment-table"),
    }


@pytest.mark.parametrize("width", [390, 1280])
def test_table_columns_stay_words_wide_and_the_tables_fit(open_page, alice, width):
    pages = pages_with_tables(alice)
    page = open_page(width)
    measured = {}
    for name, (url, table) in pages.items():
        page.goto(url)
        expect(page.locator(f"#{table} tbody tr").first).to_be_visible()  # the checkpoints come from the API
        measured[name] = page.evaluate(TABLE_CELLS, table)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, name
    assert all(m["cells"] >= 4 for m in measured.values()), measured
    assert {name: m["narrow"] for name, m in measured.items() if m["narrow"]} == {}
    assert {name for name, m in measured.items() if not m["fits"]} == set()
    # the demo's name on the runs list: a line or two, not a character a line
    page.goto(reverse("run-list"))
    lines = page.locator("#run-table a", has_text=DEMO).first.evaluate("a => a.getClientRects().length")
    assert lines <= (3 if width < 800 else 1)


def test_the_api_docs_are_laid_out_as_wide_as_a_phone(open_page):
    page = open_page(390)
    page.goto("/api/docs/")
    expect(page.locator("#swagger-ui .opblock").first).to_be_visible()
    assert page.evaluate("innerWidth") == 390  # 980 without a viewport meta tag
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    back = page.locator("#docs-home").bounding_box()
    assert back["x"] + back["width"] <= 390

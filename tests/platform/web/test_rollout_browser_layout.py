"""The rollout browser's layout and numbers: rows scroll with the page (no 420 px inner box),
rewards and advantages to 3 significant digits (the full value on hover), and a filter bar that
fits on one line at 1280 px."""

from __future__ import annotations

import pytest
from api_testlib import make_run
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from samples_testlib import prompt_hash

from experiments.models import RolloutSample
from web.sample_views import short_number


@pytest.mark.parametrize(
    "value, text",
    [
        (0.8333333333333334, "0.833"),
        (-0.7071067811865476, "-0.707"),
        (1.224744871391589, "1.22"),
        (12.345678, "12.3"),
        (1.0, "1.0"),
        (0.0, "0.0"),
        (0.5, "0.5"),
        (-2.0, "-2.0"),
        (0.001234567, "0.00123"),
        (1.234567e-05, "1.23e-05"),
        (1234.5, "1234"),
        (123456.7, "1.23e+05"),
        (None, "–"),
        (3, "3"),
        (float("nan"), "nan"),
    ],
)
def test_short_number(value, text):
    assert short_number(value) == text


def _fill_many(run, count: int) -> None:
    RolloutSample.objects.bulk_create(
        [
            RolloutSample(
                run=run,
                step=1 + i // 8,
                index=i % 8,
                group=(i % 8) // 4,
                prompt="What is 2+2?",
                prompt_hash=prompt_hash("What is 2+2?"),
                completion=f"c{i}",
                answer="4",
                reward=(i % 3) / 3,
                advantage=-0.7071067811865476 if i % 2 else 1.224744871391589,
                extra={"generation": i % 4},
            )
            for i in range(count)
        ]
    )


@pytest.mark.django_db(transaction=True)
def test_rows_scroll_with_the_page_and_show_short_numbers(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    page.set_viewport_size({"width": 1280, "height": 900})
    run = make_run(alice, status="succeeded")
    _fill_many(run, 40)
    page.goto(f"/runs/{run.pk}/samples/")
    page.wait_for_selector("#samples-browse")
    rows = page.locator("#samples-browse tbody tr")
    assert rows.count() == 40
    # no ancestor of the table clips it to an inner scroll box: it is as tall as its rows
    clipped = page.evaluate("""() => {
        const out = [];
        for (let el = document.getElementById('samples-browse').parentElement; el; el = el.parentElement) {
            const style = getComputedStyle(el);
            if (['auto', 'scroll', 'hidden'].includes(style.overflowY) && el.clientHeight < el.scrollHeight)
                out.push(el.tagName + '.' + el.className);
        }
        return out;
    }""")
    assert clipped == []
    table_height = page.locator("#samples-browse").bounding_box()["height"]
    assert table_height > 1000, table_height  # 40 rows; the old box showed 420 px of them
    visible_rows = page.evaluate("""() => [...document.querySelectorAll('#samples-browse tbody tr')]
        .filter(tr => tr.getBoundingClientRect().bottom <= window.innerHeight).length""")
    assert visible_rows >= 8, visible_rows  # in the first screen, without scrolling anything
    # rewards and advantages to 3 significant digits; the stored value on hover
    first = rows.first.locator("td")
    cells = [first.nth(i).inner_text() for i in range(6)]
    sample = RolloutSample.objects.get(run=run, completion=cells[5])
    assert cells[2] == short_number(sample.reward) and cells[3] == short_number(sample.advantage)
    texts = page.locator("#samples-browse td.num").all_inner_texts()
    assert set(texts) <= {"0.0", "0.333", "0.667", "-0.707", "1.22"}, set(texts)
    assert {"0.333", "0.667", "-0.707", "1.22"} <= set(texts)
    assert first.nth(3).get_attribute("title") in ("-0.7071067811865476", "1.224744871391589")
    # a group's cards show the same short numbers
    rows.first.locator(".group-link").click()
    page.wait_for_selector("#sample-group")
    shown = set(page.locator(".sample-card .sample-advantage").all_inner_texts())
    assert shown <= {"-0.707", "1.22"} and shown


@pytest.mark.django_db(transaction=True)
def test_filter_bar_fits_on_one_line_at_1280_px(logged_in_page, alice):  # noqa: F811
    page = logged_in_page
    page.set_viewport_size({"width": 1280, "height": 800})
    run = make_run(alice, status="succeeded")
    page.goto(f"/runs/{run.pk}/samples/")
    bar = page.locator("#samples-filter")
    items = bar.locator(":scope > label, :scope > button, :scope > a")
    assert items.count() == 6  # steps, reward, advantage, text, Filter, clear
    tops = {
        round(items.nth(i).bounding_box()["y"] + items.nth(i).bounding_box()["height"] / 2)
        for i in range(items.count())
    }
    assert max(tops) - min(tops) <= 4, tops  # every item on the same line
    # each pair of inputs stays beside its label
    for name in ("step_min", "step_max", "reward_min", "advantage_max", "q"):
        box = bar.locator(f"input[name={name}]").bounding_box()
        assert abs(box["y"] + box["height"] / 2 - min(tops)) <= 6, name
    assert bar.evaluate("el => el.scrollWidth <= el.clientWidth")

"""The compare page without a browser: configs side by side (hand-built cases), the page's answers
to good, bad and someone else's run ids."""

from __future__ import annotations

from django.urls import reverse
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from web.diffs import FieldRow, fields_side_by_side


def test_fields_side_by_side():
    a = {"seed": 0, "optimizer": {"learning_rate": 1e-3, "name": "adamw"}, "rewards": [{"name": "x"}]}
    b = {"seed": 0, "optimizer": {"learning_rate": 3e-4, "name": "adamw"}, "rewards": [{"name": "x"}], "extra": True}
    assert fields_side_by_side([a, b]) == [
        FieldRow("seed", ["0", "0"], False),
        FieldRow("optimizer.learning_rate", ["0.001", "0.0003"], True),
        FieldRow("optimizer.name", ["adamw", "adamw"], False),
        FieldRow("rewards", ['[{"name": "x"}]', '[{"name": "x"}]'], False),
        FieldRow("extra", ["-", "true"], True),  # missing in one: differs
    ]
    assert [r.differs for r in fields_side_by_side([a])] == [False, False, False, False]


def test_compare_page(alice_client, alice, bob):
    fast = make_run(make_experiment(alice, name="fast"), status="succeeded")
    slow_config = {**fast.config, "seed": 7}
    slow = make_run(make_experiment(alice, name="slow", config=slow_config), status="succeeded")
    url = reverse("run-compare")
    response = alice_client.get(f"{url}?runs={fast.pk},{slow.pk}")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-api="/api/runs/compare?runs={fast.pk},{slow.pk}&amp;max_points=1000"' in html
    assert '<tr data-field="seed" data-differs="1" class="differs">' in html
    assert '<tr data-field="grpo.num_generations">' in html  # equal in both: hidden by diff-only
    assert "web/compare.js" in html and "web/charts.js" in html
    # typed by hand: no runs yet -> the form; bad -> 400 naming runs; someone else's -> 404
    assert alice_client.get(url).status_code == 200
    bad = alice_client.get(f"{url}?runs={fast.pk},{fast.pk}")
    assert bad.status_code == 400 and "runs: each run once" in bad.content.decode()
    assert alice_client.get(f"{url}?runs=1,x").status_code == 400
    theirs = make_run(make_experiment(bob, name="bob's"), status="succeeded")
    assert alice_client.get(f"{url}?runs={fast.pk},{theirs.pk}").status_code == 404

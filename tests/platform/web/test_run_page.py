"""New-user findings on the run page, the compare page and the demos (server side): run names (API
PATCH, the run page's form, the tables), the run page's charts for its config (a reward-per-function
chart; no KL charts at beta = 0), accuracy beside the reward, "live" only on live runs, the compare
page's fork offset and run picker, and the demos in the order to try them."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse
from platform_testlib import tiny_config
from web_testlib import fast_passwords, make_experiment, make_run  # noqa: F401 (fast_passwords: autouse)

from experiments.models import Experiment, MetricPoint
from runner import demo
from web import compare_views, run_panels

pytestmark = pytest.mark.django_db


# --- run names ----------------------------------------------------------------------------------


def test_api_patch_sets_and_clears_a_run_name(alice_client, alice):
    run = make_run(make_experiment(alice), status="succeeded")
    url = f"/api/runs/{run.pk}"
    assert alice_client.get(url).json()["name"] == ""
    answer = alice_client.patch(url, {"name": "  lr 1e-3 baseline "}, content_type="application/json")
    assert answer.status_code == 200 and answer.json()["name"] == "lr 1e-3 baseline"
    run.refresh_from_db()
    assert run.name == "lr 1e-3 baseline" and run.label == "lr 1e-3 baseline"
    # the name alone leaves tags and notes as they are
    alice_client.patch(url, {"tags": ["a"], "notes": "n"}, content_type="application/json")
    assert alice_client.patch(url, {"name": "x"}, content_type="application/json").json()["tags"] == ["a"]
    assert alice_client.patch(url, {"name": ""}, content_type="application/json").json()["name"] == ""
    run.refresh_from_db()
    assert run.label == f"#{run.pk}"


@pytest.mark.parametrize(
    "name, problem",
    [
        ("x" * 121, "at most 120 characters"),
        ("two\nlines", "one line"),
        (5, "must be a string"),
        ("bad\ud800", "Unicode"),
    ],
)
def test_api_patch_refuses_a_bad_name(alice_client, alice, name, problem):
    run = make_run(make_experiment(alice), status="succeeded")
    body = json.dumps({"name": name})
    answer = alice_client.patch(f"/api/runs/{run.pk}", body, content_type="application/json")
    assert answer.status_code == 400 and problem in answer.json()["errors"]["name"]
    run.refresh_from_db()
    assert run.name == ""


def test_another_users_run_cannot_be_renamed(client, alice, bob):
    run = make_run(make_experiment(alice), status="succeeded")
    client.force_login(bob)
    assert client.patch(f"/api/runs/{run.pk}", {"name": "mine"}, content_type="application/json").status_code == 404
    run.refresh_from_db()
    assert run.name == ""


def test_the_run_page_form_names_a_run_and_the_tables_show_it(alice_client, alice):
    experiment = make_experiment(alice, name="exp-a")
    run = make_run(experiment, status="succeeded")
    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="run-name-input"' in page and f"Run #{run.pk}" in page
    response = alice_client.post(reverse("run-labels", args=[run.pk]), {"name": "warmup 10", "tags": "t1", "notes": ""})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.name == "warmup 10"
    page = alice_client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert re.search(rf'<span id="run-name">warmup 10 <span class="muted">#{run.pk}</span>', page)
    assert "<title>Run warmup 10" in page
    # the runs list and the experiment page name it, with its id beside
    for url in (reverse("run-list"), reverse("experiment-detail", args=[experiment.pk])):
        html = alice_client.get(url).content.decode()
        assert f'warmup 10 <span class="muted small">#{run.pk}</span>' in html, url
    # a form without the name field (an older page) keeps the name
    alice_client.post(reverse("run-labels", args=[run.pk]), {"tags": "t2", "notes": ""})
    run.refresh_from_db()
    assert run.name == "warmup 10"


# --- the run page ---------------------------------------------------------------------------------


def test_reward_function_names_from_the_spec_or_the_task():
    assert run_panels.reward_function_names(tiny_config()) == ["exact_match", "prefix_match", "alphabet_match"]
    listed = tiny_config(rewards=[{"name": "char_overlap", "weight": 1.0}, {"name": "exact_match", "weight": 2.0}])
    assert run_panels.reward_function_names(listed) == ["char_overlap", "exact_match"]
    assert run_panels.reward_function_names({"data": {"task": "no-such-task"}}) == []


def test_run_panels_add_a_reward_function_chart_and_leave_kl_out_at_beta_zero():
    panels = run_panels.run_panels(tiny_config())  # beta 0
    metrics = [p["metric"] for p in panels]
    reward_at = metrics.index("reward/mean")
    functions = panels[reward_at + 1]
    assert functions["metrics"] == ["reward/exact_match", "reward/prefix_match", "reward/alphabet_match"]
    assert functions["lazy"] and functions["title"] == run_panels.REWARD_PANEL_TITLE
    assert {p["metric"]: p["lazy"] for p in panels if p["metric"] in ("kl", "loss/kl")} == {"kl": True, "loss/kl": True}
    assert run_panels.kl_note(tiny_config()).startswith("kl and loss/kl are not charted")
    with_kl = run_panels.run_panels(tiny_config(grpo__beta=0.04))
    assert {p["metric"]: p["lazy"] for p in with_kl if p["metric"] in ("kl", "loss/kl")} == {
        "kl": False,
        "loss/kl": False,
    }
    assert run_panels.kl_note(tiny_config(grpo__beta=0.04)) == ""
    # the schema's default beta (0.04) when the config has none
    assert not run_panels.beta_is_zero({"grpo": {}})


def test_run_page_shows_accuracy_beside_the_reward_and_live_only_on_live_runs(alice_client, alice):
    finished = make_run(make_experiment(alice), status="succeeded", step=2)
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=finished, step=1, name="accuracy", value=0.125, wall_time=1.0),
            MetricPoint(run=finished, step=2, name="accuracy", value=0.375, wall_time=2.0),
            MetricPoint(run=finished, step=2, name="eval/accuracy", value=0.5, wall_time=2.0),
        ]
    )
    html = alice_client.get(reverse("run-detail", args=[finished.pk])).content.decode()
    assert '<b id="run-accuracy">0.375</b>' in html and '<b id="run-eval-accuracy">0.5</b>' in html
    assert re.search(r'<span [^>]*id="run-live"[^>]*hidden>', html)
    assert 'id="kl-note"' in html
    assert 'data-metric="reward/exact_match"' in html
    running = make_run(make_experiment(alice, name="b"), status="running")
    html = alice_client.get(reverse("run-detail", args=[running.pk])).content.decode()
    assert '<b id="run-accuracy">-</b>' in html
    assert re.search(r'<span [^>]*id="run-live"[^>]*>', html) and not re.search(r'id="run-live"[^>]*hidden', html)


# --- the compare page -----------------------------------------------------------------------------


def test_fork_step_offset_by_hand():
    assert compare_views.fork_step_offset([]) == 0
    assert compare_views.fork_step_offset([(40, "fresh")]) == 40
    assert compare_views.fork_step_offset([(40, "continued")]) == 0
    # a fresh fork at 40 of a continued fork (at 10) of a fresh fork at 5: 40 + 5
    assert compare_views.fork_step_offset([(40, "fresh"), (10, "continued"), (5, "fresh")]) == 45


def test_compare_page_offsets_forks_and_labels_runs(alice_client, alice):
    experiment = make_experiment(alice)
    parent = make_run(experiment, status="succeeded", step=6, name="base")
    fresh = make_run(experiment, status="succeeded", forked_from=parent, forked_from_step=4, fork_optimizer="fresh")
    grandchild = make_run(experiment, status="queued", forked_from=fresh, forked_from_step=2, fork_optimizer="fresh")
    continued = make_run(
        experiment, status="queued", forked_from=parent, forked_from_step=4, fork_optimizer="continued"
    )
    ids = [parent.pk, fresh.pk, grandchild.pk, continued.pk]
    response = alice_client.get(reverse("run-compare") + "?runs=" + ",".join(map(str, ids)))
    assert response.status_code == 200
    meta = json.loads(
        re.search(
            r'<script id="compare-run-meta" type="application/json">(.*?)</script>', response.content.decode()
        ).group(1)
    )
    assert [(m["id"], m["step_offset"]) for m in meta] == [
        (parent.pk, 0),
        (fresh.pk, 4),
        (grandchild.pk, 6),
        (continued.pk, 0),
    ]
    assert meta[0]["label"] == f"base #{parent.pk}" and meta[1]["label"] == f"#{fresh.pk} exp"


def test_compare_picker_lists_the_users_runs_and_redirects_to_a_shareable_address(alice_client, alice, bob):
    mine = [make_run(make_experiment(alice, name=f"e{i}"), status="succeeded") for i in range(3)]
    theirs = make_run(make_experiment(bob, name="bobs"), status="succeeded")
    html = alice_client.get(reverse("run-compare")).content.decode()
    for run in mine:
        assert f'<input type="checkbox" name="run" value="{run.pk}"' in html
    assert f'value="{theirs.pk}"' not in html and 'id="picker-filter"' in html
    response = alice_client.get(reverse("run-compare") + f"?run={mine[2].pk}&run={mine[0].pk}")
    assert response.status_code == 302 and response["Location"].endswith(f"?runs={mine[2].pk}%2C{mine[0].pk}")
    # the compared runs are ticked in the picker
    html = alice_client.get(reverse("run-compare") + f"?runs={mine[2].pk},{mine[0].pk}").content.decode()
    assert f'value="{mine[0].pk}" id="pick-{mine[0].pk}" checked' in html
    assert f'value="{mine[1].pk}" id="pick-{mine[1].pk}">' in html
    # a bad pick is the 400 page, as a bad address is
    assert alice_client.get(reverse("run-compare") + "?run=x").status_code == 302
    assert alice_client.get(reverse("run-compare") + "?runs=x").status_code == 400


# --- the demos ------------------------------------------------------------------------------------


def test_demo_order_and_labels():
    """On a CPU the toy (seconds a step) comes first; on an accelerator it comes last; the code and
    judge demos after the algorithm demos."""
    names = [
        "demo: algo-gspo",
        demo.JUDGE_DEMO,
        demo.DEMO_EXPERIMENT,
        "demo: calculator-arith-notool",
        demo.CODE_DEMO,
        "demo: algo-dapo",
        demo.MODEL_DEMO_EXPERIMENT,
        "demo: calculator-arith",
    ]
    middle = [
        demo.MODEL_DEMO_EXPERIMENT,
        "demo: calculator-arith",
        "demo: calculator-arith-notool",
        "demo: algo-dapo",
        "demo: algo-gspo",
        demo.JUDGE_DEMO,
        demo.CODE_DEMO,
    ]
    assert sorted(names, key=lambda n: demo.demo_rank(n, on_accelerator=True)) == middle + [demo.DEMO_EXPERIMENT]
    assert sorted(names, key=demo.demo_rank) == [demo.DEMO_EXPERIMENT] + middle
    assert all(demo.is_demo_name(n) for n in names) and not demo.is_demo_name("demo: mine")
    assert demo.demo_label(demo.DEMO_EXPERIMENT) == "smoke test: learns the answer format"
    assert demo.demo_label(demo.MODEL_DEMO_EXPERIMENT) == "featured: a pretrained model learns"
    assert demo.demo_label("demo: calculator-arith-notool") == "tool use: the no-tool twin"
    assert demo.cpu_step_s("demo: algo-lora") == (12, 23) and demo.cpu_step_s(demo.MODEL_DEMO_EXPERIMENT) == (55, 132)


def demo_items(html: str) -> list[tuple[str, str]]:
    """(name, the item's HTML) of each demo the experiments page lists, in order."""
    return re.findall(r'<li data-demo="([^"]+)"(.*?)</li>', html, re.S)


@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_the_demo_list_starts_where_it_says_to_start(client, settings, tmp_path, accelerator):
    """The list is "in the order to try them", so its first item, and only that one, says start here,
    and no description says "Start here" against the order."""
    settings.DATA_DIR = tmp_path
    settings.PLATFORM_ACCELERATOR = accelerator
    demo.ensure_demo()
    user = Experiment.objects.get(name=demo.DEMO_EXPERIMENT).owner
    for name in (demo.MODEL_DEMO_EXPERIMENT, "demo: algo-grpo"):
        make_experiment(user, name=name)
    client.force_login(user)
    items = demo_items(client.get(reverse("experiment-list")).content.decode())
    first = demo.MODEL_DEMO_EXPERIMENT if accelerator == "gpu" else demo.DEMO_EXPERIMENT
    assert items[0][0] == first and "start here" in items[0][1]
    assert all("start here" not in body.lower() for _, body in items[1:])


def test_experiments_page_lists_the_demos_smollm2_first_and_the_toy_as_a_smoke_test(client, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.PLATFORM_ACCELERATOR = "gpu"
    username, password = demo.ensure_demo()
    toy = Experiment.objects.get(name=demo.DEMO_EXPERIMENT)
    user = toy.owner
    # what it shows and what it costs, in plain words
    assert toy.description.startswith("Smoke test: checks that training works.")
    assert "300 steps of 0.2 to 0.4 s each on a 2-core CPU, about 1 to 2 minutes in all" in toy.description
    assert "GiB of memory (the platform's estimate)" in toy.description and "4-bit" not in toy.description
    # the SmolLM2 and one algo demo, created after the toy (as serve does), with the same config
    for name in (demo.MODEL_DEMO_EXPERIMENT, "demo: algo-grpo"):
        make_experiment(user, name=name)
    client.force_login(user)
    html = client.get(reverse("experiment-list")).content.decode()
    listed = re.findall(r'<li data-demo="([^"]+)"', html)
    assert listed == [demo.MODEL_DEMO_EXPERIMENT, "demo: algo-grpo", demo.DEMO_EXPERIMENT]
    assert "smoke test: learns the answer format" in html and 'class="featured"' in html
    # an older platform's descriptions are rewritten on the next start; one someone wrote is kept
    Experiment.objects.filter(name=demo.DEMO_EXPERIMENT).update(description=demo.OLD_TOY_DESCRIPTIONS[-1])
    Experiment.objects.filter(name=demo.MODEL_DEMO_EXPERIMENT).update(description="my own notes")
    Experiment.objects.filter(name="demo: algo-grpo").update(
        description="Learning curves (configs/algo-grpo.yaml; launch it and another algo demo, then compare the runs.)"
    )
    demo.ensure_demo()
    assert Experiment.objects.get(name=demo.DEMO_EXPERIMENT).description == toy.description
    assert Experiment.objects.get(name=demo.MODEL_DEMO_EXPERIMENT).description == "my own notes"
    assert Experiment.objects.get(name="demo: algo-grpo").description.startswith(demo.DEMO_SHOWS["demo: algo-grpo"])


def test_a_demo_that_needs_the_sandbox_says_why_it_cannot_run(client, settings, tmp_path, monkeypatch):
    settings.DATA_DIR = tmp_path
    demo.ensure_demo()
    user = Experiment.objects.get(name=demo.DEMO_EXPERIMENT).owner
    make_experiment(user, name=demo.CODE_DEMO)
    client.force_login(user)
    reason = "the sandbox cannot isolate code here: bwrap: No permissions to create new namespace"
    monkeypatch.setattr(demo, "sandbox_unavailable", lambda: reason)
    items = dict(demo_items(client.get(reverse("experiment-list")).content.decode()))
    assert f"cannot run on this machine: its reward needs the code sandbox, and {reason}" in items[demo.CODE_DEMO]
    assert "cannot run" not in items[demo.DEMO_EXPERIMENT]
    # a config with the code_tests reward says so on its page too, above Launch; others say nothing
    coded = make_experiment(user, name="mine", config=tiny_config(rewards=[{"name": "code_tests", "weight": 1.0}]))
    page = client.get(reverse("experiment-detail", args=[coded.pk])).content.decode()
    assert 'id="cannot-run"' in page and reason in page and "It would fail at its first step." in page
    toy = Experiment.objects.get(name=demo.DEMO_EXPERIMENT)
    assert 'id="cannot-run"' not in client.get(reverse("experiment-detail", args=[toy.pk])).content.decode()
    monkeypatch.setattr(demo, "sandbox_unavailable", lambda: "")  # where it can run, nothing is said
    items = dict(demo_items(client.get(reverse("experiment-list")).content.decode()))
    assert "cannot run" not in items[demo.CODE_DEMO]
    assert 'id="cannot-run"' not in client.get(reverse("experiment-detail", args=[coded.pk])).content.decode()


def test_other_users_see_no_demo_list(alice_client, alice):
    make_experiment(alice, name="demo: arithmetic")  # alice's own, not the demo user's
    html = alice_client.get(reverse("experiment-list")).content.decode()
    assert 'id="demo-list"' not in html


def test_on_a_cpu_the_toy_comes_first_and_each_demo_says_how_long_a_step_takes(client, settings, tmp_path):
    """On a CPU the toy (seconds a step) is listed first; every demo shows its time a
    step, the CPU figure until this platform has run it, then the median of its newest run, which the
    experiment page shows beside Launch too."""
    from experiments.models import MetricPoint, Run

    settings.DATA_DIR = tmp_path
    settings.PLATFORM_ACCELERATOR = "cpu"
    demo.ensure_demo()
    user = Experiment.objects.get(name=demo.DEMO_EXPERIMENT).owner
    smollm2 = make_experiment(user, name=demo.MODEL_DEMO_EXPERIMENT)
    client.force_login(user)
    html = client.get(reverse("experiment-list")).content.decode()
    assert re.findall(r'<li data-demo="([^"]+)"', html) == [demo.DEMO_EXPERIMENT, demo.MODEL_DEMO_EXPERIMENT]
    assert "about 55 s to 2.2 min a step on a 2-core CPU (measured; not run here yet)" in html
    run = Run.objects.create(experiment=smollm2, config=smollm2.config, status="succeeded", attempt=1, max_steps=5)
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(run=run, step=s, name="timing/step_s", value=v)
            for s, v in enumerate([300.0, 61.0, 59.0, 64.0, 60.0], start=1)
        ]
    )
    page = client.get(reverse("experiment-detail", args=[smollm2.pk])).content.decode()
    assert f"about 61 s a step here (median of 5 steps of run {run.pk})" in page
    settings.PLATFORM_ACCELERATOR = "gpu"
    html = client.get(reverse("experiment-list")).content.decode()
    assert "not measured here yet; on a 2-core CPU: 0.2 s to 0.4 s a step" in html

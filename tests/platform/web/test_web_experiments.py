"""Experiments in the web UI: lists, YAML import/export, edit (versions), clone, diff, launch."""

from __future__ import annotations

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from platform_testlib import TINY_CONFIG_YAML, tiny_config
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    form_data,
    make_experiment,
)

from experiments.models import Experiment, Run
from web.forms import MAX_IMPORT_BYTES

pytestmark = pytest.mark.django_db


def test_experiment_list_shows_own_and_staff_sees_all(client, alice, bob, staff):
    make_experiment(alice, "alice-exp")
    make_experiment(bob, "bob-exp")
    client.force_login(alice)
    html = client.get(reverse("experiment-list")).content.decode()
    assert "alice-exp" in html and "bob-exp" not in html
    client.force_login(staff)
    html = client.get(reverse("experiment-list")).content.decode()
    assert "alice-exp" in html and "bob-exp" in html


def test_yaml_import_export_round_trip(alice_client, alice):
    upload = SimpleUploadedFile("demo-import.yaml", TINY_CONFIG_YAML.encode(), content_type="application/x-yaml")
    response = alice_client.post(reverse("experiment-import"), {"file": upload})
    assert response.status_code == 302
    experiment = alice.experiments.get(name="demo-import")
    assert experiment.config == tiny_config()
    exported = alice_client.get(reverse("experiment-export", args=[experiment.pk]))
    assert exported.status_code == 200
    assert exported["Content-Disposition"] == 'attachment; filename="demo-import.yaml"'
    text = exported.content.decode()
    assert yaml.safe_load(text) == tiny_config()
    assert text.index("seed:") < text.index("model:") < text.index("batch:")  # schema order
    # ... and the export imports again to the same config
    again = SimpleUploadedFile("again.yaml", exported.content)
    assert alice_client.post(reverse("experiment-import"), {"file": again, "name": "again"}).status_code == 302
    assert alice.experiments.get(name="again").config == experiment.config


def test_import_refuses_large_binary_and_invalid_files(alice_client, alice):
    big = SimpleUploadedFile("big.yaml", b"#" * (MAX_IMPORT_BYTES + 1))
    response = alice_client.post(reverse("experiment-import"), {"file": big})
    assert response.status_code == 400 and "the limit is" in response.content.decode()
    binary = SimpleUploadedFile("bin.yaml", b"\xff\xfe\x00bad")
    response = alice_client.post(reverse("experiment-import"), {"file": binary})
    assert response.status_code == 400 and "not UTF-8" in response.content.decode()
    invalid = SimpleUploadedFile("bad.yaml", b"batch: {prompts_per_step: 4, mini_batch_prompts: 3}\n")
    response = alice_client.post(reverse("experiment-import"), {"file": invalid})
    assert response.status_code == 400
    html = response.content.decode()
    assert "batch.mini_batch_prompts: batch.mini_batch_prompts=3 does not divide" in html
    assert 'id="mode-yaml" checked' in html and "mini_batch_prompts: 3" in html  # the text, in the editor
    assert not alice.experiments.exists()


def test_edit_creates_a_version_and_diff_shows_it(alice_client, alice):
    experiment = make_experiment(alice, "e")
    response = alice_client.get(reverse("experiment-edit", args=[experiment.pk]))
    assert response.status_code == 200
    assert 'name="batch__prompts_per_step" value="4"' in response.content.decode()
    data = form_data(experiment.config, name="e", grpo__num_generations="8")
    assert alice_client.post(reverse("experiment-edit", args=[experiment.pk]), data).status_code == 302
    experiment.refresh_from_db()
    assert experiment.config["grpo"]["num_generations"] == 8
    assert [v.number for v in experiment.versions.order_by("number")] == [1, 2]
    # saving unchanged adds no version
    alice_client.post(reverse("experiment-edit", args=[experiment.pk]), form_data(experiment.config, name="e2"))
    experiment.refresh_from_db()
    assert experiment.name == "e2" and experiment.versions.count() == 2

    url = reverse("version-diff", args=[experiment.pk])
    response = alice_client.get(url, {"a": 1, "b": 2})
    assert response.status_code == 200
    assert response.context["changes"] == [("grpo.num_generations", "4", "8")]
    html = response.content.decode()
    assert '<span class="line line-del">-  num_generations: 4</span>' in html
    assert '<span class="line line-add">+  num_generations: 8</span>' in html
    # one line a line: no blank line between the unified diff's lines
    unified = html.split('<pre class="unified">', 1)[1].split("</pre>", 1)[0]
    assert "\n" not in unified and unified.count('<span class="line ') == len(response.context["lines"])
    side = alice_client.get(url, {"a": 1, "b": 2, "view": "side"})
    assert side.status_code == 200 and 'class="diff"' in side.content.decode()
    assert alice_client.get(url, {"a": "x", "b": 2}).status_code == 400
    assert alice_client.get(url, {"a": 1, "b": 9}).status_code == 404

    v1 = alice_client.get(reverse("version-export", args=[experiment.pk, 1]))
    assert yaml.safe_load(v1.content)["grpo"]["num_generations"] == 4
    assert 'filename="e2-v1.yaml"' in v1["Content-Disposition"]
    page = alice_client.get(reverse("version-list", args=[experiment.pk])).content.decode()
    assert 'data-version="1"' in page and 'data-version="2"' in page


def test_the_diff_shows_values_as_yaml_spells_them(alice_client, alice):
    """true / false / null and JSON lists in the changed fields, never Python's True, None or ['a']."""
    experiment = make_experiment(alice, "e")
    experiment.set_config(tiny_config(eval__before_training=True, rollout__stop_at_eos=False), user=alice)
    response = alice_client.get(reverse("version-diff", args=[experiment.pk]), {"a": 1, "b": 2})
    changes = {field: (old, new) for field, old, new in response.context["changes"]}
    assert changes["eval.before_training"] == ("false", "true")
    assert changes["rollout.stop_at_eos"] == ("true", "false")
    table = response.content.decode().split('id="changed-fields"', 1)[1].split("</table>", 1)[0]
    assert "True" not in table and "False" not in table and "None" not in table
    assert '<td class="diff-del">false</td><td class="diff-add">true</td>' in table


def test_restore_version(alice_client, alice):
    experiment = make_experiment(alice, "e")
    experiment.set_config(tiny_config(seed=9), user=alice)
    response = alice_client.post(reverse("version-restore", args=[experiment.pk, 1]))
    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.config == tiny_config() and experiment.latest_version.number == 3
    assert experiment.latest_version.note == "restored v1"


def test_clone(alice_client, alice):
    experiment = make_experiment(alice, "orig", tiny_config(seed=3))
    response = alice_client.post(reverse("experiment-clone", args=[experiment.pk]))
    clone = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.status_code == 302 and response["Location"] == reverse("experiment-edit", args=[clone.pk])
    assert clone.name == "copy of orig" and clone.owner == alice and clone.config == experiment.config
    assert clone.versions.count() == 1


def test_staff_clone_belongs_to_staff(client, alice, staff):
    experiment = make_experiment(alice, "orig")
    client.force_login(staff)
    client.post(reverse("experiment-clone", args=[experiment.pk]))
    assert Experiment.objects.get(name="copy of orig").owner == staff


def test_launch_creates_a_queued_run(alice_client, alice, sent_messages, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice, "e")
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(reverse("experiment-launch", args=[experiment.pk]))
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("run-detail", args=[run.pk])
    assert run.status == "queued" and run.experiment == experiment and run.config == experiment.config
    assert run.max_steps == 6 and run.config_version == experiment.latest_version
    assert sent_messages == [(run.pk, 1, run.queue)]
    assert alice_client.get(reverse("experiment-launch", args=[experiment.pk])).status_code == 405


def test_launch_refuses_a_config_the_schema_now_refuses(alice_client, alice, sent_messages):
    experiment = make_experiment(alice, "e")
    Experiment.objects.filter(pk=experiment.pk).update(config={**experiment.config, "batch": {"prompts_per_step": 0}})
    response = alice_client.post(reverse("experiment-launch", args=[experiment.pk]))
    assert response.status_code == 400
    assert "batch.prompts_per_step" in response.content.decode()
    assert not Run.objects.exists() and sent_messages == []


def test_detail_page_elements(alice_client, alice):
    experiment = make_experiment(alice, "e")
    html = alice_client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    for element in (
        'id="launch-run"',
        'id="clone-experiment"',
        'id="export-yaml"',
        'id="edit-experiment"',
        'id="config-yaml"',
        'id="plan-text"',
        'id="version-table"',
    ):
        assert element in html


def test_bad_input_answers_4xx_never_500(alice_client, alice):
    experiment = make_experiment(alice, "e")
    huge = "9" * 30
    cases = [
        ("get", f"/experiments/{huge}/", {}),
        ("get", f"/experiments/{'9' * 18}/", {}),
        ("get", reverse("version-diff", args=[experiment.pk]), {"a": huge, "b": 1}),
        ("get", reverse("version-diff", args=[experiment.pk]), {}),
        ("get", f"/experiments/{experiment.pk}/versions/{'9' * 18}/config.yaml", {}),
        ("get", reverse("run-list"), {"experiment": huge}),
        ("post", reverse("experiment-new"), {}),
        ("post", reverse("experiment-new"), {**form_data(), "mode": "bogus"}),
        ("post", reverse("experiment-new"), {"name": "x" * 300, "mode": "yaml", "config_yaml": ""}),
        ("post", reverse("experiment-import"), {}),
        ("get", reverse("experiment-new"), {"example": "nope"}),
    ]
    for method, url, data in cases:
        response = getattr(alice_client, method)(url, data)
        assert 400 <= response.status_code < 500, (url, data, response.status_code)
    assert alice_client.get(reverse("experiment-list"), {"page": "last-ish"}).status_code == 200

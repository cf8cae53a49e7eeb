"""The experiment form's layout: a basic view (model, data, rewards, G, batch, steps, learning rate)
open at the top, every other field in a collapsed group named after its schema section, opened when
it holds an error or a value other than the default; collapsed fields are still submitted. The plan
preview's text wraps instead of being cut off."""

from __future__ import annotations

import re

import pytest
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from platform_testlib import tiny_config
from playwright.sync_api import expect
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    form_data,
    make_experiment,
)

from experiments.models import Experiment
from trainers.config import field_specs, iter_field_specs
from web.config_form import is_default
from web.forms import BASIC_FIELDS, ExperimentForm

SPECS = {spec.path: spec for spec in iter_field_specs()}


def _details(html: str, key: str) -> str:
    """The opening tag of the group of section `key`."""
    return re.search(rf'<details class="section group" id="section-{key}"[^>]*>', html).group(0)


def test_is_default_compares_values_not_texts():
    lr = SPECS["optimizer.learning_rate"]
    assert is_default(lr, str(lr.default)) and is_default(lr, f"{lr.default:e}")  # 1e-06 and 1.000000e-06
    assert not is_default(lr, "0.5")
    temperature = SPECS["rollout.temperature"]
    assert is_default(temperature, str(temperature.default)) and not is_default(temperature, "0.25")
    stop = SPECS["rollout.stop_at_eos"]  # a checkbox
    assert is_default(stop, stop.default) and not is_default(stop, not stop.default)
    assert not is_default(SPECS["model.lora.rank"], "nonsense")  # text the schema will refuse


def test_layout_puts_the_basic_fields_first_and_every_other_field_in_its_section():
    basics, groups = ExperimentForm(config=tiny_config()).layout()
    assert [row.path for row in basics] == list(BASIC_FIELDS)
    grouped = [row.path for group in groups for row in group.rows]
    assert sorted(grouped + list(BASIC_FIELDS)) == sorted(SPECS)  # every field exactly once
    assert all(row.spec.section == (group.spec.key) for group in groups for row in group.rows)
    assert "rewards" not in [group.spec.key for group in groups]  # its one field is basic
    assert [g.spec.key for g in groups] == [s.key for s in field_specs() if s.key != "rewards"]


@pytest.mark.django_db
def test_groups_open_only_for_a_changed_value_or_an_error(alice_client, alice):
    html = alice_client.get(reverse("experiment-new")).content.decode()  # the schema's defaults
    assert 'id="section-basics"' in html
    basics = html.split('id="section-basics"', 1)[1].split("</fieldset>", 1)[0]
    assert '<span class="key">model.path</span>' in basics  # the whole path, outside its section
    assert '<span class="key">temperature</span>' in html  # in the rollout group: its key
    for key in ("rollout", "async", "mesh", "checkpoint", "eval"):
        assert " open" not in _details(html, key), key
    # an experiment whose rollout temperature is not the default: that group shows open
    config = tiny_config()
    config["rollout"]["temperature"] = 0.25
    experiment = make_experiment(alice, config=config)
    html = alice_client.get(reverse("experiment-edit", args=[experiment.pk])).content.decode()
    assert " open" in _details(html, "rollout") and " open" not in _details(html, "async")
    # an error in a collapsed group opens it
    response = alice_client.post(reverse("experiment-new"), form_data(async__importance_sampling__max="-1"))
    assert response.status_code == 400
    html = response.content.decode()
    assert "async.importance_sampling.max" in response.context["form"].config_errors
    assert " open" in _details(html, "async")


@pytest.mark.django_db
def test_collapsed_fields_are_still_submitted(alice_client, alice):
    response = alice_client.post(
        reverse("experiment-new"), form_data(name="kept", rollout__temperature="0.5", eval__temperature="0.7")
    )
    assert response.status_code == 302
    config = Experiment.objects.get(name="kept").config
    assert config["rollout"]["temperature"] == 0.5 and config["eval"]["temperature"] == 0.7


# --- in a browser ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_form_is_short_and_an_error_opens_its_group(logged_in_page):  # noqa: F811
    page = logged_in_page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(reverse("experiment-new"))
    expect(page.locator("#plan-sequences_per_step")).to_have_text("128")
    form_height = page.locator("#experiment-form").bounding_box()["height"]
    assert form_height < 2600, form_height  # about 6000 px with every section open
    assert page.locator("details.group[open]").count() == 0
    assert not page.locator("[name=rollout__temperature]").is_visible()
    expect(page.locator("[name=batch__prompts_per_step]")).to_be_visible()
    # the open-all button shows every field (the page grows), close-all hides them again
    page.click("#groups-open")
    expect(page.locator("[name=rollout__temperature]")).to_be_visible()
    assert page.locator("#experiment-form").bounding_box()["height"] > form_height + 1500
    page.click("#groups-close")
    expect(page.locator("[name=rollout__temperature]")).to_be_hidden()
    # an error for a field in a collapsed group (from the YAML tab) opens that group
    page.click("#tab-yaml")
    yaml_box = page.locator("#id_config_yaml")
    expect(page.locator("#experiment-form")).to_have_class(re.compile(r"\bmode-yaml\b"))  # the switch is done
    expect(yaml_box).to_have_value(re.compile(r"importance_sampling:"))
    yaml_box.fill(re.sub(r"(importance_sampling:\n(?:\s+\w+: .*\n)*?\s+max:) \S+", r"\1 -1", yaml_box.input_value()))
    expect(page.locator("#plan-errors")).to_contain_text("async.importance_sampling.max")
    page.click("#tab-form")
    errors = page.locator("[data-error-for='async.importance_sampling.max']")
    expect(errors).to_be_visible()
    expect(page.locator("#section-async")).to_have_attribute("open", "")
    expect(page.locator("#section-mesh")).not_to_have_attribute("open", "")
    # closed by hand, it opens again when the live preview reports the error once more
    page.click("#section-async > summary")
    expect(errors).to_be_hidden()
    page.fill("[name=train__max_steps]", "7")
    expect(errors).to_be_visible()


@pytest.mark.django_db(transaction=True)
def test_plan_text_wraps_inside_the_panel(logged_in_page):  # noqa: F811
    page = logged_in_page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(reverse("experiment-new"))
    plan_text = page.locator("#plan-text")
    expect(plan_text).not_to_be_empty()
    widths = plan_text.evaluate("el => [el.scrollWidth, el.clientWidth]")
    assert widths[0] <= widths[1], widths  # nothing cut off or hidden behind a scroll bar
    panel = page.locator("#plan-preview").bounding_box()
    box = plan_text.bounding_box()
    assert box["x"] + box["width"] <= panel["x"] + panel["width"] + 1

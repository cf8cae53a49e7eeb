"""Multi-line text fields of the config form: a field the schema marks multiline
(`data.system_prompt`, `json_schema_extra={"multiline": True}` -> FieldSpec.multiline) is a text
area, so its line breaks survive the form, the switch to YAML and back; a text area's CR LF line
breaks are stored as LF. The flag comes from the schema: the template and forms name no field."""

from __future__ import annotations

import re

import pytest
import yaml
from browser_testlib import logged_in_page  # noqa: F401 (fixture)
from django.urls import reverse
from playwright.sync_api import expect
from web_testlib import fast_passwords  # noqa: F401 (fast_passwords: autouse)

from trainers.config import iter_field_specs
from web import config_form

SPECS = {spec.path: spec for spec in iter_field_specs()}
PROMPT = "You are terse.\nAnswer in one line.\n\nNever apologise."


def test_the_schema_marks_the_system_prompt_and_judge_template_multiline_and_no_one_line_field():
    assert SPECS["data.system_prompt"].multiline is True
    assert SPECS["data.system_prompt"].as_dict()["multiline"] is True
    assert {p for p, s in SPECS.items() if s.multiline} == {"data.system_prompt", "judge.template"}


def test_a_judge_template_keeps_its_line_breaks():
    template = "Question: {question}\r\nAnswer: {completion}\r\nYes or No?"
    assert config_form.value_from_text(SPECS["judge.template"], template) == template.replace("\r\n", "\n")


def test_form_text_keeps_line_breaks_and_turns_crlf_into_lf():
    spec = SPECS["data.system_prompt"]
    assert config_form.value_from_text(spec, PROMPT.replace("\n", "\r\n")) == PROMPT
    assert config_form.value_from_text(spec, "  ") is None  # nullable: empty is null, as before
    values = config_form.form_values({"data": {"system_prompt": PROMPT}})
    assert values["data__system_prompt"] == PROMPT
    assert config_form.config_from_values(values)["data"]["system_prompt"] == PROMPT


@pytest.mark.django_db(transaction=True)
def test_the_form_shows_a_text_area_whose_line_breaks_reach_the_yaml_and_come_back(logged_in_page):  # noqa: F811
    page = logged_in_page
    page.goto(reverse("experiment-new"))
    box = page.locator("[name=data__system_prompt]")
    assert box.evaluate("e => e.tagName") == "TEXTAREA"
    if not box.is_visible():
        page.click("#section-data > summary")
    box.fill(PROMPT)
    page.click("#tab-yaml")
    yaml_box = page.locator("#id_config_yaml")
    expect(yaml_box).to_be_visible()
    # the tab switch fills the YAML from the server's answer (the plan preview's sync): wait for it
    expect(yaml_box).to_have_value(re.compile("Never apologise"))
    assert yaml.safe_load(yaml_box.input_value())["data"]["system_prompt"] == PROMPT
    changed = yaml.safe_load(yaml_box.input_value())
    changed["data"]["system_prompt"] = PROMPT + "\nLast line."
    yaml_box.fill(yaml.safe_dump(changed, sort_keys=False))
    page.click("#tab-form")
    expect(box).to_have_value(PROMPT + "\nLast line.")

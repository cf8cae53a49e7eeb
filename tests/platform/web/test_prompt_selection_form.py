"""Prompt selection from the platform: the experiment form (generated from the schema) takes
rollout.prompt_selection and its probabilities, refuses bad settings next to the field that names
them, and the run page gets a chart for each selection/* metric once a run reports it."""

from __future__ import annotations

import pytest
from django.urls import reverse
from web_testlib import fast_passwords, form_data  # noqa: F401 (fast_passwords: autouse)

from web.dashboard import chart_panels

pytestmark = pytest.mark.django_db


def test_the_form_saves_prompt_selection(alice_client, alice):
    data = form_data(
        name="select",
        rollout__prompt_selection=True,
        rollout__prompt_selection_base_skip_probability="0.3",
        rollout__prompt_selection_max_skip_probability="0.8",
    )
    data["rollout__prompt_selection"] = "on"
    assert alice_client.post(reverse("experiment-new"), data).status_code == 302
    rollout = alice.experiments.get(name="select").config["rollout"]
    assert rollout["prompt_selection"] is True
    assert (rollout["prompt_selection_base_skip_probability"], rollout["prompt_selection_max_skip_probability"]) == (
        0.3,
        0.8,
    )


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"rollout__prompt_selection": "on", "async__enabled": "on"}, "rollout.prompt_selection", "async.enabled"),
        ({"rollout__prompt_selection_max_skip_probability": "1"}, "rollout.prompt_selection_max_skip_probability", "1"),
    ],
)
def test_the_form_refuses_bad_selection_settings_at_the_field(alice_client, changes, field, words):
    response = alice_client.post(reverse("experiment-new"), form_data(**changes))
    assert response.status_code == 400
    assert words in response.context["form"].config_errors[field]


def test_each_selection_metric_gets_a_chart_shown_once_reported():
    panels = {panel["metric"]: panel for panel in chart_panels()}
    for name in ("selection/prompts_skipped", "selection/completions_saved", "selection/flat_group_fraction"):
        assert panels[name]["metrics"] == [name] and panels[name]["lazy"] is True

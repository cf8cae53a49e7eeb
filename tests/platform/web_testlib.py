"""Helpers the web tests import: form data for a config, experiments and runs owned by a user."""

from __future__ import annotations

import pytest
from platform_testlib import tiny_config

from experiments.models import Experiment, RolloutSample, Run
from web.config_form import form_values, html_name


def form_data(config: dict | None = None, name: str = "exp", **changes) -> dict:
    """What a browser posts for `config` on the form tab, with `changes` keyed by dotted path
    (`{"batch.mini_batch_prompts": "3"}` via changes={"batch__mini_batch_prompts": "3"})."""
    values = form_values(tiny_config() if config is None else config)
    values.update({html_name(k.replace("__", ".")): v for k, v in changes.items()})
    data = {k: v for k, v in values.items() if v is not False}  # an unchecked box is not sent
    data.update({k: "on" for k, v in values.items() if v is True})
    data.update(name=name, mode="form")
    return data


def make_experiment(user, name: str = "exp", config: dict | None = None) -> Experiment:
    experiment = Experiment(owner=user, name=name)
    experiment.set_config(config or tiny_config(), user=user, note="test")
    return experiment


def make_run(experiment: Experiment, status: str = "queued", **fields) -> Run:
    fields.setdefault("max_steps", experiment.config["train"]["max_steps"])
    return Run.objects.create(experiment=experiment, config=experiment.config, status=status, attempt=1, **fields)


def add_long_samples(run: Run, count: int = 2) -> None:
    """`count` rollout samples of step 1 whose prompt and completion are long enough to squeeze a
    page's columns (the layout tests)."""
    RolloutSample.objects.bulk_create(
        [
            RolloutSample(
                run=run,
                step=1,
                index=i,
                group=0,
                prompt="What is 12 + 30? " * 8,
                prompt_hash="0" * 32,
                completion="The answer is 42. " * 20,
                reward=1.0,
                advantage=0.5,
            )
            for i in range(count)
        ]
    )


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The user fixtures hash passwords; the default hasher costs ~0.5 s each. Import this into a
    test module (autouse) to hash with MD5 there."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

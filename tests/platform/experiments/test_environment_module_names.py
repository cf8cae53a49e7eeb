"""Security probe: the platform never imports a module a user names.

`env.name` may be a dotted path `package.module:Class`. On the platform, a config is checked inside
the web server and again on a worker; importing the named module there would run its top-level
code (any installed module: `this`, `venv.__main__`, `jax`, a test module...). So the platform accepts
a dotted path only from the modules its administrator lists (PLATFORM_ENVIRONMENT_MODULES, empty by
default), decided from the name before any import, with one answer whether or not such a module
exists. Here a planted package writes a file when imported; it is named through every route a
config takes (API create / config_yaml / overrides / update / launch, the web form, its YAML tab,
import, the plan preview, a sweep over env.name, a worker starting a stored config, an evaluation
job of a stored run) and no route imports it. The CLI keeps dotted paths (tests/trainers/envs/test_envs.py)."""

from __future__ import annotations

import json
import sys
import uuid

import pytest
import yaml
from api_testlib import make_experiment, make_run, token_client
from django.urls import reverse
from web_testlib import form_data

from experiments import configs
from experiments.models import Experiment, Run, RunStatus
from trainers.envs.registry import ENVIRONMENTS

pytestmark = pytest.mark.django_db


class Planted:
    """A package on sys.path whose import writes `marker`; `names` spell a class of it."""

    def __init__(self, folder, module: str):
        self.module, self.marker = module, folder / "imported.txt"
        self.names = [f"{module}:Env", f"{module}.Env", f"{module}.sub:Env", f"{module}.sub.Env"]

    def assert_not_imported(self) -> None:
        assert not self.marker.exists(), "the planted module was imported"
        assert not any(name == self.module or name.startswith(self.module + ".") for name in sys.modules)


@pytest.fixture
def planted(tmp_path, monkeypatch) -> Planted:
    module = f"planted_{uuid.uuid4().hex[:10]}"
    package = tmp_path / module
    package.mkdir()
    marker = tmp_path / "imported.txt"
    code = f"open({str(marker)!r}, 'w').write('imported')\nfrom trainers.envs.single_turn import SingleTurn as Env\n"
    (package / "__init__.py").write_text(code)
    (package / "sub.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = Planted(tmp_path, module)
    yield found
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        del sys.modules[name]


def refused(name: str) -> str:
    return (
        f"unknown environment '{name}'; built in: {', '.join(ENVIRONMENTS.names())}; this server runs no other "
        "environments (its administrator lists the modules it may load in PLATFORM_ENVIRONMENT_MODULES)"
    )


def env_config(tiny_config, name: str) -> dict:
    config = tiny_config()
    config["env"] = {"name": name}
    return config


def post_json(client, url: str, body: dict, method: str = "post"):
    return getattr(client, method)(url, json.dumps(body), content_type="application/json")


def test_api_create_yaml_overrides_update_and_launch_refuse_it(alice, planted, tiny_config, sent_messages):
    api = token_client(alice)
    experiment = make_experiment(alice)
    for name in planted.names:
        answers = [
            post_json(api, "/api/experiments", {"name": "x", "config": env_config(tiny_config, name)}),
            post_json(
                api, "/api/experiments", {"name": "x", "config_yaml": yaml.safe_dump(env_config(tiny_config, name))}
            ),
            post_json(
                api, "/api/experiments", {"name": "x", "config": tiny_config(), "overrides": [f"env.name={name}"]}
            ),
            post_json(api, f"/api/experiments/{experiment.pk}", {"config": env_config(tiny_config, name)}, "patch"),
        ]
        for response in answers:
            assert response.status_code == 400, (name, response.content)
            assert response.json() == {"errors": {"env.name": refused(name)}}, name
        planted.assert_not_imported()
    Experiment.objects.filter(pk=experiment.pk).update(
        config=env_config(tiny_config, planted.names[0])
    )  # stored before
    launched = post_json(api, f"/api/experiments/{experiment.pk}/runs", {})
    assert launched.status_code == 400 and launched.json()["errors"] == {"env.name": refused(planted.names[0])}
    assert sent_messages == [] and not Run.objects.exists()
    assert Experiment.objects.filter(owner=alice).count() == 1
    planted.assert_not_imported()


def test_the_answer_is_the_same_for_installed_and_missing_modules(alice, tiny_config):
    """No oracle: an installed module (even one of the tests), a missing one and a typo read alike."""
    api = token_client(alice)
    for name in ("tests.trainers.envs.test_envs:Echo", "this:X", "venv.__main__:X", "jax:X", "no_such_module_9:X"):
        response = post_json(api, "/api/experiments", {"name": "x", "config": env_config(tiny_config, name)})
        assert response.status_code == 400 and response.json() == {"errors": {"env.name": refused(name)}}, name
    assert "venv.__main__" not in sys.modules and "this" not in sys.modules
    typo = post_json(api, "/api/experiments", {"name": "x", "config": env_config(tiny_config, "calculater")})
    assert typo.json()["errors"]["env.name"].startswith("unknown environment 'calculater'; did you mean 'calculator'?")
    built_in = post_json(api, "/api/experiments", {"name": "ok", "config": env_config(tiny_config, "single_turn")})
    assert built_in.status_code == 201, built_in.content


def test_web_form_yaml_tab_import_and_preview_refuse_it(alice_client, alice, planted, tiny_config):
    from django.core.files.uploadedfile import SimpleUploadedFile

    experiment = make_experiment(alice)
    name = planted.names[0]
    data = form_data(env_config(tiny_config, name), name="x")
    created = alice_client.post(reverse("experiment-new"), data)
    edited = alice_client.post(reverse("experiment-edit", args=[experiment.pk]), data)
    for response in (created, edited):
        assert response.status_code == 400
        assert response.context["form"].errors["env__name"] == [refused(name)]
    text = yaml.safe_dump(env_config(tiny_config, name))
    yaml_tab = alice_client.post(reverse("experiment-new"), {"name": "x", "mode": "yaml", "config_yaml": text})
    imported = alice_client.post(
        reverse("experiment-import"), {"name": "imported", "file": SimpleUploadedFile("attack.yaml", text.encode())}
    )
    for response in (yaml_tab, imported):
        assert response.status_code == 400
        assert response.context["form"].errors["config_yaml"] == [f"env.name: {refused(name)}"]
    preview = alice_client.post(reverse("plan-preview"), data)
    assert json.loads(preview.content) == {"ok": False, "mode": "form", "errors": {"env.name": refused(name)}}
    assert Experiment.objects.filter(owner=alice).count() == 1
    planted.assert_not_imported()


def test_a_sweep_over_env_name_is_refused(alice, planted, sent_messages):
    experiment = make_experiment(alice)
    body = {
        "name": "envs",
        "space": {"env.name": {"type": "categorical", "choices": ["single_turn", planted.names[0]]}},
        "metric": "reward/mean",
        "max_trials": 2,
        "max_concurrent_trials": 1,
        "sampler": "grid",
        "pruner": "none",
    }
    response = post_json(token_client(alice), f"/api/experiments/{experiment.pk}/sweeps", body)
    assert response.status_code == 400, response.content
    assert refused(planted.names[0]) in json.dumps(response.json())
    assert sent_messages == [] and not Run.objects.exists()
    planted.assert_not_imported()


def test_a_worker_starting_a_stored_config_fails_it_without_importing(
    alice, planted, tiny_config, monkeypatch, restore_signals
):
    import trainers
    from runner.attempt import run_attempt

    run = make_run(alice, status="queued", attempt=1)
    Run.objects.filter(pk=run.pk).update(config=env_config(tiny_config, planted.names[0]))
    trained = []
    monkeypatch.setattr(trainers, "train", lambda *args, **kwargs: trained.append(args))
    run.refresh_from_db()
    assert run.transition(RunStatus.RUNNING, attempt=run.attempt)
    assert run_attempt(run.pk, run.attempt) == 1
    run.refresh_from_db()
    assert run.status == "failed" and trained == []
    assert f"env.name: {refused(planted.names[0])}" in run.error
    planted.assert_not_imported()


def test_an_evaluation_of_a_stored_run_fails_without_importing(alice, planted, tiny_config):
    from evaluations.jobs import JobFailed, child_config
    from evaluations.models import DatasetKind, EvaluationJob

    run = make_run(alice, status="succeeded")
    Run.objects.filter(pk=run.pk).update(config=env_config(tiny_config, planted.names[0]))
    job = EvaluationJob.objects.create(
        owner=alice, run=Run.objects.get(pk=run.pk), step=1, dataset_kind=DatasetKind.RUN_EVAL
    )
    with pytest.raises(JobFailed, match="env.name: unknown environment"):
        child_config(job)
    planted.assert_not_imported()


def test_an_administrator_listed_module_is_loaded(alice, planted, tiny_config, settings):
    """PLATFORM_ENVIRONMENT_MODULES lets the admin's own package (and its submodules) through."""
    settings.PLATFORM_ENVIRONMENT_MODULES = [planted.module]
    config = configs.parse(env_config(tiny_config, f"{planted.module}.sub:Env"), alice)
    assert config.env.name == f"{planted.module}.sub:Env" and planted.marker.exists()
    settings.PLATFORM_ENVIRONMENT_MODULES = ["other_pkg"]
    with pytest.raises(configs.ConfigError) as refusal:
        configs.parse(env_config(tiny_config, f"{planted.module}x:Env"), alice)  # a prefix is not a package
    assert refusal.value.as_dict()["env.name"].endswith("the modules this server's administrator lists: other_pkg")

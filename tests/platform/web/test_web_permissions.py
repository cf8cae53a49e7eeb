"""Every web view: anonymous -> the login page; another user's experiment or run -> 404 (and
nothing changes); staff -> allowed. The table must name every URL of web.urls (the docs site's
pages are public: tests/platform/web/test_docs_site.py)."""

from __future__ import annotations

import pytest
from datasets_testlib import dataset_root, upload  # noqa: F401 (fixture)
from django.urls import reverse
from platform_testlib import tiny_config
from web_testlib import (  # noqa: F401 (fast_passwords: autouse)
    fast_passwords,
    form_data,
    make_experiment,
    make_run,
)

from experiments.dataset_models import Dataset
from experiments.models import Experiment, Run
from web import urls as web_urls

pytestmark = pytest.mark.django_db

# url name -> (method, which object it takes, staff's expected status)
VIEWS = {
    "index": ("get", None, 302),
    "experiment-list": ("get", None, 200),
    "experiment-new": ("get", None, 200),
    "experiment-import": ("get", None, 200),
    "plan-preview": ("post", None, 200),
    "run-list": ("get", None, 200),
    "experiment-detail": ("get", "experiment", 200),
    "experiment-edit": ("get", "experiment", 200),
    "experiment-clone": ("post", "experiment", 302),
    "experiment-launch": ("post", "experiment", 302),
    "experiment-export": ("get", "experiment", 200),
    "version-list": ("get", "experiment", 200),
    "version-export": ("get", "version", 200),
    "version-restore": ("post", "version", 302),
    "version-diff": ("get", "diff", 200),
    "run-detail": ("get", "run", 200),
    "run-control": ("post", "control", 302),
    "run-export": ("post", "run", 302),  # a toy run: refused with a message, redirected
    "run-labels": ("post", "run", 302),
    "run-fork": ("post", "run", 302),  # no checkpoint to fork from: refused with a message, redirected
    "run-compare": ("get", None, 200),  # no runs named: the page asks for them
    "run-samples": ("get", "run", 200),
    "api-tokens": ("get", None, 200),
    "account": ("get", None, 200),
    "dataset-list": ("get", None, 200),
    "evaluation-list": ("get", None, 200),
    "evaluation-new": ("get", None, 200),
    "leaderboard": ("get", None, 200),
    "sweep-list": ("get", None, 200),
    "sweep-new": ("get", "experiment", 200),
    "alert-list": ("get", None, 200),
}
AUTH_VIEWS = {"login", "logout", "signup"}  # signup: off by default, tests/platform/web/test_signup.py
PUBLIC_VIEWS = {"docs", "docs-page"}  # the docs site, no login: tests/platform/web/test_docs_site.py
OWN_TOKEN_VIEWS = {"api-token-revoke"}  # only the token's owner, staff too: tests/platform/api/test_api_tokens.py
# a dataset's pages have a permission of their own (experiments.view_dataset): test_dataset_views below
DATASET_VIEWS = {"dataset-detail", "dataset-share", "dataset-delete"}
# an evaluation job's page: its owner's (and the view permission's): tests/platform/evaluations/test_evaluation_api.py;
# its Cancel: its owner's (and the change permission's): tests/platform/runner/test_caps_count_every_host.py
EVALUATION_VIEWS = {"evaluation-detail", "evaluation-cancel"}
# a sweep's page and Cancel: the experiment's rule, for a sweep: tests/platform/sweeps/test_sweep_pages.py
SWEEP_VIEWS = {"sweep-detail", "sweep-cancel"}
# an alert rule's Enable/Disable and Delete: its owner's only, staff too: tests/platform/alerts/test_alert_pages.py
ALERT_VIEWS = {"alert-toggle", "alert-delete"}


def test_every_web_view_is_in_the_table():
    names = {p.name for p in web_urls.urlpatterns}
    own_pages = OWN_TOKEN_VIEWS | DATASET_VIEWS | EVALUATION_VIEWS | SWEEP_VIEWS | ALERT_VIEWS
    assert names - AUTH_VIEWS - PUBLIC_VIEWS - own_pages == set(VIEWS)


@pytest.fixture
def objects(alice, monkeypatch, dataset_root):
    import runner.services

    monkeypatch.setattr(runner.services, "send_run_message", lambda *args: None)
    experiment = make_experiment(alice, "alice-exp")
    experiment.set_config(tiny_config(seed=1), user=alice)  # v2, so v1 can be restored
    run = make_run(experiment, status="queued")
    upload(alice, "alice-data")
    return experiment, run


def _request(client, name, objects):
    method, kind, _ = VIEWS[name]
    experiment, run = objects
    args = {
        None: [],
        "experiment": [experiment.pk],
        "version": [experiment.pk, 1],
        "diff": [experiment.pk],
        "run": [run.pk],
        "control": [run.pk, "cancel"],
    }[kind]
    url = reverse(name, args=args)
    if kind == "diff":
        url += "?a=1&b=2"
    data = form_data() if name == "plan-preview" else {"confirm": "yes"} if kind == "control" else {}
    return getattr(client, method)(url, data)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_anonymous_goes_to_login(client, objects, name):
    response = _request(client, name, objects)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.parametrize("name", sorted(n for n, v in VIEWS.items() if v[1]))
def test_other_users_objects_answer_404(client, bob, objects, name):
    experiment, run = objects
    before = (
        Experiment.objects.count(),
        Run.objects.count(),
        experiment.versions.count(),
        Run.objects.get(pk=run.pk).status,
    )
    client.force_login(bob)
    response = _request(client, name, objects)
    assert response.status_code == 404
    after = (
        Experiment.objects.count(),
        Run.objects.count(),
        experiment.versions.count(),
        Run.objects.get(pk=run.pk).status,
    )
    assert after == before


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_staff_may(client, staff, objects, name):
    client.force_login(staff)
    response = _request(client, name, objects)
    assert response.status_code == VIEWS[name][2]


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_owner_may(client, alice, objects, name):
    client.force_login(alice)
    response = _request(client, name, objects)
    assert response.status_code == VIEWS[name][2]


def test_logout_is_a_post_and_login_page_renders(alice_client):
    page = alice_client.get(reverse("experiment-list")).content.decode()
    assert f'<form method="post" action="{reverse("logout")}"' in page
    assert alice_client.post(reverse("logout")).status_code == 302
    response = alice_client.get(reverse("login"))
    assert response.status_code == 200 and 'name="username"' in response.content.decode()


def test_nav_shows_admin_only_to_staff(client, alice, staff):
    client.force_login(alice)
    assert 'id="nav-admin"' not in client.get(reverse("experiment-list")).content.decode()
    client.force_login(staff)
    assert 'id="nav-admin"' in client.get(reverse("experiment-list")).content.decode()


# Someone else's rows by permission, not by is_staff. Reading views need the view permission;
# views that change the experiment or steer the run need the change permission.
CHANGING_VIEWS = {
    "experiment-edit",
    "experiment-launch",
    "version-restore",
    "run-control",
    "run-export",
    "run-labels",
    "run-fork",
    "sweep-new",
}
OBJECT_VIEWS = sorted(n for n, v in VIEWS.items() if v[1])


def _snapshot(experiment, run):
    return (
        Experiment.objects.count(),
        Run.objects.count(),
        experiment.versions.count(),
        Run.objects.get(pk=run.pk).status,
        Experiment.objects.get(pk=experiment.pk).config,
    )


@pytest.mark.parametrize("name", OBJECT_VIEWS)
def test_staff_without_permissions_gets_404_on_others_objects(client, plain_staff, objects, name):
    before = _snapshot(*objects)
    client.force_login(plain_staff)
    response = _request(client, name, objects)
    assert response.status_code == 404
    assert _snapshot(*objects) == before


def test_staff_without_permissions_lists_only_their_own(client, plain_staff, objects):
    experiment, run = objects
    own = make_experiment(plain_staff, "staff-own")
    client.force_login(plain_staff)
    listed = client.get(reverse("experiment-list")).context["page"].object_list
    assert [e.pk for e in listed] == [own.pk]
    assert list(client.get(reverse("run-list")).context["page"].object_list) == []
    assert client.get(reverse("experiment-detail", args=[own.pk])).status_code == 200


@pytest.mark.parametrize("name", OBJECT_VIEWS)
def test_view_permission_reads_but_does_not_change(client, viewer, objects, name):
    before = _snapshot(*objects)
    client.force_login(viewer)
    response = _request(client, name, objects)
    if name in CHANGING_VIEWS:
        assert response.status_code == 403
        assert _snapshot(*objects) == before
    else:
        assert response.status_code == VIEWS[name][2]


def test_view_permission_pages_offer_no_controls(client, viewer, objects):
    experiment, run = objects
    client.force_login(viewer)
    page = client.get(reverse("experiment-detail", args=[experiment.pk])).content.decode()
    assert 'id="launch-run"' not in page and 'id="edit-experiment"' not in page and "restore-v1" not in page
    assert 'id="clone-experiment"' in page
    page = client.get(reverse("run-detail", args=[run.pk])).content.decode()
    assert 'id="run-cancel"' not in page


@pytest.mark.parametrize("name", OBJECT_VIEWS)
def test_change_permission_may_change(client, changer, objects, name):
    client.force_login(changer)
    response = _request(client, name, objects)
    assert response.status_code == VIEWS[name][2]


def test_change_permission_edits_and_steers(client, changer, objects):
    experiment, run = objects
    client.force_login(changer)
    response = client.post(
        reverse("experiment-edit", args=[experiment.pk]), form_data(tiny_config(seed=7), name="edited by changer")
    )
    assert response.status_code == 302
    assert Experiment.objects.get(pk=experiment.pk).config["seed"] == 7
    assert client.post(reverse("run-control", args=[run.pk, "cancel"]), {"confirm": "yes"}).status_code == 302
    assert Run.objects.get(pk=run.pk).status == "cancelled"


@pytest.mark.parametrize("name", sorted(DATASET_VIEWS))
def test_dataset_views(client, alice, bob, staff, objects, name):
    """Anonymous -> login; another user -> 404 (they cannot see it); staff, who see every dataset,
    may read it but only the owner shares or deletes it (403); the owner may."""
    dataset = Dataset.objects.get(owner=alice)
    url = reverse(name, args=[dataset.pk])
    method = "get" if name == "dataset-detail" else "post"
    data = {"users": "bob", "action": "share"} if name == "dataset-share" else {}
    response = getattr(client, method)(url, data)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    client.force_login(bob)
    assert getattr(client, method)(url, data).status_code == 404
    client.force_login(staff)
    assert getattr(client, method)(url, data).status_code == (200 if method == "get" else 403)
    assert Dataset.objects.get(pk=dataset.pk).shared_with.count() == 0
    client.force_login(alice)
    assert getattr(client, method)(url, data).status_code == (200 if method == "get" else 302)

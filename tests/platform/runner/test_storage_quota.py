"""Security probe: one user must not fill the disk. A per-user storage quota over
datasets, checkpoints (run directories) and exports (runner.storage): an upload that would cross it
answers 413 and stores nothing; an export or a launch / resume / retry / fork while over it answers
429; an admin's per-user override lifts it; a checkpoint download (hf.zip) leaves no copy behind;
the account page and GET /api/account show the numbers, checked against sizes computed by hand.

The export child (`python -m trainers export`) is replaced here by a stand-in that writes a small
Hugging Face folder into its --out (a real one: tests/platform/runner/test_run_export.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from api_testlib import make_experiment, make_run, token_client
from datasets_testlib import jsonl
from django.test import Client
from django.urls import reverse

from experiments.dataset_models import Dataset
from experiments.models import Checkpoint, Experiment, Run
from runner import exports, storage
from runner.models import UserLimits
from runner.storage import StorageUsage, format_bytes, quota_message
from tests.tiny_models import write_model_config

pytestmark = pytest.mark.django_db

QUOTA_BYTES = 10_000


@pytest.fixture
def places(settings, tmp_path):
    """This test's own data dir: run directories, exports, datasets, models; a small quota."""
    settings.ARTIFACTS_DIR = tmp_path / "runs"
    settings.EXPORTS_DIR = tmp_path / "exports"
    settings.PLATFORM_DATASET_DIRS = [tmp_path / "datasets"]
    settings.PLATFORM_MODELS_DIRS = [tmp_path / "models"]
    settings.PLATFORM_STORAGE_QUOTA_BYTES = QUOTA_BYTES
    for name in ("runs", "exports", "datasets"):
        (tmp_path / name).mkdir()
    write_model_config(tmp_path / "models" / "tiny-chat")
    return tmp_path


def write(path: Path, size_bytes: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size_bytes)
    return path


def files_under(root: Path) -> dict[str, int]:
    """{relative path: size} of every file under `root`."""
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def run_with_files(user, sizes: dict[str, int], status: str = "succeeded", experiment=None, **fields) -> Run:
    """A run of `user` whose directory holds files of the given sizes ({relative path: bytes})."""
    run = make_run(user, status=status, experiment=experiment, **fields)
    run.run_dir = f"run-{run.pk}-test"
    run.save(update_fields=["run_dir"])
    for relative, size_bytes in sizes.items():
        write(Path(storage.run_directory(run)) / relative, size_bytes)
    return run


def hf_experiment(user) -> Experiment:
    """An experiment on the tiny Hugging Face model folder (exportable, downloadable)."""
    config = {
        "seed": 0,
        "model": {"path": "tiny-chat"},
        "data": {"task": "arithmetic", "train_prompts": 16, "eval_prompts": 0},
        "rollout": {"max_new_tokens": 4},
        "batch": {"prompts_per_step": 2},
        "grpo": {"num_generations": 2, "beta": 0.0},
        "train": {"max_steps": 2, "samples_per_step": 2},
        "checkpoint": {"every_steps": 1, "keep_last": 3},
    }
    experiment = Experiment(owner=user, name="hf")
    experiment.set_config(config, user=user)
    return experiment


def upload_request(client, name: str, content: bytes):
    upload = io.BytesIO(content)
    upload.name = f"{name}.jsonl"
    return client.post("/api/datasets", {"name": name, "file": upload})


# --- usage -------------------------------------------------------------------------------------


def test_usage_by_kind_against_sizes_computed_by_hand(alice, bob, places):
    dataset_bytes = len(jsonl())
    assert upload_request(token_client(alice), "arith", jsonl()).status_code == 201
    assert upload_request(token_client(bob), "arith", jsonl(40)).status_code == 201  # bob's: not alice's
    done = run_with_files(alice, {"checkpoints/2/a.bin": 1000, "checkpoints/2/b.bin": 234, "logs/attempt-1.log": 50})
    base = Path(storage.run_directory(done))
    os.link(base / "checkpoints/2/a.bin", base / "checkpoints/2/a-again.bin")  # one inode: counted once
    bobs = run_with_files(bob, {"checkpoints/1/big.bin": 5000})
    os.symlink(Path(storage.run_directory(bobs)) / "checkpoints/1/big.bin", base / "link.bin")  # not followed
    running = run_with_files(alice, {"checkpoints/1/c.bin": 300}, status="running")
    write(places / "exports" / f"run-{done.pk}-step-2" / "model.safetensors", 700)
    write(places / "exports" / f"run-{done.pk}-step-2" / "config.json", 10)
    write(places / "exports" / f"run-{bobs.pk}-step-1" / "model.safetensors", 900)  # bob's export
    write(places / "exports" / ".downloads" / "leftover.bin", 123)  # not an export

    usage = storage.usage_for(alice)
    assert usage == StorageUsage(
        datasets_bytes=dataset_bytes,
        checkpoints_bytes=1000 + 234 + 50 + 300,
        exports_bytes=710,
        quota_bytes=QUOTA_BYTES,
    )
    assert usage.used_bytes == dataset_bytes + 2294 and not usage.over_quota
    assert storage.usage_for(bob).checkpoints_bytes == 5000 and storage.usage_for(bob).exports_bytes == 900

    # a settled run's size is cached (keyed by its directory, attempt and status); an active run is
    # walked every time; requeueing the settled run (a new attempt) walks it again
    write(base / "checkpoints/2/late.bin", 11)
    write(Path(storage.run_directory(running)) / "checkpoints/2/c.bin", 22)
    assert storage.usage_for(alice).checkpoints_bytes == 1584 + 22
    Run.objects.filter(pk=done.pk).update(attempt=2, status="queued")
    assert storage.usage_for(alice).checkpoints_bytes == 1584 + 22 + 11


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 1023, 1024, 1536, 538 * 1024**2, 50 * 1024**3, 3 * 1024**4)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "538.0 MiB",
        "50.0 GiB",
        "3.0 TiB",
    ]


# --- uploads: 413 ------------------------------------------------------------------------------


def test_an_upload_over_the_quota_is_413_and_stores_nothing(alice, places):
    run_with_files(alice, {"checkpoints/2/w.bin": 9000})  # 1000 bytes left
    content = jsonl(40)
    assert 1000 < len(content) < 3000
    before = files_under(places)

    response = upload_request(token_client(alice), "big", content)
    assert response.status_code == 413
    expected = quota_message(StorageUsage(0, 9000, 0, QUOTA_BYTES), len(content))
    assert response.json() == {"error": expected}
    assert expected.startswith(
        "over your storage quota: you use 8.8 KiB (datasets 0 B, checkpoints 8.8 KiB, "
        f"exports 0 B) of your 9.8 KiB quota; this upload is {format_bytes(len(content))}; "
    )
    assert "delete datasets you no longer need, or ask an admin" in expected
    assert files_under(places) == before and not Dataset.objects.exists()

    # the page: the form's error, nothing stored
    browser = Client()
    browser.force_login(alice)
    upload = io.BytesIO(content)
    upload.name = "big.jsonl"
    page = browser.post(reverse("dataset-list"), {"name": "big", "file": upload})
    assert page.status_code == 413 and "over your storage quota" in page.content.decode()
    assert files_under(places) == before and not Dataset.objects.exists()

    # one that fits is stored
    assert upload_request(token_client(alice), "small", jsonl(2)).status_code == 201


def test_a_request_far_over_the_quota_is_refused_before_its_file_is_read(alice, places, settings):
    settings.PLATFORM_STORAGE_QUOTA_BYTES = 100
    content = b"x" * (1024 * 1024 + 200)  # with the form's allowance of 1 MiB, still over 100 bytes
    response = upload_request(token_client(alice), "huge", content)
    assert response.status_code == 413
    assert response.json()["error"].startswith(
        "over your storage quota: you use 0 B (datasets 0 B, checkpoints 0 B, "
        "exports 0 B) of your 100 B quota; this request is 1.0 MiB; "
    )
    assert files_under(places / "datasets") == {}


# --- exports and launches: 429 -------------------------------------------------------------------


def test_an_export_over_the_quota_is_429(alice, places):
    run = run_with_files(alice, {"checkpoints/2/w.bin": QUOTA_BYTES}, experiment=hf_experiment(alice))
    before = files_under(places)
    response = token_client(alice).post(f"/api/runs/{run.pk}/export", "{}", content_type="application/json")
    assert response.status_code == 429
    assert response.json() == {"error": quota_message(StorageUsage(0, QUOTA_BYTES, 0, QUOTA_BYTES))}
    assert files_under(places) == before

    browser = Client()
    browser.force_login(alice)
    page = browser.post(reverse("run-export", args=[run.pk]), {"step": "2"}, follow=True)
    assert f"Cannot export run {run.pk}: over your storage quota" in page.content.decode()
    assert files_under(places) == before


def test_launch_resume_retry_and_fork_over_the_quota_are_429(alice, places, sent_messages):
    experiment = make_experiment(alice)
    full = run_with_files(alice, {"checkpoints/2/w.bin": QUOTA_BYTES + 1}, experiment=experiment)
    paused = make_run(alice, status="paused", experiment=experiment)
    failed = make_run(alice, status="failed", experiment=experiment)
    client = token_client(alice)
    message = quota_message(StorageUsage(0, QUOTA_BYTES + 1, 0, QUOTA_BYTES))
    runs_before = Run.objects.count()

    response = client.post(f"/api/experiments/{experiment.pk}/runs", "{}", content_type="application/json")
    assert response.status_code == 429 and response.json() == {"error": message}
    for run, action in ((paused, "resume"), (failed, "retry")):
        response = client.post(f"/api/runs/{run.pk}/{action}")
        assert response.status_code == 429 and response.json() == {"error": message}
        assert Run.objects.get(pk=run.pk).status == run.status  # left as it was
    response = client.post(f"/api/runs/{full.pk}/fork", json.dumps({"step": 2}), content_type="application/json")
    assert response.status_code == 429 and response.json() == {"error": message}
    assert Run.objects.count() == runs_before and sent_messages == []

    browser = Client()
    browser.force_login(alice)
    page = browser.post(reverse("experiment-launch", args=[experiment.pk]), follow=True)
    assert "Cannot launch: over your storage quota" in page.content.decode()
    assert Run.objects.count() == runs_before


def test_a_per_user_override_lets_the_user_past_the_default(alice, bob, places, sent_messages):
    experiment = make_experiment(alice)
    run_with_files(alice, {"checkpoints/2/w.bin": 2 * QUOTA_BYTES}, experiment=experiment)
    client = token_client(alice)
    launch = f"/api/experiments/{experiment.pk}/runs"
    assert client.post(launch, "{}", content_type="application/json").status_code == 429
    assert upload_request(client, "arith", jsonl()).status_code == 413

    UserLimits.objects.create(user=alice, storage_quota_bytes=3 * QUOTA_BYTES)
    assert client.post(launch, "{}", content_type="application/json").status_code == 201
    assert upload_request(client, "arith", jsonl()).status_code == 201
    assert storage.quota_bytes_for(alice) == 3 * QUOTA_BYTES and storage.quota_bytes_for(bob) == QUOTA_BYTES


# --- downloads keep no copy ----------------------------------------------------------------------


def fake_export_child(monkeypatch, calls: list):
    """`python -m trainers export RUN_DIR --out DIR ...` stand-in: a small Hugging Face folder in DIR."""
    real_run = subprocess.run

    def run(argv, **kwargs):
        if argv[1:4] != ["-m", "trainers", "export"]:
            return real_run(argv, **kwargs)
        out = Path(argv[argv.index("--out") + 1])
        calls.append(out)
        assert out.is_dir() and not any(out.iterdir())  # the claim: an empty folder
        (out / "config.json").write_text('{"model_type": "llama"}')
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 40)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(exports.subprocess, "run", run)


def download(client, run: Run, step: int) -> zipfile.ZipFile:
    response = client.get(f"/api/runs/{run.pk}/checkpoints/{step}/hf.zip")
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content)
    assert int(response["Content-Length"]) == len(body)
    return zipfile.ZipFile(io.BytesIO(body))


def test_a_download_leaves_no_copy_on_the_server(alice, places, monkeypatch):
    calls: list[Path] = []
    fake_export_child(monkeypatch, calls)
    run = run_with_files(alice, {"checkpoints/2/w.bin": 100}, experiment=hf_experiment(alice))
    Checkpoint.objects.create(run=run, step=2, path=f"{run.run_dir}/checkpoints/2", size_bytes=100)
    client = token_client(alice)
    before = files_under(places)

    for _ in range(2):
        archive = download(client, run, 2)
        assert archive.read(f"run-{run.pk}-step-2/model.safetensors") == bytes(range(256)) * 40
        assert files_under(places) == before  # nothing left: not the export, not the zip
    assert [p.parent for p in calls] == [places / "exports" / ".downloads"] * 2
    assert not calls[0].exists() and storage.usage_for(alice).exports_bytes == 0

    # an export made on purpose is served as it is, and nothing else is written
    assert client.post(f"/api/runs/{run.pk}/export", "{}", content_type="application/json").status_code == 201
    exported = files_under(places)
    assert download(client, run, 2).namelist() == [
        f"run-{run.pk}-step-2/config.json",
        f"run-{run.pk}-step-2/model.safetensors",
    ]
    assert files_under(places) == exported and len(calls) == 3
    assert storage.usage_for(alice).exports_bytes == 10240 + len('{"model_type": "llama"}')


def test_a_download_claimed_by_another_answers_409_and_a_stale_claim_is_taken_over(alice, places, monkeypatch):
    calls: list[Path] = []
    fake_export_child(monkeypatch, calls)
    run = run_with_files(alice, {"checkpoints/2/w.bin": 100}, experiment=hf_experiment(alice))
    claim = places / "exports" / ".downloads" / f"run-{run.pk}-step-2"
    claim.mkdir(parents=True)
    response = token_client(alice).get(f"/api/runs/{run.pk}/checkpoints/2/hf.zip")
    assert response.status_code == 409 and "being prepared for another download" in response.json()["error"]
    assert claim.is_dir()  # the other download's folder is left alone

    old_s = exports.TIMEOUT_S + 60
    os.utime(claim, (claim.stat().st_atime - old_s, claim.stat().st_mtime - old_s))  # left by a stopped server
    download(token_client(alice), run, 2)
    assert not claim.exists()


# --- the account page and GET /api/account ---------------------------------------------------


def test_account_api_and_page_show_usage_quota_and_limits(alice, bob, places, sent_messages):
    assert upload_request(token_client(alice), "arith", jsonl()).status_code == 201
    run = run_with_files(alice, {"checkpoints/2/w.bin": 4000})
    write(places / "exports" / f"run-{run.pk}-step-2" / "model.safetensors", 1000)
    make_run(alice, status="queued", experiment=run.experiment)
    UserLimits.objects.create(user=alice, max_queued_runs=7)
    used = len(jsonl()) + 5000

    body = token_client(alice).get("/api/account").json()
    assert body == {
        "username": "alice",
        "storage": {
            "datasets_bytes": len(jsonl()),
            "checkpoints_bytes": 4000,
            "exports_bytes": 1000,
            "used_bytes": used,
            "quota_bytes": QUOTA_BYTES,
            "over_quota": False,
        },
        "limits": {
            **body["limits"],  # limits added later are checked by their own tests
            "max_active_runs": {"value": 4, "source": "default"},
            "max_queued_runs": {"value": 7, "source": "yours"},
            "max_sequences_per_step": {"value": 8192, "source": "default"},
            "max_tokens_per_step": {"value": 8 * 1024 * 1024, "source": "default"},
            "storage_quota_bytes": {"value": QUOTA_BYTES, "source": "default"},
            "max_hosts_per_run": {"value": 8, "source": "default"},
            "max_devices_per_run": {"value": 64, "source": "default"},
            "max_evaluation_jobs": {"value": 8, "source": "default"},
            "max_evaluation_tokens": {"value": 64 * 1024 * 1024, "source": "default"},
        },
        "runs": {"active": 0, "queued": 1},
        "evaluations": {"jobs": 0, "tokens": 0},
    }
    assert token_client(bob).get("/api/account").json()["storage"]["used_bytes"] == 0
    assert Client().get("/api/account").status_code == 401

    browser = Client()
    assert browser.get(reverse("account"))["Location"].startswith(reverse("login"))
    browser.force_login(alice)
    html = browser.get(reverse("account")).content.decode()
    assert 'id="nav-account"' in html and 'id="over-quota"' not in html
    assert f"You use <strong>{format_bytes(used)}</strong> of your <strong>9.8 KiB</strong> quota" in html
    for kind, size_bytes in (
        ("datasets_bytes", len(jsonl())),
        ("checkpoints_bytes", 4000),
        ("exports_bytes", 1000),
        ("used_bytes", used),
        ("quota_bytes", QUOTA_BYTES),
    ):
        assert f'<tr data-kind="{kind}">' in html and f'data-bytes="{size_bytes}"' in html
    assert '<tr data-limit="max_queued_runs"><td>Queued runs</td><td data-value="7">7</td><td>an admin, for you' in html
    assert (
        '<tr data-limit="max_tokens_per_step"><td>Tokens per step</td><td data-value="8388608">8,388,608</td>' in html
    )

    write(places / "runs" / run.run_dir / "more.bin", QUOTA_BYTES)  # a running run crossed it, say
    Run.objects.filter(pk=run.pk).update(status="running")
    assert 'id="over-quota"' in browser.get(reverse("account")).content.decode()
    assert token_client(alice).get("/api/account").json()["storage"]["over_quota"] is True

"""Alert links point at the server `serve` runs: with --port 8123 an alert's run
link was http://localhost:8000/runs/N/. `serve` sets PLATFORM_BASE_URL from --host/--port for
itself and its children unless the environment names one (production)."""

from __future__ import annotations

import os

from alerts.delivery import run_url
from experiments.models import Run
from runner.management.commands.serve import base_url, use_base_url


def test_base_url_for_each_kind_of_host():
    assert base_url("127.0.0.1", 8123) == "http://localhost:8123"
    assert base_url("0.0.0.0", 9000) == "http://localhost:9000"
    assert base_url("::", 8000) == "http://localhost:8000"
    assert base_url("gpu-box.lan", 8080) == "http://gpu-box.lan:8080"
    assert base_url("10.0.0.5", 80) == "http://10.0.0.5:80"
    assert base_url("fe80::1", 8000) == "http://[fe80::1]:8000"


def test_serve_sets_the_alert_links_base_unless_the_environment_names_one(settings, monkeypatch):
    monkeypatch.delenv("PLATFORM_BASE_URL", raising=False)
    settings.PLATFORM_BASE_URL = "http://localhost:8000"
    assert use_base_url("127.0.0.1", 8123) == "http://localhost:8123"
    assert os.environ["PLATFORM_BASE_URL"] == "http://localhost:8123"  # what the children inherit
    assert run_url(Run(pk=7)) == "http://localhost:8123/runs/7/"
    monkeypatch.setenv("PLATFORM_BASE_URL", "https://grpo.example.org")
    settings.PLATFORM_BASE_URL = "https://grpo.example.org"
    assert use_base_url("127.0.0.1", 8123) == "https://grpo.example.org"
    assert run_url(Run(pk=7)) == "https://grpo.example.org/runs/7/"

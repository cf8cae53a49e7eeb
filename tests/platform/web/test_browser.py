"""End to end in a real browser: `manage.py serve` (web server, worker, scheduler), then Playwright
driving Debian's Chromium logs in as the demo user, creates an experiment through the form, launches
it and watches the reward chart gain points while the run trains.

The platform runs on the same back end as the rest of this test pass: the embedded default (SQLite +
filesystem broker) or, when DATABASE_URL / CELERY_BROKER_URL are set, PostgreSQL and Redis (a fresh
database is created for it and dropped afterwards).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright

from tests.xdist_worker_env import second_broker

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"serve did not listen on {port} within {timeout_s} s")


@contextmanager
def served_platform(env: dict, tmp_path: Path):
    """`manage.py serve` (web server, one worker, scheduler) with `env`: yields (base URL, the demo
    user's password); on leaving, Ctrl-C stops the whole tree, which must exit 0."""
    port = _free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--workers", "1", "--no-model-demo"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_for_port(port, proc, timeout_s=120)
        password = (Path(env["PLATFORM_DATA_DIR"]) / "demo_password").read_text().strip()
        yield f"http://127.0.0.1:{port}", password
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C stops the whole tree
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    assert proc.returncode == 0, (tmp_path / "serve.log").read_text()[-3000:]


def log_in_as_demo(page, base: str, password: str) -> None:
    page.goto(base + "/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
    expect(page.locator("body")).not_to_contain_text("Please enter a correct username")


@pytest.fixture
def platform_env(tmp_path):
    """Environment for a `serve` of its own: a fresh data dir, and on the production back end a
    fresh PostgreSQL database and Redis db."""
    env = dict(os.environ)
    env["PLATFORM_DATA_DIR"] = str(tmp_path / "data")
    env.pop("PLATFORM_SQLITE_PATH", None)
    env["PLATFORM_HEARTBEAT_S"] = "1"
    dropper = None
    if os.environ.get("DATABASE_URL"):
        import psycopg

        base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
        name = f"grpo_browser_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        env["DATABASE_URL"] = f"{base}/{name}"

        def dropper():
            with psycopg.connect(base + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    if os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        import redis

        url = second_broker(os.environ["CELERY_BROKER_URL"])  # never an xdist worker's own
        redis.Redis.from_url(url).flushdb()
        env["CELERY_BROKER_URL"] = url
    yield env
    if dropper:
        dropper()


def test_browser_create_launch_and_watch_chart(platform_env, tmp_path):
    with served_platform(platform_env, tmp_path) as (base, password), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        set_browser_waits(page, wait_ms=30_000)
        log_in_as_demo(page, base, password)
        # create an experiment through the form
        page.goto(base + "/experiments/new/")
        page.fill("input[name=name]", "browser test")
        page.fill("[name='train__max_steps']", "40")
        page.fill("[name='batch__prompts_per_step']", "4")
        page.fill("[name='grpo__num_generations']", "4")
        page.click("#section-checkpoint > summary")  # a collapsed group of the form
        page.fill("[name='checkpoint__every_steps']", "10")
        expect(page.locator("#plan-preview")).to_contain_text("16", timeout=10_000)  # 4 prompts x G=4
        page.click("#save-experiment")
        # launch it and watch the reward chart gain points without a reload
        page.click("#launch-run")
        chart = page.locator("[data-metric='reward/mean']")
        expect(chart).to_be_visible()
        # Marked as soon as the run page is up, before the worker has compiled a step: the points the
        # chart gains from here arrived live. (Waiting for a first point before marking failed once when
        # the tiny 40-step run finished between two polls, so no later point could come.)
        page.evaluate("window.__no_reload_marker = 42")
        first = int(chart.get_attribute("data-points") or 0)
        deadline = time.monotonic() + 180
        later = first
        while time.monotonic() < deadline and later <= first:
            time.sleep(0.5)
            later = int(chart.get_attribute("data-points") or 0)
        assert later > first, f"the chart did not gain points ({first} -> {later})"
        # a reload or navigation would have wiped the marker: the points arrived live
        assert page.evaluate("window.__no_reload_marker") == 42
        browser.close()

"""End to end in a real browser, checkpoints as first-class objects: `manage.py serve` (web server,
worker, scheduler), then Playwright driving Debian's Chromium logs in, uploads a JSONL dataset through
the datasets page, creates an experiment on it in the YAML tab (the config names it:
`data.train_dataset`), launches it, waits for the run to finish with its checkpoints, forks it from a checkpoint
on the run page and sees the lineage on both run pages.

The platform runs on the back end of this test pass (SQLite + filesystem broker, or PostgreSQL and
Redis when DATABASE_URL / CELERY_BROKER_URL are set), with a data directory of its own
(test_browser.py's `platform_env`)."""

from __future__ import annotations

import re

from platform_testlib import set_browser_waits
from playwright.sync_api import expect, sync_playwright
from test_browser import CHROMIUM, CHROMIUM_ARGS, log_in_as_demo, platform_env, served_platform  # noqa: F401

CONFIG_YAML = """\
seed: 0
model: {preset: tiny}
data: {task: null, train_dataset: sums, eval_prompts: 0, max_prompt_tokens: 16}
rewards: [{name: exact_match, weight: 1.0}]
rollout: {max_new_tokens: 4}
batch: {prompts_per_step: 2}
grpo: {num_generations: 2, beta: 0.0}
train: {max_steps: 2, samples_per_step: 2}
checkpoint: {every_steps: 1, keep_last: 3}
"""
DATASET_JSONL = "".join(f'{{"prompt": "{a}+{b}=", "answer": "{a + b}"}}\n' for a in range(4) for b in range(4))
RUN_FINISH_S = 240  # a 2-step tiny run: JAX start and compile dominate (about 30 s on a busy 2-core CPU)


def _run_id(url: str) -> int:
    found = re.search(r"/runs/(\d+)/$", url)
    assert found, f"not a run page: {url}"
    return int(found.group(1))


def test_browser_fork_a_finished_run_and_see_the_lineage(platform_env, tmp_path):
    with served_platform(platform_env, tmp_path) as (base, password), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        set_browser_waits(page, wait_ms=30_000)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        log_in_as_demo(page, base, password)

        # a dataset uploaded through the page
        dataset_file = tmp_path / "sums.jsonl"
        dataset_file.write_text(DATASET_JSONL)
        page.click("#nav-datasets")
        page.fill("#dataset-upload-form input[name=name]", "sums")
        page.set_input_files("#dataset-upload-form input[name=file]", str(dataset_file))
        page.click("#dataset-upload-submit")
        page.wait_for_url(re.compile(r"/datasets/\d+/$"))
        expect(page.locator("#dataset-rows")).to_contain_text("16")
        expect(page.locator("#dataset-reference")).to_contain_text("data.train_dataset: sums")

        # an experiment on it from the YAML tab, launched
        page.goto(base + "/experiments/new/")
        page.fill("input[name=name]", "lineage test")
        page.click("#tab-yaml")
        # the switch is done (and the textarea written from the form) once the form is in YAML mode
        expect(page.locator("#experiment-form")).to_have_class(re.compile(r"\bmode-yaml\b"))
        page.fill("textarea[name=config_yaml]", CONFIG_YAML)
        page.click("#save-experiment")
        page.click("#launch-run")
        parent_id = _run_id(page.url)

        # wait for it to finish; the page then offers its checkpoints to fork
        expect(page.locator("#run-status")).to_have_attribute("data-status", "succeeded", timeout=RUN_FINISH_S * 1000)
        page.reload()
        expect(page.locator("#fork-step option")).to_have_count(2)  # checkpoints 2 and 1, newest first
        page.select_option("#fork-step", "1")
        page.select_option("#fork-optimizer", "fresh")
        page.click("#run-fork")

        # the new run's page: its lineage, linking to the parent
        page.wait_for_url(re.compile(r"/runs/\d+/$"))
        child_id = _run_id(page.url)
        assert child_id != parent_id
        lineage = f"Forked from run {parent_id}, step 1 (fresh optimizer"
        expect(page.locator("#forked-from")).to_contain_text(lineage)
        page.click("#forked-from-link")
        page.wait_for_url(f"{base}/runs/{parent_id}/")
        # the parent's page lists the fork
        fork = page.locator(f"#fork-list a[data-fork-id='{child_id}']")
        expect(fork).to_have_text(f"run {child_id}")
        expect(page.locator("#fork-list li")).to_contain_text("from step 1 (fresh optimizer)")
        browser.close()
        assert errors == [], f"script errors: {errors}"

"""Hooks that write a run directory: metrics.jsonl, samples.jsonl, log.txt, summary.json.

`metrics.jsonl` holds one JSON object per step with "step"; on resume, rows after the checkpoint's
step are dropped first, so each step appears once. Each line is flushed as it is written, so a
killed process loses no reported step.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import yaml

from trainers.step.hooks import Hooks, RunInfo, TrainResult


def _rewrite_keeping(path: str, max_step: int) -> None:
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        rows = [line for line in f if line.strip()]
    kept = []
    for line in rows:
        try:
            if json.loads(line)["step"] <= max_step:
                kept.append(line)
        except (ValueError, KeyError):
            continue  # a line cut short by a kill
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(tmp, path)


class RunFilesHooks(Hooks):
    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        self.metrics_path = os.path.join(run_dir, "metrics.jsonl")
        self.samples_path = os.path.join(run_dir, "samples.jsonl")
        self.log_path = os.path.join(run_dir, "log.txt")

    def _append(self, path: str, row: dict[str, Any]) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def on_start(self, info: RunInfo) -> None:
        with open(os.path.join(self.run_dir, "config.yaml"), "w", encoding="utf-8") as f:
            yaml.safe_dump(info.config, f, sort_keys=False)
        if info.start_step == 0:  # a fresh run: nothing from an earlier attempt survives
            for path in (self.metrics_path, self.samples_path):
                _rewrite_keeping(path, 0)

    def on_resume(self, step: int) -> None:
        _rewrite_keeping(self.metrics_path, step)
        _rewrite_keeping(self.samples_path, step)

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        self._append(self.metrics_path, {"step": step, **metrics})

    def on_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            self._append(self.samples_path, {"step": step, **sample})

    def on_log(self, message: str, level: str = "info") -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {level.upper()} {message}\n")

    def on_end(self, result: TrainResult) -> None:
        summary = {
            "status": result.status,
            "final_step": result.final_step,
            "params_digest": result.params_digest,
            "metrics": result.metrics,
        }
        tmp = os.path.join(self.run_dir, "summary.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
        os.replace(tmp, os.path.join(self.run_dir, "summary.json"))

"""The trainer's run files (trainers.loop.run_files: metrics.jsonl, log.txt, summary.json) for a
platform run: `summary.json` names the status the platform gives the run. The trainer knows only
"cancelled" for a stop; a sweep's pruned trial (Run.stop_as == "pruned") ends as `pruned`, and its
summary says so too."""

from __future__ import annotations

import dataclasses

from experiments.models import Run
from trainers.loop.run_files import RunFilesHooks
from trainers.step.hooks import TrainResult


class PlatformRunFilesHooks(RunFilesHooks):
    def __init__(self, run_dir: str, run_id: int):
        super().__init__(run_dir)
        self.run_id = run_id

    def on_end(self, result: TrainResult) -> None:
        if result.status == "cancelled":
            stop_as = Run.objects.filter(pk=self.run_id).values_list("stop_as", flat=True).first() or ""
            result = dataclasses.replace(result, status=Run(stop_as=stop_as).stopped_status)
        super().on_end(result)

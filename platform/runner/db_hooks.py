"""`DatabaseHooks`: the trainer's reports written to the platform's database.

Metric points and rollout samples are buffered and written in one transaction per flush (one
bulk upsert per table), at most every `flush_interval_s` and always on a checkpoint, a log line and
the end; a background thread writes what has waited flush_interval_s. So the dashboard sees a step
within about flush_interval_s (+ one write), while a 0.76 s step pays well under 2 % for reporting.

Non-finite metric values (a diverged step: NaN, +inf, -inf) are stored as such, never dropped
(MetricPoint.value: NULL is NaN; see experiments.metric_series.storable_value), with one warning
event per metric name; in a checkpoint's metrics JSON they are the strings "NaN", "Infinity",
"-Infinity" (metric_series.json_value, as in the API).

A (run, name, step) point is an upsert: a step replayed after a resume replaces its earlier value
instead of doubling it, and `on_resume(step)` deletes everything recorded after the checkpoint it
resumes from.

A sample's prompt is stored as readable text (experiments.sample_text): a string as it is; with
`chat_prompts` (runner.sample_prompts: the run renders prompts with its model's chat template) the
text the model was given, special tokens included, with the messages in `extra`; a message list
otherwise as its JSON, the messages in `extra`. Every other key the trainer sends (a multi-turn
episode's turns, reward parts, end reason: experiments.sample_episodes) is kept in `extra`, with
NaN and infinities spelled as strings (not JSON: the databases' JSON checks refuse them).

Usable on its own (e.g. by a benchmark): `DatabaseHooks(run_id, attempt)` needs only an existing
Run row. Writes that update the Run itself are guarded by `attempt`, so a superseded attempt cannot
move the run's progress.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from experiments.metric_series import json_value, storable_value
from experiments.models import Checkpoint, MetricPoint, RolloutSample, Run, RunEvent, SampleKind
from experiments.sample_episodes import json_safe
from experiments.sample_query import prompt_hash
from experiments.sample_text import stored_prompt
from experiments.signals import metrics_reported
from trainers.step.hooks import Hooks, RunInfo, TrainResult

log = logging.getLogger(__name__)
SAMPLE_FIELDS = ("prompt", "completion", "answer", "reward", "advantage", "kind", "group")


def _sample_kind(value: Any) -> str:
    return SampleKind.EVAL if value == SampleKind.EVAL else SampleKind.TRAIN


def _sample_group(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else 0


def _metric_float(value: Any) -> float | None:
    """A reported metric value as a float (NaN and infinities included); None if it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _finite(value: Any) -> float | None:
    """A finite float, else None (a sample's reward, the run's latest reward)."""
    number = _metric_float(value)
    return number if number is not None and math.isfinite(number) else None


def _json_safe(metrics: dict[str, Any]) -> dict[str, float | str | None]:
    """NaN and infinities are not JSON (PostgreSQL's jsonb refuses them): spelled as the API does
    ("NaN", "Infinity", "-Infinity"); a value that is not a number becomes null."""
    out: dict[str, float | str | None] = {}
    for name, value in metrics.items():
        number = _metric_float(value)
        out[name] = None if number is None else json_value(number)
    return out


def artifacts_relative(path: str) -> str:
    """`path` relative to settings.ARTIFACTS_DIR when it lies under it, else unchanged."""
    root = os.path.abspath(settings.ARTIFACTS_DIR)
    path = os.path.abspath(path)
    return os.path.relpath(path, root) if os.path.commonpath([root, path]) == root else path


class DatabaseHooks(Hooks):
    """The trainer's reports as database rows (see the module docstring).

    With `background_flush` (default), a daemon thread writes what has waited `flush_interval_s`
    even if no further report comes (a step followed by a long evaluation is still seen in time).
    It uses its own database connection: turn it off where the Run row is not committed (inside
    a test's transaction).

    `chat_prompts`: a callable prompt -> (rendered text, messages) for a run whose prompts go
    through a chat template (runner.sample_prompts.chat_prompts_for), or None."""

    def __init__(
        self,
        run_id: int,
        attempt: int,
        flush_interval_s: float = 0.5,
        background_flush: bool = True,
        chat_prompts: Callable[[Any], tuple[str, list[dict]]] | None = None,
    ):
        self.run_id = run_id
        self.chat_prompts = chat_prompts
        self.attempt = attempt
        self.flush_interval_s = flush_interval_s
        self.background_flush = background_flush
        self._points: dict[tuple[str, int], MetricPoint] = {}
        self._samples: list[RolloutSample] = []
        self._last_step: int | None = None
        self._last_reward: float | None = None
        self._last_flush = float("-inf")  # monotonic; the first step flushes at once
        self._buffered_since: float | None = None  # monotonic time the oldest unwritten report came
        self._warned: set[str] = set()  # metric names already reported as non-finite
        self.flushes = 0  # how many flushes wrote something (for tests and benchmarks)
        # (kind, step) of the samples this object wrote; rows of earlier attempts after the start
        # step are deleted by on_start / on_resume, so a step's samples of one kind need a delete
        # only when re-reported (a step's eval samples follow its train samples: not a re-report).
        self._sample_steps: set[tuple[str, int]] = set()
        self._buffer_lock = threading.Lock()  # held only to add to or swap the buffers
        self._write_lock = threading.Lock()  # one flush at a time, written in the order taken
        self._closed = threading.Event()
        self._flusher: threading.Thread | None = None

    # -- buffering ------------------------------------------------------------------------------

    def on_step(self, step: int, metrics: dict[str, float]) -> None:
        now = time.time()
        points = {}
        for name, value in metrics.items():
            v = _metric_float(value)
            if v is None:
                continue  # not a number at all: nothing to chart
            if not math.isfinite(v):
                self._warn_non_finite(name, step, v)
            points[(name, step)] = MetricPoint(
                run_id=self.run_id, name=name, step=step, value=storable_value(v), wall_time=now
            )
        reward = _finite(metrics.get("reward/mean"))
        with self._buffer_lock:
            self._points.update(points)
            self._last_step = step
            if reward is not None:
                self._last_reward = reward
            if self._buffered_since is None:
                self._buffered_since = time.monotonic()
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()
        else:
            self._start_flusher()

    def on_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        rows = []
        for index, sample in enumerate(samples):
            answer = sample.get("answer")
            prompt, prompt_extra = stored_prompt(sample.get("prompt", ""), self._rendered(sample.get("prompt", "")))
            rows.append(
                RolloutSample(
                    run_id=self.run_id,
                    step=step,
                    index=index,
                    kind=_sample_kind(sample.get("kind")),
                    group=_sample_group(sample.get("group")),
                    prompt_hash=prompt_hash(prompt),
                    prompt=prompt,
                    completion=str(sample.get("completion", "")),
                    answer="" if answer is None else str(answer),
                    reward=_finite(sample.get("reward")),
                    advantage=_finite(sample.get("advantage")),
                    extra=json_safe({**{k: v for k, v in sample.items() if k not in SAMPLE_FIELDS}, **prompt_extra}),
                )
            )
        with self._buffer_lock:
            self._samples.extend(rows)
            if self._buffered_since is None:
                self._buffered_since = time.monotonic()

    def _rendered(self, prompt: Any) -> tuple[str, list[dict]] | None:
        """The chat template's text and messages of `prompt`, or None (no template, or it failed:
        the prompt is then stored as it came)."""
        if self.chat_prompts is None:
            return None
        try:
            return self.chat_prompts(prompt)
        except Exception:  # noqa: BLE001 - display only; the trainer reports its own template errors
            log.warning("run %s: cannot render a sample prompt with the chat template", self.run_id, exc_info=True)
            return None

    def _warn_non_finite(self, name: str, step: int, value: Any) -> None:
        if name not in self._warned:
            self._warned.add(name)
            self._event(f"metric {name} is {value} at step {step} (non-finite; stored and charted as such)", "warning")

    def flush(self) -> None:
        """Write everything buffered: one transaction, one bulk upsert per table, one Run update;
        then, once committed, `experiments.signals.metrics_reported` with the metric names written
        (a sweep judges its trial's pruning from it)."""
        names, step = self._write()
        if names:
            for receiver, error in metrics_reported.send_robust(sender=Run, run_id=self.run_id, names=names, step=step):
                if isinstance(error, Exception):
                    log.error("run %s: a metrics_reported receiver (%s) failed: %r", self.run_id, receiver, error)

    def _write(self) -> tuple[frozenset[str], int | None]:
        """`flush`'s writes; returns the metric names written and the last step."""
        with self._write_lock:
            with self._buffer_lock:
                self._last_flush = time.monotonic()
                points, samples = list(self._points.values()), self._samples
                self._points, self._samples, self._buffered_since = {}, [], None
                last_step, last_reward = self._last_step, self._last_reward
            if not points and not samples:
                return frozenset(), None
            with transaction.atomic():
                if points:
                    MetricPoint.objects.bulk_create(
                        points,
                        update_conflicts=True,
                        unique_fields=["run", "name", "step"],
                        update_fields=["value", "wall_time"],
                    )
                if samples:
                    reported = {(s.kind, s.step) for s in samples}
                    for kind, step in reported & self._sample_steps:  # reported again: replace it
                        RolloutSample.objects.filter(run_id=self.run_id, kind=kind, step=step).delete()
                    self._sample_steps |= reported
                    RolloutSample.objects.bulk_create(samples)
                if last_step is not None:
                    fields: dict[str, Any] = {"step": last_step}
                    if last_reward is not None:
                        fields["latest_reward"] = last_reward
                    Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(**fields)
            self.flushes += 1
            return frozenset(p.name for p in points), last_step

    # -- the background flusher -----------------------------------------------------------------

    def _start_flusher(self) -> None:
        if self.background_flush and self._flusher is None and not self._closed.is_set():
            self._flusher = threading.Thread(target=self._flush_when_due, name=f"run-{self.run_id}-flush", daemon=True)
            self._flusher.start()

    def _flush_when_due(self) -> None:
        interval_s = max(self.flush_interval_s, 0.05)
        try:
            while not self._closed.wait(interval_s / 2):
                since = self._buffered_since
                if since is not None and time.monotonic() - since >= interval_s:
                    try:
                        self.flush()
                    except Exception:  # noqa: BLE001 - the training thread's next flush retries
                        log.exception("run %s: background flush failed", self.run_id)
        finally:
            connection.close()  # this thread's own connection

    def close(self) -> None:
        """Write what is left and stop the background flusher (on_end does this)."""
        self._closed.set()
        if self._flusher is not None:
            self._flusher.join(timeout=10)
        self.flush()

    # -- everything else flushes first, so rows appear in the order they happened ---------------

    def _event(self, message: str, level: str = "info", kind: str = "log") -> None:
        RunEvent.objects.create(run_id=self.run_id, attempt=self.attempt, level=level, kind=kind, message=message)

    def _delete_after(self, step: int) -> None:
        with self._write_lock, transaction.atomic():
            self._sample_steps = {(kind, s) for kind, s in self._sample_steps if s <= step}
            for model in (MetricPoint, RolloutSample, Checkpoint):
                model.objects.filter(run_id=self.run_id, step__gt=step).delete()

    def on_start(self, info: RunInfo) -> None:
        self.flush()
        # A fresh start (no checkpoint) keeps nothing from an earlier attempt; a resume has
        # already dropped what came after its checkpoint (on_resume).
        self._delete_after(info.start_step)
        Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(step=info.start_step, max_steps=info.max_steps)
        where = f"resuming after step {info.start_step}" if info.start_step else "starting"
        self._event(f"{where} of {info.max_steps} ({info.param_count:,} parameters)\n{info.plan_text}", kind="system")

    def on_resume(self, step: int) -> None:
        self.flush()
        self._delete_after(step)
        Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(step=step)
        self._event(f"resuming from checkpoint at step {step}", kind="system")

    def on_checkpoint(self, step: int, path: str, size_bytes: int, metrics: dict[str, float]) -> None:
        self.flush()
        Checkpoint.objects.bulk_create(
            [
                Checkpoint(
                    run_id=self.run_id,
                    step=step,
                    path=artifacts_relative(path),
                    size_bytes=size_bytes,
                    metrics=_json_safe(metrics),
                )
            ],
            update_conflicts=True,
            unique_fields=["run", "step"],
            update_fields=["path", "size_bytes", "metrics"],
        )
        self._forget_deleted_checkpoints()

    def _forget_deleted_checkpoints(self) -> None:
        """The trainer keeps only its last few checkpoints: drop rows whose directory is gone."""
        root = settings.ARTIFACTS_DIR
        gone = [
            pk
            for pk, rel in Checkpoint.objects.filter(run_id=self.run_id).values_list("pk", "path")
            if not os.path.exists(os.path.join(root, rel))
        ]
        if gone:
            Checkpoint.objects.filter(pk__in=gone).delete()

    def on_log(self, message: str, level: str = "info") -> None:
        self.flush()
        self._event(message, level)

    def on_end(self, result: TrainResult) -> None:
        self.close()
        Run.objects.filter(pk=self.run_id, attempt=self.attempt).update(step=result.final_step)

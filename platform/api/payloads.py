"""What goes in and out of the API: experiment input checked against the trainer's one schema,
and the JSON shapes of experiments, runs and what runs report."""

from __future__ import annotations

import math
from typing import Any

from trainers.config import apply_overrides

from experiments import configs, run_filters, run_labels, sample_episodes, sample_text
from experiments.models import Checkpoint, Experiment, RolloutSample, Run, RunEvent, text_problem
from experiments.shown_paths import shown

NAME_MAX_CHARS = Experiment._meta.get_field("name").max_length


class InvalidInput(Exception):
    """{field: message} for every problem; field names are the schema's dotted paths for config
    problems (`batch.mini_batch_prompts`), else the payload key (`name`)."""

    def __init__(self, errors: dict[str, str]):
        super().__init__(errors)
        self.errors = errors


def experiment_input(data: dict[str, Any], partial: bool = False, owner=None) -> dict[str, Any]:
    """Check a create/update payload: `name`, `description`, and the config as `config` (an
    object) or `config_yaml` (YAML text), with `overrides` ("dotted.path=value" strings, the CLI
    client's `--set`) applied to it before it is validated, so they can repair it. Returns the
    fields to set, with the config validated and normalised (experiments.configs: the schema, the
    guarded YAML loader, the dataset roots, `owner`'s datasets); InvalidInput otherwise. `partial`
    (PATCH): every field is optional."""
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    if "name" in data or not partial:
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            errors["name"] = "required: a non-empty string"
        elif text_problem(name):
            errors["name"] = text_problem(name)
        elif len(name.strip()) > NAME_MAX_CHARS:
            errors["name"] = f"at most {NAME_MAX_CHARS} characters (got {len(name.strip())})"
        else:
            out["name"] = name.strip()
    if "description" in data:
        description = data["description"]
        if description is not None and not isinstance(description, str):
            errors["description"] = "must be a string"
        elif text_problem(description):
            errors["description"] = text_problem(description)
        else:
            out["description"] = description or ""
    has_config, has_yaml = "config" in data, "config_yaml" in data
    overrides = data.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        errors["overrides"] = 'must be a list of "dotted.path=value" strings, e.g. ["train.max_steps=50"]'
    elif overrides and not (has_config or has_yaml):
        errors["overrides"] = "apply to a config: give config or config_yaml with them"
    elif has_config and has_yaml:
        errors["config"] = "give either config (an object) or config_yaml (YAML text), not both"
    elif has_yaml and not isinstance(data["config_yaml"], str):
        errors["config_yaml"] = "must be a string of YAML"
    elif has_config or has_yaml:
        try:
            raw = configs.load_yaml(data["config_yaml"]) if has_yaml else data["config"]
            if overrides and isinstance(raw, dict):  # else parse names what the config data lacks
                raw = apply_overrides(raw, overrides)
            out["config"] = configs.validated(raw, owner)
        except configs.ConfigError as exc:
            errors.update(exc.as_dict())
    elif not partial:
        errors["config"] = "required: the experiment config as an object (config) or YAML text (config_yaml)"
    if errors:
        raise InvalidInput(errors)
    return out


# --- output shapes ----------------------------------------------------------------------------


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: those become null."""
    return value if value is None or math.isfinite(value) else None


def experiment_summary(experiment: Experiment) -> dict[str, Any]:
    """List entry. Expects `run_count` and `version` annotations when listed (else queries)."""
    version = getattr(experiment, "version", None)
    if version is None and not hasattr(experiment, "version"):
        latest = experiment.latest_version
        version = latest.number if latest else None
    run_count = getattr(experiment, "run_count", None)
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "description": experiment.description,
        "owner": experiment.owner.get_username(),
        "version": version,
        "run_count": experiment.runs.count() if run_count is None else run_count,
        "created_at": experiment.created_at,
        "updated_at": experiment.updated_at,
    }


def experiment_detail(experiment: Experiment) -> dict[str, Any]:
    runs = (experiment.runs.select_related("experiment", "config_version").prefetch_related("tags")
            .order_by("-created_at")[:100])
    versions = experiment.versions.order_by("-number")
    return {
        **experiment_summary(experiment),
        "config": experiment.config,
        "versions": [{"number": v.number, "created_at": v.created_at, "note": v.note} for v in versions],
        "runs": [run_detail(r) for r in runs],
    }


def run_detail(run: Run) -> dict[str, Any]:
    """A run's status, progress, tags and notes (the experiment should be select_related, the tags
    prefetched when listing)."""
    return {
        "id": run.pk,
        "name": run.name,
        "status": run.status,
        "step": run.step,
        "max_steps": run.max_steps,
        "progress": run.progress,
        "restarts": run.restarts,
        "attempt": run.attempt,
        "max_restarts": run.max_restarts,
        "worker": run.worker_host,
        "worker_pid": run.worker_pid,
        "heartbeat_at": run.heartbeat_at,
        "created_at": run.created_at,
        "queued_at": run.queued_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "duration_s": run.duration_s,
        "running_s": run.running_s,
        "latest_reward": finite(run.latest_reward),
        "error": shown(run.error),  # server paths relative to their root, here and in events
        "params_digest": run.params_digest,
        "config_version": run.config_version.number if run.config_version_id else None,
        "experiment": {"id": run.experiment_id, "name": run.experiment.name},
        "tags": run_labels.tag_names(run),
        "notes": run.notes,
        # lineage (runner.forks): the parent run's id, its checkpoint step, "fresh" | "continued"
        "forked_from": run.forked_from_id,
        "forked_from_step": run.forked_from_step,
        "fork_optimizer": run.fork_optimizer or None,
    }


def run_list_entry(run: Run, query: run_filters.RunQuery) -> dict[str, Any]:
    """A row of the runs table (GET /api/runs): the run, its owner's username and {metric: value
    at its latest step} of the query's metric columns (the queryset comes from run_filters.apply,
    with experiment__owner select_related and tags prefetched)."""
    values = run_filters.latest_values(run, query)
    return {**run_detail(run), "owner": run.experiment.owner.get_username(),
            "metrics": {name: finite(value) for name, value in values.items()}}


def sample_json(sample: RolloutSample) -> dict[str, Any]:
    """A rollout sample; `prompt_segments` / `completion_segments` are the text cut into plain text,
    special tokens and role names for display (experiments.sample_text), `prompt_messages` the chat
    messages behind the prompt when it had any. `truncated` (the completion ran into max_new_tokens),
    `in_loss` (False: out of the loss, by the overlong filter or a capped dynamic-sampling step) and
    `overlong_penalty` (the soft overlong reward) are null where the trainer wrote no such key.
    A multi-turn sample adds `episode` (experiments.sample_episodes.episode: env, turns with role,
    text and tokens, reward_parts, end_reason, error (server paths shown relative to their root),
    tool_calls, tool_errors); a single-turn one has no such key, as before."""
    extra = sample.extra if isinstance(sample.extra, dict) else {}
    messages = extra.get("prompt_messages")
    penalty = extra.get("overlong_penalty")
    shown_episode = sample_episodes.episode(extra)
    if shown_episode is not None and shown_episode["error"] is not None:
        shown_episode["error"] = shown(shown_episode["error"])  # an environment's traceback: no server paths
    return {
        "index": sample.index,
        "prompt": sample.prompt,
        "prompt_messages": messages if isinstance(messages, list) else None,
        "prompt_segments": sample_text.prompt_segments(sample.prompt, extra),
        "completion": sample.completion,
        "completion_segments": sample_text.segments(sample.completion),
        "answer": sample.answer,
        "reward": finite(sample.reward),
        "advantage": finite(sample.advantage),
        "truncated": extra.get("truncated") if isinstance(extra.get("truncated"), bool) else None,
        "in_loss": extra.get("in_loss") if isinstance(extra.get("in_loss"), bool) else None,
        "overlong_penalty": (finite(penalty) if isinstance(penalty, (int, float)) and not isinstance(penalty, bool)
                             else None),
        **({"episode": shown_episode} if shown_episode is not None else {}),
    }


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "step": checkpoint.step,
        "path": checkpoint.path,
        "size_bytes": checkpoint.size_bytes,
        "metrics": checkpoint.metrics,
        "created_at": checkpoint.created_at,
    }


def event_json(event: RunEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "created_at": event.created_at,
        "attempt": event.attempt,
        "level": event.level,
        "kind": event.kind,
        "message": shown(event.message),
    }
